"""`specmlx generate` end to end on tiny saved models."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx.loading import load_tokenizer
from specmlx.generate import main
from specmlx.policy import DraftPolicy

from . import tiny

PROMPT = "def add(a, b):\n    return"


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_output_end_to_end(model_dirs, tokenizer, target):
    """A real subprocess: the module entry point, loading from disk, JSON out."""
    result = subprocess.run(
        [sys.executable, "-m", "specmlx", "generate", "--target", model_dirs["target"],
         "--drafter", model_dirs["drafter"], "--prompt", PROMPT, "--max-tokens", "24", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"text", "tokens", "sources", "stats"}
    # Encoded as the CLI did: the saved tokenizer splits PROMPT's spaces unlike the in-memory one.
    saved = load_tokenizer("target", model_dirs["target"])
    prompt = saved.encode(PROMPT)
    expected = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=24)]
    assert data["tokens"] == expected[: len(data["tokens"])]
    assert data["text"] == tokenizer.decode(data["tokens"])
    assert len(data["sources"]) == len(data["tokens"])
    assert set(data["sources"]) <= {"draft", "corrected", "bonus", "target"}
    stats = data["stats"]
    assert stats["generation_tokens"] == len(data["tokens"])
    assert stats["accepted"] == data["sources"].count("draft")
    # The automatic length by default: one sync a round, one more where it timed drafting apart.
    assert stats["auto"] and stats["host_syncs"] == stats["rounds"] + stats["timed_rounds"]
    # Something was generated, and as much as the stats say: all 24 tokens, or
    # fewer only where the target's own next token is an end token.
    n = len(data["tokens"])
    assert n > 0 and data["text"] != ""
    assert stats["prompt_tokens"] == len(prompt)
    if stats["finish_reason"] == "length":
        assert n == 24
    else:
        assert stats["finish_reason"] == "eos"
        assert expected[n] in saved.eos_token_ids
    # Every round commits its accepted drafts and one token of the target's, the last round perhaps cut.
    assert 0 < stats["rounds"] <= n and n <= stats["accepted"] + stats["rounds"]


def test_draft_p_min_stays_exact(capsys, model_dirs, tokenizer, target):
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--drafter", model_dirs["drafter"],
                         "--prompt", PROMPT, "--max-tokens", 16, "--num-draft", 6, "--draft-p-min", 0.5, "--json")
    assert code == 0, err
    expected = [int(t) for t, _ in generate_step(mx.array(tokenizer.encode(PROMPT)), target, max_tokens=16)]
    assert json.loads(out)["tokens"] == expected


def test_lookup_before_drafting_stays_exact(capsys, model_dirs, target):
    prompt = PROMPT + " " + PROMPT  # the tail "return" was seen before
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--drafter", model_dirs["drafter"],
                         "--prompt", prompt, "--max-tokens", 16, "--num-draft", 1, "--lookup", 2, "--lookup-draft", 5,
                         "--json")
    assert code == 0, err
    # The saved tokenizer splits this prompt's spaces unlike the in-memory one: encode as the CLI did.
    ids = load_tokenizer("target", model_dirs["target"]).encode(prompt)
    expected = [int(t) for t, _ in generate_step(mx.array(ids), target, max_tokens=16)]
    data = json.loads(out)
    assert data["tokens"] == expected
    assert data["stats"]["drafted"] > data["stats"]["rounds"]  # more than 1 a round: some were looked up


def test_a_plain_prompts_answer_keeps_its_leading_space_and_a_chats_drops_it(capsys, model_dirs):
    """The tiny target answers "hi" with a space first, as a plain prompt (the chat template's text for
    "hi") and in the chat template: the same tokens, the text as decode has it after the prompt and as
    a chat's answer has it."""
    saved = load_tokenizer("target", model_dirs["target"])
    plain_prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--drafter", "none", "--prompt", plain_prompt,
                         "--max-tokens", 4, "--json")
    assert code == 0, err
    plain = json.loads(out)
    prompt = saved.encode(plain_prompt)
    expected = saved.decode(prompt + plain["tokens"])[len(saved.decode(prompt)):]
    assert expected.startswith(" ") and plain["text"] == expected
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--drafter", "none", "--prompt", "hi", "--chat",
                         "--max-tokens", 4, "--json")
    chat = json.loads(out)
    assert chat["tokens"] == plain["tokens"] and chat["text"] == expected[1:]


@pytest.mark.parametrize("drafter", ["ngram", "suffix", "none"])
def test_plain_text_output_and_stats(capsys, model_dirs, drafter):
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--drafter", drafter,
                         "--prompt", PROMPT, "--max-tokens", 10, "--chat", "--system", "be brief")
    assert code == 0
    assert out.endswith("\n") and "\033[" not in out  # no colour when not a terminal
    assert "mean accepted length" in err and "host syncs" in err


