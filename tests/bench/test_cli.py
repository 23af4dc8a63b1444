"""`python -m specmlx.bench`: one-line errors, and a whole run on tiny model directories."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specmlx.bench.cli import main, parse_num_drafts, parse_temps
from specmlx.errors import SpecmlxError

PROMPTS = [
    {"id": "p0", "kind": "code", "prompt": "def add(a, b):\n    return a + b\n\ndef add(a, b):"},
    {"id": "p1", "kind": "code", "prompt": "for i in range(10):\n    print(i"},
    {"id": "p2", "kind": "text", "prompt": "The quick brown fox"},
]


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["--temps", "0,hot"], "--temps: 'hot' is not a number"),
    (["--temps", "-1"], "temperature must be >= 0"),
    (["--temps", ","], "--temps: give at least one value"),
    (["--num-draft", "2,0"], "--num-draft: draft lengths must be >= 1"),
    (["--num-draft", "two"], "--num-draft: 'two' is not a whole number"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1"),
    (["--limit", "0"], "--limit must be >= 1"),
    (["--max-tokens", "many"], "argument --max-tokens: invalid int value"),
    (["--preset", "nope"], "unknown preset 'nope'"),
    (["--preset", "gemma-3-270m", "--target", "x"], "not allowed with argument"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--modes", "target,fast"], "--modes: unknown mode 'fast'"),
    (["--kv-bits", "6"], "argument --kv-bits: invalid choice"),
])
def test_bad_arguments_are_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("specmlx bench: error: ") and message in err


def test_a_draft_policy_conflict_is_refused_as_from_every_front_end(capsys, tmp_path, prompts_file):
    """The same line as `specmlx generate` and `specmlx serve` give, before any model loads."""
    code, out, err = run(capsys, "--target", tmp_path / "not-loaded", "--prompts", prompts_file,
                         "--drafter", "ngram,ngram+auto+adaptive")
    assert code == 2 and out == ""
    assert err == ('specmlx bench: error: draft policy "auto+adaptive": auto and adaptive both set the draft '
                   "length: choose one\n")


def test_bad_prompts_and_drafters_fail_before_any_run(capsys, tmp_path, model_dirs, prompts_file):
    code, _, err = run(capsys, "--target", model_dirs["target"], "--prompts", tmp_path / "none.jsonl")
    assert code == 2 and err == f"specmlx bench: error: {tmp_path / 'none.jsonl'}: no such prompts file\n"
    code, _, err = run(capsys, "--target", model_dirs["target"], "--prompts", prompts_file,
                       "--drafter", tmp_path / "missing")
    assert code == 2 and "no such model directory" in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("specmlx bench: error: ") and "run/s" not in err


def test_an_unwritable_output_fails_before_loading(capsys, tmp_path, prompts_file):
    code, _, err = run(capsys, "--prompts", prompts_file, "--json", tmp_path / "no" / "out.json")
    assert code == 2 and err == f"specmlx bench: error: --json: {tmp_path / 'no'} is not a directory\n"


def test_the_module_entry_point_reports_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specmlx.bench", "--prompts", tmp_path / "x.jsonl"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"specmlx bench: error: {tmp_path / 'x.jsonl'}: no such prompts file\n"


def test_list_parsing():
    assert parse_temps("0, 0.7,0") == (0.0, 0.7)
    assert parse_num_drafts("1,2,4,6,8") == (1, 2, 4, 6, 8)
    with pytest.raises(SpecmlxError):
        parse_temps("nan")


def test_end_to_end_on_tiny_models(capsys, tmp_path, model_dirs, prompts_file):
    out_json = tmp_path / "bench.json"
    code, out, err = run(capsys, "--target", model_dirs["target"], "--drafter", model_dirs["drafter"],
                         "--drafter", "ngram", "--prompts", prompts_file, "--limit", 2,
                         "--max-tokens", 8, "--num-draft", "1,2", "--temps", "0,0.7",
                         "--calibration-steps", 2, "--warmup-tokens", 2, "--json", out_json)
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    results = doc["results"]
    combos = {(r["mode"], r["drafter"], r["temp"], r["num_draft"]) for r in results}
    expected = {("target", "", t, 0) for t in (0.0, 0.7)}
    expected |= {(mode, "drafter", t, k) for mode in ("mlx-lm-spec", "specmlx") for t in (0.0, 0.7) for k in (1, 2)}
    expected |= {("specmlx", "ngram", t, k) for t in (0.0, 0.7) for k in (1, 2)}
    assert combos == expected and len(results) == len(expected)
    for row in results:
        assert row["prompts"] == 2 and 0 < row["tokens"] <= 2 * 8
        assert row["tokens_per_s"] > 0 and row["mean_accepted"] >= 1.0
        if row["mode"] == "target":
            assert row["acceptance_rate"] is None and row["speedup"] is None
        else:
            assert 0.0 <= row["acceptance_rate"] <= 1.0
            assert row["mean_accepted"] <= row["num_draft"] + 1
            assert row["speedup"] > 0 and row["predicted_speedup"] > 0
        if row["mode"] == "specmlx" and row["drafter"] == "drafter":
            assert row["vs_mlx_lm"] > 0
        if row["temp"] == 0.0 and row["mode"] != "target":
            assert row["same_as_target"] == 2  # greedy decoding is exact in every mode
    assert len(doc["runs"]) == 2 * len(results)  # the warm-up pass is not kept
    assert doc["prompts_done"] == 2
    assert doc["by_kind"] == [] and "per kind" not in out  # both prompts are code
    assert doc["config"]["prompt_ids"] == ["p0", "p1"] and doc["config"]["chat_template"] is True
    assert {"backend", "blas", "cpu", "mlx", "mlx_lm"} <= set(doc["machine"])
    assert set(doc["calibration"]["drafter_step_s"]) == {"drafter", "ngram"}
    # stdout is the report alone: the table has one line per result
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(results)
    assert "BLAS:" in out and "bench:" not in out
    assert "bench: 100%" in err.replace("\r", "\n")  # the progress bar went to stderr


def test_prompts_of_two_kinds_get_a_table_per_kind(capsys, tmp_path, model_dirs, prompts_file):
    out_json = tmp_path / "bench.json"
    code, out, err = run(capsys, "--target", model_dirs["target"], "--drafter", "ngram", "--prompts", prompts_file,
                         "--max-tokens", 6, "--num-draft", 2, "--temps", "0", "--modes", "target,specmlx",
                         "--calibration-steps", 0, "--warmup-tokens", 0, "--json", out_json)
    assert code == 0, err
    per_kind = json.loads(out_json.read_text())["by_kind"]
    assert [(r["mode"], r["kind"], r["prompts"]) for r in per_kind] == [
        ("target", "code", 2), ("target", "text", 1), ("specmlx", "code", 2), ("specmlx", "text", 1)]
    assert all(r["speedup"] > 0 and r["mean_accepted"] >= 1 for r in per_kind if r["mode"] == "specmlx")
    assert "per kind of prompt" in out
    assert sum(line.startswith("| specmlx | ngram | 0 | 2 | ") for line in out.splitlines()) == 1 + 2


def test_a_prediction_variant_reports_the_prediction_tokens_it_copied(capsys, tmp_path, model_dirs):
    """The tiny target writes random bytes, so its predictions are mostly rejected: this checks the counts,
    and that the answers are the target's own."""
    prompts = tmp_path / "edits.jsonl"
    prompts.write_text("".join(json.dumps(p | {"prediction": "    return a + b\n"}) + "\n" for p in PROMPTS[:2]))
    out_json = tmp_path / "bench.json"
    drafter = str(model_dirs["drafter"])
    code, out, err = run(capsys, "--target", model_dirs["target"], "--drafter", f"{drafter},{drafter}+prediction",
                         "--modes", "target,specmlx", "--prompts", prompts, "--max-tokens", 12, "--num-draft", "2",
                         "--temps", "0", "--calibration-steps", 0, "--warmup-tokens", 0, "--json", out_json)
    assert code == 0, err
    rows = {r["drafter"]: r for r in json.loads(out_json.read_text())["results"]}
    assert rows["drafter"]["prediction_drafted"] is None
    predicted = rows["drafter+prediction"]
    assert predicted["prediction_drafted"] >= 2 * 8  # each first round copies the room (11 of 12 tokens), cut to 8 (`widths.cut`)
    assert 0 <= predicted["prediction_accepted"] <= predicted["prediction_drafted"]
    assert predicted["same_as_target"] == 2
    assert f"| {predicted['prediction_accepted']} of {predicted['prediction_drafted']} |" in out


