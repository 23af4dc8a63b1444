"""`specmlx convert` on a Gemma 4 assistant directory laid out as published:
its config.json verbatim and its tensor names, with miniature sizes.

Where the fixtures in published/gemma-4-E2B-it-assistant/ come from:
- config.json: google/gemma-4-E2B-it-assistant at HF snapshot 2d874ef7d29f9a30599a1e4b3c1cbc9595f005df
  (https://huggingface.co/google/gemma-4-E2B-it-assistant), verbatim as a public agent
  transcript printed it (`cat` of that snapshot; search-index file 54570753366). No copy
  of mlx-community/gemma-4-E2B-it-assistant-bf16's own config.json was found; a
  fine-tune's model card (huggingface.co/Mediform/gemma4-e4b-v13-assistant-rollout-mlx-bf16)
  calls mlx-community's E4B one the same key set, shapes and dtype.
- tensors.txt: that snapshot's model.safetensors, 50 tensors, as the same transcript
  listed them (the first 15 by name; the other 35 are the same 11 per layer for
  layers 1-3 plus model.norm, pre_projection and post_projection, which make its 50).
- shapes.json: the shapes printed there, and pre/post_projection's from a public
  design note that read the E2B safetensors header (search-index file 68702198497).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import numpy as np

from specmlx.convert.cli import main
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.engine import Engine
from specmlx.models.gemma4_assistant import ORDERING, AssistantConfig, Gemma4AssistantModel, load_gemma4_assistant

from .. import tiny
from ..test_engine import reference_greedy, run

PUBLISHED = Path(__file__).parent / "published" / "gemma-4-E2B-it-assistant"
DTYPE_KEYS = ("dtype", "torch_dtype")
VOCAB = 64  # a multiple of the tiny assistant's centroid count


def without_dtypes(config: dict) -> dict:
    """A config without the dtype it states, at the top and in text_config."""
    out = {k: v for k, v in config.items() if k not in DTYPE_KEYS}
    out["text_config"] = {k: v for k, v in config["text_config"].items() if k not in DTYPE_KEYS}
    return out


def published_config() -> dict:
    return json.loads((PUBLISHED / "config.json").read_text())


def published_names() -> list[str]:
    return (PUBLISHED / "tensors.txt").read_text().split()


def miniature(config: dict, target_args) -> dict:
    """The published config with its sizes shrunk to a tiny target's (and the tiny
    assistant's of tests/tiny.py); every other field stays as published."""
    small = tiny.gemma4_assistant_config(target_args, ordered=True)
    out = copy.deepcopy(config)
    for key in ("backbone_hidden_size", "num_centroids", "centroid_intermediate_top_k"):
        out[key] = small[key]
    for key in ("hidden_size", "intermediate_size", "head_dim", "global_head_dim", "vocab_size", "sliding_window"):
        out["text_config"][key] = small["text_config"][key]
    return out


def write_checkpoint(folder: Path, config: dict, names: list[str]) -> dict[str, mx.array]:
    """A checkpoint with exactly the published tensor names, random values in the
    published dtype (bfloat16; the ordering as int64), shaped for `config`."""
    shapes = {k: v.shape for k, v in Gemma4AssistantModel(AssistantConfig.from_dict(config)).weights().items()}
    mx.random.seed(0)
    tensors = {name: (0.3 * mx.random.normal(shapes[name])).astype(mx.bfloat16) for name in names}
    tensors[ORDERING] = mx.random.permutation(shapes[ORDERING][0]).astype(mx.int64)
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), tensors)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return tensors


def test_the_published_tensors_are_the_models():
    """specmlx's assistant for the published config has exactly the published
    tensors, at the published shapes (built lazily: nothing is allocated)."""
    model = Gemma4AssistantModel(AssistantConfig.from_dict(published_config()))
    ours = {k: tuple(v.shape) for k, v in model.weights().items()}
    assert sorted(ours) == sorted(published_names())
    shapes = json.loads((PUBLISHED / "shapes.json").read_text())
    assert {k: ours[k] for k in shapes} == {k: tuple(v) for k, v in shapes.items()}


def test_convert_reads_the_published_layout_and_the_result_drafts(tmp_path, capsys):
    args = tiny.gemma4_args(VOCAB)
    config = miniature(published_config(), args)
    source = write_checkpoint(tmp_path / "published", config, published_names())
    out = tmp_path / "mlx"
    assert main([str(tmp_path / "published"), "--out", str(out), "--dtype", "float32", "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == str(out)

    stored = mx.load(str(out / "model.safetensors"))
    assert sorted(stored) == sorted(published_names())
    assert stored[ORDERING].dtype == mx.int32 and mx.array_equal(stored[ORDERING], source[ORDERING])
    assert all(mx.array_equal(stored[k], v.astype(mx.float32)) for k, v in source.items() if k != ORDERING)
    written = json.loads((out / "config.json").read_text())
    assert without_dtypes(written) == without_dtypes(config)
    assert written["torch_dtype"] == written["text_config"]["dtype"] == "float32"  # no stale bfloat16 left

    target = tiny.gemma4_target(args, seed=0)
    engine = Engine(target, Gemma4AssistantDrafter(load_gemma4_assistant(out), args.vocab_size), eos_token_ids=[])
    prompt = np.random.default_rng(0).integers(0, args.vocab_size, 3 * args.sliding_window).tolist()
    events, stats = run(engine, prompt, max_tokens=12, num_draft=3)
    assert [e.token for e in events] == reference_greedy(target, prompt, 12)
    assert stats.drafted > 0
