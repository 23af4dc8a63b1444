"""Tiny block drafters (DFlash) of the published layout, with random weights, for tiny Qwen3.5 targets.

Qwen3.5-4B's DFlash drafter reads 5 of its target's 32 layers ([1, 8, 15, 22, 29]), runs 5 layers of
its own at the target's width and drafts blocks of 16 (15 proposals) behind a mask token; these read
3 of an 8-layer tiny target's at its width of 64, in 2 layers, with the same block.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from specmlx.models.dflash import BlockConfig, BlockModel

LAYERS = 8  # the tiny target's
TAPPED = (1, 3, 5)
BLOCK = 16


def raw_config(vocab_size: int, layers: int = 2, block: int = BLOCK, tapped: tuple[int, ...] = TAPPED,
               target_layers: int = LAYERS, mask: int | None = None, **more) -> dict:
    """A `config.json` as z-lab publishes one: the backbone's fields and `dflash_config`."""
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "rms_norm_eps": 1e-6, "vocab_size": vocab_size, "rope_theta": 10_000_000.0, "max_position_embeddings": 4096,
        "tie_word_embeddings": True, "block_size": block, "num_target_layers": target_layers,
        "dflash_config": {"mask_token_id": vocab_size - 1 if mask is None else mask, "target_layer_ids": list(tapped)},
    } | more


def raw_dflash2(vocab_size: int, **shape) -> dict:
    """A DFlash2 drafter's `config.json`: its convolutions and candidate selector in `dflash_config`."""
    raw = raw_config(vocab_size, **shape)
    raw["architectures"] = ["DFlash2DraftModel"]
    raw["dflash_config"] |= {"block_size": BLOCK, "conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8,
                             "selector_top_k": 4}
    return raw


def raw_dspark(vocab_size: int, **shape) -> dict:
    """A DSpark drafter's `config.json`, as mlx-vlm reads one: its projector type, its Markov head's
    rank, its block counting its proposals alone (15: a verify of 16), its anchor proposing."""
    raw = raw_config(vocab_size, **shape)
    raw["dflash_config"] |= {"projector_type": "dspark", "block_size": BLOCK - 1, "markov_rank": 8}
    return raw


def tiny_dflash(vocab_size: int, seed: int, guesses: int | None = None, dflash2: bool = False, dspark: bool = False,
                **shape) -> tuple[BlockModel, dict]:
    """A random drafter, its norms' weights spread around 1 (a norm left out shows), and its config.
    `guesses`: a mask token whose own embedding the target's head reads as the token it emits most
    (tiny targets loop on two or three), and layers that add nothing (their output projections
    zero): every proposal is that token, so about half the first drafts are accepted."""
    build = raw_dflash2 if dflash2 else raw_dspark if dspark else raw_config
    raw = build(vocab_size, mask=guesses, **shape)
    mx.random.seed(seed)
    model = BlockModel(BlockConfig.from_dict(raw))
    model.load_weights([(k, 0.3 * mx.random.normal(v.shape)) for k, v in tree_flatten(model.parameters())
                        if k.endswith("base_kernel")], strict=False)  # zeros as built: a kernel left out would not show
    model.load_weights([(k, 1.0 + 0.3 * mx.random.normal(v.shape)) for k, v in tree_flatten(model.parameters())
                        if k.endswith("norm.weight")], strict=False)
    if guesses is not None:
        model.load_weights([(k, mx.zeros_like(v)) for k, v in tree_flatten(model.parameters())
                            if k.endswith(("o_proj.weight", "down_proj.weight"))]
                           + [("norm.weight", mx.ones_like(model.norm.weight))], strict=False)
    mx.eval(model.parameters())
    return model, raw


def save_dflash(model: nn.Module, raw: dict, path: Path, prefix: str = "model.") -> Path:
    """As published: `config.json` and `model.safetensors`, names under `prefix`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(raw))
    mx.save_safetensors(str(path / "model.safetensors"), {prefix + k: v for k, v in tree_flatten(model.parameters())})
    return path
