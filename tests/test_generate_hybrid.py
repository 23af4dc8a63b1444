"""`specmlx generate` end to end on a saved tiny Qwen3.5 (settings under `text_config`)."""

from __future__ import annotations

import json

import mlx.core as mx
from mlx_lm.generate import generate_step

from specmlx.generate import main
from specmlx.loading import load_tokenizer

from . import tiny_hybrid

PROMPT = "def add(a, b):\n    return"


def test_a_qwen3_5_target_generates_its_own_greedy_output(tmp_path, tokenizer, vocab, capsys):
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    path = tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, tmp_path / "q35")
    for drafter in ("none", "ngram"):
        code = main(["--target", str(path), "--drafter", drafter, "--prompt", PROMPT,
                     "--max-tokens", "16", "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        tokens = json.loads(out.out)["tokens"]
        prompt = load_tokenizer("target", path).encode(PROMPT)
        expected = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=16)]
        assert tokens == expected[: len(tokens)] and tokens


def test_a_qwen3_5_target_drafts_with_its_own_mtp_layers(tmp_path, tokenizer, vocab, capsys):
    """`--drafter mtp` with a target directory that kept its `mtp.*` weights: they draft, and the
    output is the target's own greedy output."""
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2, guesses=True)
    path = tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, tmp_path / "q35", mtp=mtp)
    code = main(["--target", str(path), "--drafter", "mtp", "--num-draft", "3", "--prompt", PROMPT,
                 "--max-tokens", "16", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    prompt = load_tokenizer("target", path).encode(PROMPT)
    expected = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=16)]
    assert result["tokens"] == expected[: len(result["tokens"])] and result["tokens"]
    assert result["stats"]["drafted"] > 0, result["stats"]


def test_mtp_with_a_target_that_ships_none_says_so(tmp_path, tokenizer, vocab, capsys):
    path = tiny_hybrid.save_qwen3_5(tiny_hybrid.tiny_qwen3_5(vocab, seed=1), vocab, tokenizer, tmp_path / "q35")
    assert main(["--target", str(path), "--drafter", "mtp", "--prompt", PROMPT, "--max-tokens", "4"]) != 0
    assert "ships no MTP layers" in capsys.readouterr().err
