"""`python -m specmlx.bench.vision` prints a row for each image size, its rows what the processor makes of it;
run here on a tower two blocks deep (the real one takes minutes on this CPU)."""

from __future__ import annotations

from specmlx.bench import vision


def test_it_prints_a_row_for_each_size_with_the_rows_the_processor_makes(monkeypatch, capsys):
    monkeypatch.setitem(vision.TOWER, "depth", 2)
    monkeypatch.setitem(vision.TOWER, "hidden_size", 64)
    monkeypatch.setitem(vision.TOWER, "intermediate_size", 128)
    monkeypatch.setitem(vision.TOWER, "out_hidden_size", 32)
    monkeypatch.setattr(vision, "SIZES", ((64, 32, "small"), (96, 64, "wider")))
    assert vision.main(["--repeats", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    # the processor's least image is 65,536 pixels: 64 x 32 grows to 384 x 192 (24 x 12 patches of 16), 96 x 64
    # to 320 x 224 (20 x 14); a row is 2 x 2 patches
    assert [(r[0], int(r[2]), int(r[3])) for r in rows] == [("64x32", 288, 72), ("96x64", 280, 70)]
    assert all(float(r[5]) > 0 for r in rows)
