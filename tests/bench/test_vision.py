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


def test_gemma4s_tower_makes_at_most_its_budget_of_rows_whatever_the_size(monkeypatch, capsys):
    monkeypatch.setattr(vision, "GEMMA_TOWER", vision.GEMMA_TOWER | {"num_hidden_layers": 1, "hidden_size": 32,
                                                                     "intermediate_size": 64, "num_attention_heads": 2,
                                                                     "num_key_value_heads": 2, "head_dim": 16})
    monkeypatch.setattr(vision, "GEMMA_WIDTH", 32)
    monkeypatch.setattr(vision, "GEMMA_PROCESSOR", vision.GEMMA_PROCESSOR | {"max_soft_tokens": 12})
    monkeypatch.setattr(vision, "SIZES", ((64, 32, "wide"), (480, 480, "square")))
    assert vision.main(["--family", "gemma4", "--repeats", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tower (gemma4): 1 blocks of 32")
    rows = [line.split() for line in out[2:]]
    # each is resized, up or down, to the most patches of 16 within 12 x 9 in steps of 3 x 3 patches: 64 x 32 to
    # 192 x 96 (12 x 6 patches, 8 rows), 480 x 480 to 144 x 144 (9 x 9, 9 rows)
    assert [(r[0], int(r[2]), int(r[3])) for r in rows] == [("64x32", 72, 8), ("480x480", 81, 9)]
    assert all(float(r[5]) > 0 for r in rows)
