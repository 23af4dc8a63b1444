"""`specmlx train` end to end on a tiny target: answers, a head, a learning curve; bad input is one line."""

import json
import os

import pytest

from specmlx.models.mtp import load_mtp
from specmlx.train.cli import main

PROMPTS = [f"Write a function number {i}." for i in range(60)]


@pytest.fixture()
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


def args(model_dirs, prompts, out, *extra):
    return ["--target", str(model_dirs["target"]), "--prompts", str(prompts), "--out", str(out),
            "--tokens", "600", "--seq-len", "48", "--answer-tokens", "12", "--gen-batch", "8", "--held-out", "3",
            "--batch", "2", "--draft-vocab", "64", "--vocab-tokens", "3000", "--intermediate-size", "64", "--checkpoint-every", "4", *extra]


def test_a_head_trained_on_the_targets_answers(model_dirs, prompts, tmp_path, capsys):
    out = tmp_path / "head"
    assert main(args(model_dirs, prompts, out, "--steps", "8", "--quantize", "8")) == 0
    said = capsys.readouterr().out
    assert "held-out agreement" in said and f"use --drafter {out}" in said
    report = json.loads((out / "training.json").read_text())
    assert report["source"] == "answers" and report["steps"] == 8 and report["tokens"] >= 600
    assert len((out / "training-log.jsonl").read_text().splitlines()) == 2  # steps 4 and 8
    head = load_mtp(out)
    assert head.config.draft_vocab_size == 64
    assert (out / "features" / "held-out" / "shard-00000.safetensors").exists()


def test_a_learning_curve_resumes_by_point_and_plots(model_dirs, prompts, tmp_path, capsys):
    out = tmp_path / "curve"
    common = args(model_dirs, prompts, out, "--epochs", "1", "--curve-requests", "2", "--curve-max-tokens", "6")
    assert main([*common, "--curve", "200,100k"]) == 0
    points = json.loads((out / "curve.json").read_text())["points"]
    assert [p["limit"] for p in points][0] == 200 and len(points) == 2
    assert points[0]["tokens"] < points[1]["tokens"]  # the second is the whole collection
    for p in points:
        assert 1.0 <= p["mean_accepted"] <= 5.0 and p["requests"] == 2 and p["generated"] == 12
    capsys.readouterr()
    png = tmp_path / "curve.png"
    assert main([*common, "--curve", "200,100k", "--plot", str(png)]) == 0
    assert "mean accepted length" not in capsys.readouterr().out  # nothing trained again
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main([*common, "--curve", "200", "--lr", "0.1"]) == 2  # other settings: not mixed into one curve
    assert "measured with other settings (lr)" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--text-share", "2", "--source", "mix"], "--text-share must be between 0 and 1"),
    (["--answer-tokens", "48"], "--answer-tokens < --seq-len"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
    (["--held-out", "0"], "--held-out must be at least 1"),
    (["--epochs", "0"], "--epochs must be positive"),
    (["--plot", "x.png"], "--plot draws the learning curve"),
])
def test_bad_options_are_one_line(model_dirs, prompts, tmp_path, capsys, extra, message):
    assert main(args(model_dirs, prompts, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_curve_list_is_refused_by_the_parser_in_one_line(model_dirs, prompts, tmp_path, capsys):
    assert main(args(model_dirs, prompts, tmp_path / "x", "--curve", "10,x")) == 2
    assert capsys.readouterr().err == ("specmlx train: error: argument --curve: expected token counts like "
                                       "25000,100k: '10,x'\n")


def test_the_request_list_is_fixed_by_the_first_run(model_dirs, prompts, tmp_path):
    out = tmp_path / "fixed"
    assert main(args(model_dirs, prompts, out, "--collect-only")) == 0
    saved = (out / "features" / "requests.jsonl").read_text()
    assert [json.loads(line)["prompt"] for line in saved.splitlines()] == PROMPTS
    prompts.write_text(json.dumps({"prompt": "Something else."}) + "\n")  # the file changes afterwards
    assert main(args(model_dirs, prompts, out, "--collect-only", "--tokens", "900")) == 0
    assert (out / "features" / "requests.jsonl").read_text() == saved


def test_a_seed_gives_the_same_requests_in_a_checkout_and_an_install(monkeypatch, tmp_path):
    # What generated requests leave out ships with the package: nothing beside a checkout counts.
    import shutil
    import subprocess
    import sys
    from argparse import Namespace
    from pathlib import Path

    from specmlx import paths
    from specmlx.prompting import packaged_prompts_path, read_prompts
    from specmlx.train import cli, prompts

    monkeypatch.setattr(cli, "GENERATED_REQUESTS", 200)
    read = []
    monkeypatch.setattr(prompts, "read_prompts", lambda path: read.append(path) or read_prompts(path))
    in_checkout = cli.requests_of(Namespace(out=tmp_path / "checkout", prompts=None, seed=5))
    assert paths.checkout_root() is not None and len(in_checkout) == 200
    assert read == [packaged_prompts_path()]  # the one prompt file that decides what is left out

    # The package alone, as a wheel installs it (package data included), run from elsewhere.
    site = tmp_path / "site-packages"
    shutil.copytree(Path(paths.__file__).parent, site / "specmlx", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "elsewhere").mkdir()
    code = ("import json, sys; from argparse import Namespace; from pathlib import Path; "
            "from specmlx import paths; from specmlx.train import cli; cli.GENERATED_REQUESTS = 200; "
            "rows = cli.requests_of(Namespace(out=Path('installed'), prompts=None, seed=5)); "
            "print(json.dumps([paths.checkout_root() is None, [[r.id, r.kind, r.prompt] for r in rows]]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(site)}, timeout=300)
    assert result.returncode == 0, result.stderr
    installed, rows = json.loads(result.stdout)
    assert installed and rows == [[r.id, r.kind, r.prompt] for r in in_checkout]


def test_a_head_fusing_target_layers_with_more_passes_on_answers_only(model_dirs, prompts, tmp_path):
    out = tmp_path / "fused"
    assert main(args(model_dirs, prompts, out, "--steps", "4", "--fused-layers", "0,1", "--passes", "3",
                     "--answer-only")) == 0
    report = json.loads((out / "training.json").read_text())
    assert (report["fused_layers"], report["passes"], report["answer_only"]) == ([0, 1], 3, True)
    assert load_mtp(out).config.fused_layers == (0, 1)
    # A plain head trains on the same features (it reads their final hidden states only)...
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "features").symlink_to(out / "features")
    assert main(args(model_dirs, prompts, plain, "--steps", "4")) == 0
    assert load_mtp(plain).config.fused_layers == ()
    # ...but collecting more without the layers would mix shards with and without them: refused.
    assert main(args(model_dirs, prompts, plain, "--steps", "4", "--tokens", "5000")) == 2


@pytest.mark.parametrize("value, message", [
    ("0,9", "--fused-layers 0,9: the target has 2 layers (0 to 1)"),
    ("eagle3", "the target has 2 layers"),
])
def test_fused_layers_the_target_lacks_are_one_line(model_dirs, prompts, tmp_path, capsys, value, message):
    assert main(args(model_dirs, prompts, tmp_path / "x", "--fused-layers", value)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_fused_layers_that_do_not_ascend_are_refused_by_the_parser(model_dirs, prompts, tmp_path, capsys):
    assert main(args(model_dirs, prompts, tmp_path / "x", "--fused-layers", "1,0")) == 2
    assert "expected ascending layer numbers: '1,0'" in capsys.readouterr().err
