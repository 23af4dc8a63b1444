"""The presets for Macs whose targets are hybrid checkpoints drafted by their own MTP layers or z-lab's
DFlash drafters: they resolve, name `mtp` (the target's own directory) and `dflash`, convert on fetch, and say how to fetch when not
fetched. No network: the hub's download is replaced by a tiny Qwen3.5 checkpoint in Hugging Face's layout."""

from __future__ import annotations

import json
import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx import memory, presets
from specmlx.errors import SpecmlxError
from specmlx.generate import main
from specmlx.loading import DrafterSource, load_tokenizer, resolve_drafter
from specmlx.memory import GB
from specmlx.presets import fetch
from specmlx.presets.cli import main as models_main

from .. import tiny_block, tiny_hybrid

HYBRID = ("qwen3.5-4b", "qwen3.5-9b", "qwen3.6-35b-a3b")
PROMPT = "def add(a, b):\n    return"


@pytest.fixture
def models_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    monkeypatch.setattr(memory, "available_bytes", lambda: 1024 * GB)
    return tmp_path


@pytest.mark.parametrize("name", HYBRID)
def test_a_hybrid_preset_is_a_qwen_checkpoint_drafted_by_its_own_mtp_layers_or_its_dflash_drafter(name):
    preset = presets.get_preset(name)
    assert preset.drafter == "mtp" and preset.own_mtp and preset.roles == ("dflash", "mtp")
    assert preset.target.hub.startswith("Qwen/") and preset.target.convert and preset.target.native_mtp
    assert presets.model_path(preset, "mtp") == presets.model_path(preset)  # the layers stay in its directory
    (dflash,) = preset.drafters  # z-lab's drafter for this very target, converted on fetch as published
    assert dflash.hub == "z-lab/" + preset.target.hub.split("/")[1] + "-DFlash" and dflash.convert
    # the download is the bf16 checkpoints; memory is their 4-bit forms (MTP layers in it) and the margin
    assert preset.download_bytes == int(preset.target.size_gb * 1e9) + int(dflash.size_gb * 1e9)
    assert preset.memory_bytes == memory.needed_bytes(int(preset.target.converted_gb * 1e9)
                                                      + int(dflash.converted_gb * 1e9))
    assert preset.memory_bytes < preset.download_bytes


def test_the_app_offers_the_targets_own_mtp_layers():
    from app.loader import preset_drafters

    assert list(preset_drafters("qwen3.5-4b", target=None)) == ["dflash", "mtp"]  # loaded when first chosen


def test_the_small_one_fits_a_16_gb_mac_and_the_moe_one_a_32_gb_mac():
    # Metal's recommended working set is about two thirds of a Mac's memory, and more on larger ones
    assert presets.get_preset("qwen3.5-4b").memory_bytes < 16 * GB * 2 // 3
    assert presets.get_preset("qwen3.6-35b-a3b").memory_bytes < 32 * GB * 2 // 3


@pytest.mark.parametrize("drafter", [[], ["--drafter", "mtp"]])
def test_unfetched_hybrid_preset_says_how_to_fetch(capsys, models_root, drafter):
    assert main(["--target", "qwen3.5-4b", *drafter, "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run: specmlx models fetch qwen3.5-4b" in err


def test_a_converted_source_needs_its_converted_size():
    with pytest.raises(SpecmlxError, match="converted on fetch: it needs hub and converted_gb"):
        presets._read_source("p", "target", {"hub": "Qwen/X", "size_gb": 1.0, "convert": True})


def test_fetch_converts_the_checkpoints_and_generate_drafts_with_its_mtp_layers_or_its_dflash_drafter(
        models_root, monkeypatch, capsys, tmp_path, tokenizer, vocab):
    """`specmlx models fetch` converts the checkpoint (here a tiny Qwen3.5 in Hugging Face's layout, its
    MTP layers beside) with `specmlx convert`, which keeps the MTP layers, and its DFlash drafter as
    published; the preset then drafts with its MTP layers by default, or blocks with `--drafter dflash`,
    and its output is the target's own greedy output either way."""
    from specmlx.convert import api

    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2, guesses=True)
    checkpoint = tiny_hybrid.save_qwen3_5_hf(target, mtp, vocab, tokenizer, tmp_path / "hf")
    block, raw = tiny_block.tiny_dflash(vocab, seed=3, tapped=(0, 1, 2), target_layers=4)
    published = tiny_block.save_dflash(block, raw, tmp_path / "z-lab")  # as z-lab publishes: `model.` names
    downloaded = []
    repos = {"Qwen/Qwen3.5-4B": checkpoint, "z-lab/Qwen3.5-4B-DFlash": published}
    monkeypatch.setattr(api, "download", lambda repo: downloaded.append(repo) or repos[repo])
    monkeypatch.setattr(fetch, "download", lambda repo: pytest.fail("a converted source is not copied"))
    assert models_main(["fetch", "qwen3.5-4b"]) == 0
    preset = presets.get_preset("qwen3.5-4b")
    assert downloaded == list(repos) and (presets.model_path(preset) / "mtp.safetensors").is_file()
    assert resolve_drafter(None, preset.name) == DrafterSource(str(presets.model_path(preset)), "mtp")
    assert resolve_drafter("mtp", preset.name) == DrafterSource(str(presets.model_path(preset)), "mtp")
    assert models_main(["path", "qwen3.5-4b", "--role", "mtp"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(presets.model_path(preset))

    assert main(["--target", preset.name, "--num-draft", "3", "--prompt", PROMPT, "--max-tokens", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    prompt = load_tokenizer("target", presets.model_path(preset)).encode(PROMPT)
    expected = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=16)]
    assert result["tokens"] == expected[: len(result["tokens"])] and result["tokens"]
    assert result["stats"]["drafter"] == "mtp" and result["stats"]["drafted"] > 0

    assert main(["--target", preset.name, "--drafter", "dflash", "--num-draft", "4", "--prompt", PROMPT,
                 "--max-tokens", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == expected[: len(result["tokens"])] and result["tokens"]
    assert result["stats"]["drafter"] == "dflash" and result["stats"]["drafted"] > 0
