"""A drafter that reads the target (an MTP head) is one more `--drafter` value:
calibrated through the engine, run by specmlx, and skipped for mlx-lm."""

from __future__ import annotations

import json

import pytest

from specmlx.bench.calibrate import time_drafter_step
from specmlx.bench.cli import main
from specmlx.models import mtp as mtp_model

from .. import tiny


@pytest.fixture(scope="module")
def mtp_dir(tmp_path_factory, target_args):
    folder = tmp_path_factory.mktemp("mtp") / "head"
    mtp_model.save_mtp(tiny.mtp(target_args, seed=3), folder)
    return folder


def test_calibration_times_a_head_that_actually_drafts(tokenizer, target, target_args, vocab):
    """An unattached head, with no hidden states, would propose nothing and be
    timed doing nothing: the timed steps must each draft a token."""
    from specmlx.drafters.mtp import MTPDrafter

    class Counting(MTPDrafter):
        proposed = 0

        def draft(self, *args, **kwargs):
            draft = super().draft(*args, **kwargs)
            self.proposed += draft.size
            return draft

    drafter = Counting(tiny.mtp(target_args, seed=3), vocab)
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    assert time_drafter_step(target, drafter, prompt, steps=3) > 0
    assert drafter.proposed >= 3 + 1  # each timed step and the warm-up


def test_bench_runs_an_mtp_head_in_specmlx_only(capsys, tmp_path, model_dirs, mtp_dir):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "p0", "kind": "code", "prompt": "def add(a, b):"}) + "\n")
    out = tmp_path / "bench.json"
    code = main(["--target", str(model_dirs["target"]), "--drafter", f"{mtp_dir},ngram",
                 "--prompts", str(prompts), "--max-tokens", "8", "--num-draft", "2", "--temps", "0",
                 "--calibration-steps", "1", "--warmup-tokens", "0", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    rows = {(r["mode"], r["drafter"]): r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {("target", ""), ("specmlx", "head"), ("specmlx", "ngram")}
    head = rows[("specmlx", "head")]
    assert head["same_as_target"] == 1 and head["cost_ratio"] > 0 and head["predicted_speedup"] > 0
