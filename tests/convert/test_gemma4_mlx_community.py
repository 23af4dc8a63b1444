"""specmlx reading a Gemma 4 assistant as mlx-community publishes it
(mlx-community/gemma-4-E2B-it-assistant-bf16, which the gemma-4-e2b preset
fetches and loads unconverted): the directory mlx-vlm's converter writes.

The directory here is written by mlx-vlm's own `mlx_vlm.convert.convert`
(0.7.10) run on a miniature of Google's published checkpoint (the layout
test_gemma4_published.py checks), so every step of it is mlx-vlm's:
- `utils.load_model` builds mlx-vlm's `Gemma4AssistantDraftModel` and runs its
  `sanitize` (token_ordering int64 -> int32; the ordering is a frozen
  parameter there, not a buffer, so it is saved with the weights);
- `convert` casts floating tensors to `text_config.dtype` (bfloat16: Google's
  config states no `torch_dtype`), leaving the int32 ordering alone;
- `utils.save_weights` writes model.safetensors named by the model's
  parameters, with metadata {"format": "mlx"}, plus model.safetensors.index.json;
- `utils.save_config` writes `utils.load_config`'s dict: the source config with
  generation_config.json folded in (`_merge_generation_config`), top-level
  `_name_or_path` / `torch_dtype` dropped, top-level keys sorted.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_vlm.convert import convert as mlx_vlm_convert

from specmlx.convert.cli import main
from specmlx.loading import DrafterSource, LoadedModel, load_drafter
from specmlx.models.gemma4_assistant import ORDERING

from .. import tiny
from ..drafters import vlm_gemma4 as reference
from ..drafters.test_gemma4_reference import (NUM_DRAFT, PROMPT_LENGTHS, WINDOW, assert_round_equals_mlx_vlms,
                                              generate)
from .test_gemma4_published import miniature, published_config, published_names, write_checkpoint

VOCAB = 64  # a multiple of the tiny assistant's centroid count
# Google's snapshot 2d874ef ships a generation_config.json (the `ls` in the transcript
# test_gemma4_published.py cites, search-index file 54570753366) whose contents are not
# on record; Gemma 4 instruct's stands in. mlx-vlm folds whatever it holds into config.json.
GENERATION_CONFIG = {"bos_token_id": 2, "do_sample": True, "eos_token_id": [1, 106], "pad_token_id": 0,
                     "temperature": 1.0, "top_k": 64, "top_p": 0.95}


def weights_of(folder: Path) -> dict[str, mx.array]:
    return mx.load(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, dict]:
    """A miniature google/gemma-4-E2B-it-assistant: config, tensors, tokenizer, generation config."""
    folder = tmp_path_factory.mktemp("google") / "gemma-4-E2B-it-assistant"
    config = miniature(published_config(), tiny.gemma4_args(VOCAB, window=WINDOW))
    write_checkpoint(folder, config, published_names())
    tiny.train_tokenizer().save_pretrained(str(folder))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    return folder, config


@pytest.fixture(scope="module")
def mlx_community(published, tmp_path_factory) -> Path:
    """What mlx-community/...-assistant-bf16 holds: mlx-vlm's convert of `published`."""
    out = tmp_path_factory.mktemp("mlx-community") / "gemma-4-E2B-it-assistant-bf16"
    mlx_vlm_convert(str(published[0]), str(out))
    return out


def test_mlx_vlm_writes_the_published_names_and_config(published, mlx_community):
    """The layout specmlx has to read, as far as it differs from Google's."""
    source, config = published
    stored = weights_of(mlx_community)
    assert sorted(stored) == sorted(published_names())  # mlx-vlm's parameter names are HF's
    assert stored[ORDERING].dtype == mx.int32  # Google's is int64
    assert mx.array_equal(stored[ORDERING], weights_of(source)[ORDERING])
    assert {v.dtype for k, v in stored.items() if k != ORDERING} == {mx.bfloat16}
    index = json.loads((mlx_community / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(stored)

    written = json.loads((mlx_community / "config.json").read_text())
    merged = {k: GENERATION_CONFIG[k] for k in ("do_sample", "eos_token_id", "temperature", "top_k", "top_p")}
    assert written == {**config, **merged, "generation_config": GENERATION_CONFIG}
    assert list(written) == sorted(written)


def fetched(folder: Path, tmp_path: Path) -> Path:
    """The directory as the preset downloads it."""
    return folder


def converted(folder: Path, tmp_path: Path) -> Path:
    """`specmlx convert DIR --out OUT`, in the checkpoint's own dtype: the same tensors."""
    out = tmp_path / "converted"
    assert main([str(folder), "--out", str(out), "--dtype", "bfloat16", "--no-progress"]) == 0
    return out


@pytest.mark.parametrize("route", [fetched, converted], ids=["as-fetched", "converted"])
def test_specmlx_drafts_as_mlx_vlm_from_mlx_communitys_layout(route, mlx_community, tmp_path):
    """Loaded as a preset's fetched drafter is (`load_drafter` on the directory),
    every tensor is read and every draft step equals mlx-vlm's on the same files."""
    args = tiny.gemma4_args(VOCAB, window=WINDOW)
    target = tiny.gemma4_target(args, seed=0)
    folder = route(mlx_community, tmp_path)
    loaded = LoadedModel(target, tokenizer=None, path=tmp_path, name="tiny-gemma4")
    drafter = load_drafter(DrafterSource(str(folder), "assistant"), loaded)

    stored = weights_of(mlx_community)
    ours = drafter.model.weights()
    assert sorted(ours) == sorted(stored)  # nothing missing, nothing left over
    assert all(mx.array_equal(ours[k], v) and ours[k].dtype == v.dtype for k, v in stored.items())

    theirs_target = reference.target(target, args)
    config = json.loads((mlx_community / "config.json").read_text())
    theirs = reference.assistant(config, stored, theirs_target)
    recording, _ = generate(target, drafter.model, VOCAB)
    rounds = [r for r in recording.rounds if r.steps]
    assert sum(len(r.steps) == NUM_DRAFT for r in rounds) >= len(PROMPT_LENGTHS) * NUM_DRAFT
    for r in rounds:
        assert_round_equals_mlx_vlms(r, theirs, theirs_target)