def test_a_schema_variant_constrains_each_answer_and_checks_it_against_plain_constrained_decoding(
        capsys, tmp_path, model_dirs, monkeypatch):
    """+schema answers under each prompt's schema: a drafted run's tokens must equal the run that drafts
    nothing under it (plain constrained decoding); the unconstrained run's, the target's alone."""
    from specmlx import grammar

    compiled, honest = [], grammar.Grammar.json_schema
    monkeypatch.setattr(grammar.Grammar, "json_schema", staticmethod(lambda s, **kw: compiled.append(s) or honest(s, **kw)))
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    prompts = tmp_path / "json.jsonl"
    prompts.write_text("".join(json.dumps(p | {"schema": schema}) + "\n" for p in PROMPTS[:2]))
    out_json = tmp_path / "bench.json"
    drafter = str(model_dirs["drafter"])
    code, out, err = run(capsys, "--target", model_dirs["target"], "--drafter", f"none+schema,{drafter},{drafter}+schema",
                         "--modes", "target,specmlx", "--prompts", prompts, "--max-tokens", 16, "--num-draft", "2",
                         "--temps", "0", "--calibration-steps", 0, "--warmup-tokens", 0, "--json", out_json)
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    rows = {r["drafter"]: r for r in doc["results"] if r["mode"] == "specmlx"}
    assert rows["drafter"]["same_as_target"] == 2 and rows["drafter+schema"]["same_as_target"] == 2
    assert compiled == [schema] * 4  # each prompt, in each +schema run
    assert {r["drafter"] for r in doc["runs"] if r["constrained"]} == {"none+schema", "drafter+schema"}