def test_sampling_flags_and_seed(capsys, model_dirs):
    args = ("--target", model_dirs["target"], "--drafter", model_dirs["drafter"], "--prompt", PROMPT,
            "--max-tokens", 16, "--temp", 0.8, "--top-p", 0.9, "--top-k", 40, "--seed", 3, "--json",
            "--num-draft", 4)  # a fixed length repeats the text (the automatic one, the distribution)
    first = json.loads(cli(capsys, *args)[1])
    second = json.loads(cli(capsys, *args)[1])
    assert first["tokens"] == second["tokens"]
    assert not first["stats"]["auto"] and first["stats"]["num_draft"] == 4


def test_seed_minus_one_is_a_random_seed_and_one_out_of_range_is_one_line(capsys, model_dirs):
    """-1 as llama.cpp's: a fresh seed each run. MLX takes 0..2^64-1."""
    args = ("--target", model_dirs["target"], "--drafter", model_dirs["drafter"], "--prompt", PROMPT,
            "--max-tokens", 16, "--temp", 1.5, "--json")
    runs = [cli(capsys, *args, "--seed", -1) for _ in range(3)]
    assert all(code == 0 for code, _, _ in runs), runs
    assert len({tuple(json.loads(out)["tokens"]) for _, out, _ in runs}) > 1  # not one fixed seed
    for seed in (-2, 2 ** 64):
        code, out, err = cli(capsys, *args, "--seed", seed)
        assert code == 2 and out == ""
        assert err.strip() == f"specmlx generate: error: the seed must be -1 (a random one) or 0..{2 ** 64 - 1}, got {seed}"
    assert cli(capsys, *args, "--seed", 2 ** 64 - 1)[0] == 0


def test_the_draft_length_is_automatic_unless_one_is_asked_for(capsys, model_dirs):
    args = ("--target", model_dirs["target"], "--drafter", model_dirs["drafter"], "--prompt", PROMPT,
            "--max-tokens", 24)
    default = json.loads(cli(capsys, *args, "--json")[1])["stats"]
    assert default["auto"]
    adaptive = json.loads(cli(capsys, *args, "--adaptive", "--json")[1])["stats"]  # which starts at 4
    assert not adaptive["auto"] and adaptive["num_draft"] == 4 and adaptive["draft_histogram"][4] >= 1
    auto = json.loads(cli(capsys, *args, "--num-draft", "auto", "--json")[1])["stats"]
    assert auto["auto"] and sum(auto["draft_histogram"]) == auto["rounds"]
    # One sync a round, and one more in the rounds the automatic length timed its drafting apart.
    assert 0 <= auto["timed_rounds"] <= auto["rounds"] // 8 + 2  # none where the tiny drafter never pays
    assert auto["host_syncs"] == auto["rounds"] + auto["timed_rounds"]
    assert auto["draft_histogram"][0] >= 3 and auto["probes"] >= 1  # the first rounds calibrate: plain, then probes
    assert auto["estimate"]["costs"]["base_s"] > 0 and len(auto["estimate"]["acceptance"]) == DraftPolicy().max_draft
    fixed = json.loads(cli(capsys, *args, "--num-draft", 3, "--json")[1])["stats"]
    assert not fixed["auto"] and fixed["estimate"] is None
    assert fixed["draft_histogram"][3] >= fixed["rounds"] - 2  # 3 a round, but where the budget ends
    explicit = json.loads(cli(capsys, *args, "--num-draft", "auto", "--max-draft", 5, "--json")[1])["stats"]
    assert explicit["auto"] and len(explicit["draft_histogram"]) <= 6
    code, _, err = cli(capsys, *args, "--num-draft", "auto")
    assert code == 0 and "draft length per round (k:rounds)" in err and "(auto)" in err
    assert "auto measured: a plain round" in err


def test_a_bad_draft_length_is_one_line_naming_it(capsys, model_dirs):
    code, out, err = cli(capsys, "--target", model_dirs["target"], "--prompt", "x", "--num-draft", "lots")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith('specmlx generate: error: draft policy "lots": unknown part lots; expected auto, ')


def test_a_usage_error_is_one_line_and_exit_2(capsys):
    code, _, err = cli(capsys, "--prompt", "x", "--max-tokens", "many")
    assert code == 2 and err == "specmlx generate: error: argument --max-tokens: invalid int value: 'many'\n"


def test_the_draft_flags_are_parts_of_one_policy(capsys, model_dirs):
    args = ("--target", model_dirs["target"], "--drafter", model_dirs["drafter"], "--prompt", PROMPT,
            "--max-tokens", 16, "--json")
    stats = json.loads(cli(capsys, *args, "--num-draft", "3+adaptive+max=5")[1])["stats"]
    assert len(stats["draft_histogram"]) <= 6 and stats["draft_histogram"][3] >= 1  # adaptive from 3, up to 5
    code, _, err = cli(capsys, *args, "--num-draft", "3+max=5", "--max-draft", 6)
    assert code == 2 and err == ('specmlx generate: error: draft policy "3+max=5+max=6": max=5 and max=6 both set '
                                 "the longest draft: choose one\n")


