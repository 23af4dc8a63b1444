"""The markdown table and the JSON document."""

from __future__ import annotations

from dataclasses import replace

import json

import pytest

from specmlx.bench.calibrate import Calibration
from specmlx.bench.report import COLUMNS, document, markdown_table, render, write_json
from specmlx.bench.runs import Measurement
from specmlx.bench.summary import summarize
from specmlx.errors import SpecmlxError

MACHINE = {"backend": "Device(cpu, 0)", "blas": "OpenBLAS (x)", "cpu": "Test CPU", "cpu_count": 2,
           "mlx": "0", "mlx_lm": "0"}
CONFIG = {"target": "t", "drafters": ["d"], "prompts": 1, "prompts_file": "p.jsonl", "max_tokens": 4,
          "chat_template": True}
CALIBRATION = Calibration(steps=2, context=5, target_step_s=0.1, drafter_step_s={"d": 0.02})


def measurements():
    def m(mode, drafter, k, decode_s, rounds, drafted, accepted):
        return Measurement(mode, drafter, 0.0, k, "a", (1, 2, 3, 4), decode_s, rounds,
                           accepted + rounds, drafted, accepted, "length")
    return [m("target", "", 0, 2.0, 4, 0, 0), m("mlx-lm-spec", "d", 2, 1.5, 2, 4, 2),
            m("specmlx", "d", 2, 1.0, 2, 4, 2)]


def test_table_has_a_header_a_rule_and_one_line_per_row():
    rows = summarize(measurements(), CALIBRATION)
    lines = markdown_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[:1] + lines[2:])
    assert all(line.count("|") == len(COLUMNS) + 1 for line in lines)
    cells = [c.strip() for c in lines[4].strip("|").split("|")]
    row = dict(zip(COLUMNS, cells))
    assert row["mode"] == "specmlx" and row["k"] == "2" and row["tok/s"] == "4.00"
    assert row["× target, total"] == "2.00×" and row["× mlx-lm"] == "1.50×"
    assert row["× target, median (min–max)"] == "2.00× (2.00–2.00)"
    assert row["mean acc."] == "2.00" and row["accept"] == "50%" and row["= target"] == "1/1"
    assert row["predicted ×"] == f"{2.0 / 1.4:.2f}×" and row["ms/round"] == "500.0"
    assert row["lowest × (prompt)"] == "2.00× (a)"
    target = dict(zip(COLUMNS, [c.strip() for c in lines[2].strip("|").split("|")]))
    assert target["× target, total"] == "–" and target["× target, median (min–max)"] == "–"
    assert target["accept"] == "–"


def test_an_automatic_row_shows_auto_and_its_chosen_lengths():
    auto = Measurement("specmlx", "d+auto", 0.0, None, "a", (1, 2, 3, 4), 1.0, 3, 4, 2, 1, "length",
                       fixed_length=False, draft_histogram=(2, 0, 1), plain_rounds=2)
    rows = summarize(measurements()[:1] + [auto], CALIBRATION)
    row = dict(zip(COLUMNS, [c.strip() for c in markdown_table(rows).splitlines()[3].strip("|").split("|")]))
    assert row["k"] == "auto" and row["chosen k"] == "0.67" and row["plain rounds"] == "67%"
    assert row["predicted ×"] == "–"


def test_render_names_backend_blas_and_calibration():
    text = render(summarize(measurements(), CALIBRATION), MACHINE, CONFIG, CALIBRATION)
    assert "backend: Device(cpu, 0)" in text and "BLAS: OpenBLAS (x)" in text
    assert "target 100.0 ms; d 20.00 ms (c = 0.200)" in text
    assert "--profile" in text  # no split measured: says how to get one
    assert "calibration: skipped" in render([], MACHINE, CONFIG, None)
    widths = replace(CALIBRATION, verify_step_s={5: 0.15})
    assert "n=5 150 ms (1.50 steps)" in render([], MACHINE, CONFIG, widths)


def test_json_document_schema(tmp_path):
    rows = summarize(measurements(), CALIBRATION)
    path = tmp_path / "out.json"
    write_json(path, document(rows, measurements(), MACHINE, CONFIG, CALIBRATION))
    doc = json.loads(path.read_text())
    assert set(doc) == {"machine", "config", "calibration", "results", "runs"}
    assert doc["machine"]["blas"] == "OpenBLAS (x)"
    assert doc["calibration"]["drafter_step_s"] == {"d": 0.02}
    assert [r["mode"] for r in doc["results"]] == ["target", "mlx-lm-spec", "specmlx"]
    for row in doc["results"]:
        assert {"mode", "drafter", "temp", "num_draft", "tokens_per_s", "mean_accepted",
                "acceptance_rate", "speedup", "predicted_speedup"} <= set(row)
    assert doc["results"][2]["acceptance_rate"] == pytest.approx(0.5)
    assert len(doc["runs"]) == 3 and doc["runs"][0]["generated"] == 4 and "tokens" not in doc["runs"][0]


def spiky():
    """Three prompts at 2× the target; the third's run slowed by a busy machine to 0.5×."""
    def m(mode, prompt, decode_s):
        return Measurement(mode, "" if mode == "target" else "d", 0.0, 0 if mode == "target" else 2, prompt,
                           (1, 2, 3, 4), decode_s, 2, 4, 2, 2, "length")
    return [run for p, slow in (("a", 1), ("b", 1), ("c", 4)) for run in (m("target", p, 2.0), m("specmlx", p, slow))]


def test_table_and_json_carry_the_median_its_spread_and_every_prompt():
    rows = summarize(spiky(), None)
    cells = [c.strip() for c in markdown_table(rows).splitlines()[3].strip("|").split("|")]
    row = dict(zip(COLUMNS, cells))
    assert row["× target, median (min–max)"] == "2.00× (0.50–2.00)"
    assert row["× target, total"] == "1.00×" and row["lowest × (prompt)"] == "0.50× (c)"
    doc = json.loads(json.dumps(document(rows, spiky(), MACHINE, CONFIG, None)))
    ours = doc["results"][1]
    assert ours["median_speedup"] == pytest.approx(2.0) and ours["speedup"] == pytest.approx(1.0)
    assert (ours["min_speedup"], ours["min_prompt"]) == (pytest.approx(0.5), "c")
    assert (ours["max_speedup"], ours["max_prompt"]) == (pytest.approx(2.0), "a")
    assert ours["prompt_speedups"] == {"a": 2.0, "b": 2.0, "c": 0.5}
    assert "median" in render(rows, MACHINE, CONFIG, None)


def test_unwritable_json_is_one_clear_error(tmp_path):
    with pytest.raises(SpecmlxError, match="cannot write the JSON report"):
        write_json(tmp_path / "no" / "such" / "dir.json", {})