def test_kv_bits_quantize_every_modes_cache_the_baseline_included(capsys, tmp_path, tokenizer, vocab,
                                                                  prompts_file):
    """The tokens of every mode at T=0 are the baseline's, which runs the same quantized cache (its figures
    compare like with like); the report and the JSON say so."""
    from tests import tiny

    args = tiny.qwen2_args(vocab, hidden=128)  # heads of 32: a group of 32 quantizes them
    target = tiny.build(args, seed=1, sharpness=1.0)
    path = tiny.save_model(target, args, tokenizer, tmp_path / "wide")
    drafter = tiny.save_model(tiny.perturbed(target, args, 0.05, seed=3), args, tokenizer, tmp_path / "near")
    out_json = tmp_path / "bench.json"
    code, out, err = run(capsys, "--target", path, "--drafter", drafter, "--drafter", "ngram", "--prompts",
                         prompts_file, "--limit", 2, "--max-tokens", 32, "--num-draft", 2, "--temps", 0,
                         "--calibration-steps", 1, "--warmup-tokens", 0, "--kv-bits", 4, "--kv-group-size", 32,
                         "--json", out_json)
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["config"]["kv_bits"] == {"bits": 4, "group_size": 32}
    assert "keys and values at 4 bits in groups of 32 in every mode" in out
    rows = [r for r in doc["results"] if r["mode"] != "target"]
    assert len(rows) == 3 and all(r["same_as_target"] == 2 for r in rows)


def test_modes_and_a_p_min_variant_end_to_end(capsys, tmp_path, model_dirs, prompts_file):
    out_json = tmp_path / "bench.json"
    drafter = str(model_dirs["drafter"])
    code, out, err = run(capsys, "--target", model_dirs["target"], "--drafter", f"{drafter},{drafter}+pmin=0.5",
                         "--modes", "mlx-lm-spec,specmlx", "--prompts", prompts_file, "--limit", 1,
                         "--max-tokens", 8, "--num-draft", "3", "--temps", "0",
                         "--calibration-steps", 0, "--warmup-tokens", 0, "--json", out_json)
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    combos = [(r["mode"], r["drafter"]) for r in doc["results"]]
    assert combos == [("mlx-lm-spec", "drafter"), ("specmlx", "drafter"), ("specmlx", "drafter+pmin=0.5")]
    assert all(r["speedup"] is None for r in doc["results"])  # no target run to compare with
    assert doc["config"]["modes"] == ["mlx-lm-spec", "specmlx"]
    code, _, err = run(capsys, "--target", model_dirs["target"], "--drafter", "ngram", "--modes", "mlx-lm-spec",
                       "--prompts", prompts_file, "--limit", 1, "--calibration-steps", 0)
    assert code == 2 and "nothing to run" in err and "Traceback" not in err


def test_an_interrupted_run_keeps_the_prompts_it_finished(capsys, tmp_path, monkeypatch, model_dirs, prompts_file):
    from specmlx.bench import driver

    real_run_one, seen = driver.run_one, []

    def run_one(lineup, prompt, spec, settings, seed):
        if prompt.id == "p1":
            raise KeyboardInterrupt  # Ctrl-C during the second prompt
        seen.append(prompt.id)
        return real_run_one(lineup, prompt, spec, settings, seed)

    monkeypatch.setattr(driver, "run_one", run_one)
    out_json = tmp_path / "bench.json"
    code, _, err = run(capsys, "--target", model_dirs["target"], "--drafter", "ngram", "--prompts", prompts_file,
                       "--max-tokens", 4, "--num-draft", "2", "--temps", "0",
                       "--calibration-steps", 0, "--warmup-tokens", 0, "--json", out_json)
    assert code == 130 and "interrupted" in err and seen
    doc = json.loads(out_json.read_text())
    assert doc["prompts_done"] == 1 and doc["config"]["prompts"] == 3
    assert {r["prompt_id"] for r in doc["runs"]} == {"p0"}
    assert {(r["mode"], r["prompts"]) for r in doc["results"]} == {("target", 1), ("specmlx", 1)}