def test_a_draft_policy_conflict_is_refused_as_from_every_front_end(capsys, tmp_path):
    """The same line as `specmlx serve` and `specmlx bench` give, before any model loads."""
    code, out, err = cli(capsys, "--target", tmp_path / "not-loaded", "--prompt", "x", "--num-draft", "auto",
                         "--adaptive")
    assert code == 2 and out == ""
    assert err == ('specmlx generate: error: draft policy "auto+adaptive": auto and adaptive both set the draft '
                   "length: choose one\n")


def test_padded_drafter_vocabulary_is_fine(capsys, tmp_path, tokenizer, target, target_args, vocab):
    args = tiny.qwen2_args(vocab + 64)
    padded = tiny.build(args, seed=0)
    target_dir = tiny.save_model(target, target_args, tokenizer, tmp_path / "t")
    drafter_dir = tiny.save_model(padded, args, tokenizer, tmp_path / "d")
    code, out, err = cli(capsys, "--target", target_dir, "--drafter", drafter_dir, "--prompt", PROMPT,
                         "--max-tokens", 12, "--json")
    assert code == 0, err
    prompt = tokenizer.encode(PROMPT)
    expected = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=12)]
    assert json.loads(out)["tokens"] == expected


def broken_dirs(root, model_dirs):
    import shutil

    corrupt = root / "corrupt"
    shutil.copytree(model_dirs["target"], corrupt)
    (corrupt / "config.json").write_text("{ not json")
    empty = root / "empty"
    empty.mkdir()
    no_weights = root / "no-weights"
    shutil.copytree(model_dirs["target"], no_weights)
    (no_weights / "model.safetensors").unlink()
    truncated = root / "truncated"
    shutil.copytree(model_dirs["target"], truncated)
    weights = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    a_file = root / "file.txt"
    a_file.write_text("x")
    return {"corrupt": corrupt, "empty": empty, "no-weights": no_weights, "truncated": truncated,
            "file": a_file, "missing": root / "nowhere" / "model"}


@pytest.mark.parametrize("case", ["corrupt", "empty", "no-weights", "truncated", "file", "missing"])
def test_bad_target_is_one_line_and_exit_2(capsys, tmp_path, model_dirs, case):
    path = broken_dirs(tmp_path, model_dirs)[case]
    code, out, err = cli(capsys, "--target", path, "--prompt", PROMPT)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specmlx generate: error: ") and str(path) in err
    assert "Traceback" not in err


def test_incompatible_drafter_is_one_line_naming_both(capsys, tmp_path, model_dirs, vocab):
    other_tok = tiny.train_tokenizer(vocab_size=300)
    args = tiny.qwen2_args(len(other_tok))
    other = tiny.save_model(tiny.build(args, seed=4), args, other_tok, tmp_path / "other")
    code, _, err = cli(capsys, "--target", model_dirs["target"], "--drafter", other, "--prompt", PROMPT)
    assert code == 2 and err.count("\n") == 1
    assert str(other) in err and str(model_dirs["target"]) in err


@pytest.mark.parametrize("flags, message", [
    (["--prompt-file", "/nonexistent/prompt.txt"], "no such prompt file"),
    (["--prompt", "x", "--temp", "-1"], "temperature"),
    (["--prompt", "x", "--max-tokens", "0"], "max tokens"),
    (["--prompt", "x", "--system", "s"], "--system needs --chat"),
    (["--prompt", "x", "--draft-p-min", "1.5"], "draft p-min must be in [0, 1)"),
    (["--prompt", "x", "--lookup", "12"], "lookup match length must be in 0..8"),
    (["--prompt", "x", "--num-draft", "auto", "--adaptive"], "auto and adaptive both set the draft length"),
    (["--prompt", "x", "--max-draft", "0"], "maximum draft length must be >= 1"),
])
def test_bad_options_are_one_line_and_exit_2(capsys, model_dirs, flags, message):
    code, _, err = cli(capsys, "--target", model_dirs["target"], *flags)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_offline_hub_repo_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = cli(capsys, "--target", "mlx-community/no-such-model-4bit", "--prompt", "x")
    assert code == 2 and err.count("\n") == 1 and "mlx-community/no-such-model-4bit" in err


def test_a_prompt_past_the_context_window_is_one_line_and_exit_2(capsys, tmp_path, tokenizer, vocab):
    args = tiny.qwen2_args(vocab, max_position_embeddings=64)
    short = tiny.save_model(tiny.build(args, seed=0), args, tokenizer, tmp_path / "short")
    code, out, err = cli(capsys, "--target", short, "--drafter", "none", "--prompt", "word " * 80,
                         "--max-tokens", 16)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "context window of 64 tokens" in err and "max tokens (16)" in err and "Traceback" not in err
