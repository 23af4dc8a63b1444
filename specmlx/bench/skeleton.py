"""Skeleton models: each model of a bench run with its real layer count, head layout,
vocabulary and tokenizer, but tiny widths and random weights.

A step of such a model costs mostly its per-operation overhead, as a step of a 4-bit
model does on an Apple GPU (milliseconds): the bench then measures on a CPU what a round
costs beyond its forwards. Built in memory, float32, through mlx-lm's own model classes,
from each fetched model's config.json and tokenizer files; nothing downloads. `self`
drafts with the target's own skeleton (it agrees at T=0 and costs what the target does).
"""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from ..compat import check_vocab_fits
from ..drafters import BUILTIN, Drafter, ModelDrafter
from ..drafters.mtp import MTPDrafter
from ..errors import SpecmlxError
from ..hub import is_repo_id
from ..loading import (DrafterSource, LoadedModel, Progress, check_resolved, display_name, load_drafter,
                       load_tokenizer)
from ..models.gemma4_assistant import is_gemma4_assistant_dir
from ..models.mtp import MTPConfig, MTPModel, is_mtp_dir
from ..peers import ALONE, Peers
from ..presets import fetched_path, get_preset, is_preset
from ..vocab import vocab_size
from .lineup import split_variant

HEAD_DIM = 8  # the default width of an attention head: hidden = heads x HEAD_DIM
FFN = 4  # the MLP's width over the hidden size
STD = 0.02  # weights N(0, STD): greedy decoding gives varied tokens, never NaN
SELF = "self"  # the drafter that is the target's own skeleton


def skeleton_config(config: Mapping[str, Any], head_dim: int) -> dict[str, Any]:
    """`config` with its layers, heads and vocabulary, at hidden = heads x `head_dim`, unquantized."""
    heads = config.get("num_attention_heads")
    if not isinstance(heads, int) or heads < 1:
        raise SpecmlxError(f"--skeleton: a {config.get('model_type', 'model')} config without "
                           "num_attention_heads at its top level has no skeleton")
    hidden = heads * head_dim
    kept = {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}
    return kept | {"hidden_size": hidden, "intermediate_size": FFN * hidden, "head_dim": head_dim,
                   "torch_dtype": "float32"}


def randomize(model: nn.Module, seed: int, real_tokens: int = 0, vocab: int | None = None) -> None:
    """Every weight N(0, STD) but norms (as the class made them); with a `vocab`, the rows of the
    embedding and output head past the tokenizer's `real_tokens` are zero, so never the argmax."""
    mx.random.seed(seed)
    params = []
    for name, value in tree_flatten(model.parameters()):
        if name.rpartition(".")[0].endswith("norm"):
            continue
        value = mx.random.normal(value.shape) * STD
        if vocab is not None and name.endswith(("embed_tokens.weight", "lm_head.weight")) and value.shape[0] == vocab:
            value = mx.where(mx.arange(vocab)[:, None] < real_tokens, value, 0.0)
        params.append((name, value))
    model.update(tree_unflatten(params))
    mx.eval(model.parameters())


def skeleton_model(config: Mapping[str, Any], head_dim: int, seed: int, real_tokens: int) -> nn.Module:
    """mlx-lm's model of `config`'s type at skeleton widths, random, float32."""
    from mlx_lm.utils import _get_classes  # mlx-lm's own model_type -> class lookup, remappings included

    shaped = skeleton_config(config, head_dim)
    try:
        model_class, args_class = _get_classes(shaped)
        model = model_class(args_class.from_dict(shaped))
    except (ValueError, TypeError, KeyError) as err:
        raise SpecmlxError(f"--skeleton: cannot build a {shaped.get('model_type')} skeleton ({err})") from None
    randomize(model, seed, real_tokens, shaped["vocab_size"])
    return model


def skeleton_mtp(config: Mapping[str, Any], target: nn.Module, seed: int) -> MTPModel:
    """A random MTP head as wide as the skeleton target it reads, with the head's own layout."""
    hidden = target.args.hidden_size
    known = {f.name for f in fields(MTPConfig)}
    mtp = MTPConfig(**{k: v for k, v in config.items() if k in known})
    if hidden % mtp.num_attention_heads:
        raise SpecmlxError(f"--skeleton: the MTP head's {mtp.num_attention_heads} heads do not divide "
                           f"the skeleton target's width {hidden}")
    mtp = replace(mtp, target_hidden_size=hidden, hidden_size=hidden, intermediate_size=FFN * hidden,
                  fused_layers=tuple(mtp.fused_layers), target_vocab_size=vocab_size(target))
    model = MTPModel(mtp)
    randomize(model, seed)  # its head rows are the target's
    model.set_draft_ids(mx.arange(mtp.draft_vocab_size, dtype=mx.int32))
    return model


def read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecmlxError(f"{path / 'config.json'}: unreadable config ({err})") from None


def seed_of(path: Path) -> int:
    """A seed per model directory, the same every run: runs stay comparable."""
    return zlib.crc32(str(path.resolve()).encode())


def shape_of(model: nn.Module) -> str:
    args = model.args
    return (f"{args.num_hidden_layers} layers, {args.num_attention_heads} heads "
            f"({args.num_key_value_heads} KV), hidden {args.hidden_size}, vocab {args.vocab_size}")


class Skeleton:
    """A `loading.Placement` that builds skeletons in this process instead of loading weights."""

    where = " (skeletons: real layers, heads and vocabulary; tiny widths, random weights)"

    def __init__(self, head_dim: int = HEAD_DIM) -> None:
        self.head_dim = head_dim

    def settle(self, target: Path, drafters: Sequence[Path]) -> Skeleton:
        return self

    def check(self, target: str, target_path: Path, drafters: Mapping[DrafterSource, Path | None]) -> None:
        """Tokenizers must agree, as for the real pair; a skeleton needs no memory check."""
        for drafter, path in drafters.items():
            if path is not None and is_gemma4_assistant_dir(path):
                raise SpecmlxError(f"--skeleton: {drafter.name} (a Gemma 4 assistant) has no skeleton")
            if path is not None and path.resolve() != target_path.resolve():
                check_resolved(target, target_path, drafter, path, fits=lambda *_: None)

    def load_target(self, source: str, path: Path, say: Progress) -> LoadedModel:
        tokenizer = load_tokenizer(source, path)
        real_tokens = max(tokenizer.get_vocab().values()) + 1
        model = skeleton_model(read_config(path), self.head_dim, seed_of(path), real_tokens)
        check_vocab_fits(tokenizer, vocab_size(model), source)
        say(f"built the skeleton of target {display_name(source)}: {shape_of(model)}")
        return LoadedModel(model, tokenizer, path, display_name(source))

    def load_drafter(self, drafter: DrafterSource, target: LoadedModel, path: Path | None,
                     say: Progress) -> Drafter:
        if path is None:  # prompt lookup, none
            return load_drafter(drafter, target)
        width = vocab_size(target.model)
        if path.resolve() == target.path.resolve():
            say(f"drafter {SELF}: the target's own skeleton")
            return ModelDrafter(target.model, width, name=SELF)
        if is_mtp_dir(path):
            head = skeleton_mtp(read_config(path), target.model, seed_of(path))
            say(f"built the skeleton of drafter {drafter.name}: an MTP head of width {head.config.hidden_size}")
            return MTPDrafter(head, width, name=drafter.name)
        real_tokens = max(target.tokenizer.get_vocab().values()) + 1
        model = skeleton_model(read_config(path), self.head_dim, seed_of(path), real_tokens)
        say(f"built the skeleton of drafter {drafter.name}: {shape_of(model)}")
        return ModelDrafter(model, width, name=drafter.name)

    def peers(self, target: LoadedModel) -> Peers:
        return ALONE


WEIGHTS = ("config.json", "model.safetensors.index.json")  # besides *.safetensors: what a skeleton replaces


def save_skeleton(target: LoadedModel, head_dim: int, dest: Path) -> Path:
    """The skeleton target as a model directory (its weights, its config, the real tokenizer
    files), for a server that loads only from disk (mlx_lm.server) to run the same model."""
    from mlx_lm.utils import save_config, save_model

    dest.mkdir(parents=True, exist_ok=True)
    save_model(dest, target.model)
    save_config(skeleton_config(read_config(target.path), head_dim), dest / "config.json")
    for file in target.path.iterdir():
        if file.is_file() and file.suffix != ".safetensors" and file.name not in WEIGHTS:
            shutil.copyfile(file, dest / file.name)
    return dest


def local_path(source: str) -> Path:
    """A model's fetched directory; a clear line, never a download, when it is not here."""
    if is_preset(source):
        return fetched_path(get_preset(source))  # "... run: specmlx models fetch NAME"
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    hint = " (--skeleton never downloads: fetch it first)" if is_repo_id(source) else ""
    raise SpecmlxError(f"{source}: no such model directory{hint}")


def skeleton_specs(target: str, specs: Sequence[str]) -> list[str]:
    """`specs` with `self` (and its variants) drafting from the target's own directory, which
    `Skeleton` builds once; every model is checked to be here before anything is built."""
    target_path = local_path(target)
    out = []
    for spec in specs:
        base, suffix, _ = split_variant(spec)
        if base == SELF:
            out.append(str(target_path) + suffix)
        else:
            if base not in BUILTIN:
                local_path(base)
            out.append(spec)
    return out


def describe(target: LoadedModel, drafters: Sequence[Drafter], head_dim: int) -> dict[str, Any]:
    """The shapes the run used, for the report and the JSON."""
    models = {target.name: shape_of(target.model)}
    for drafter in drafters:
        model = drafter.draft_model
        if model is not None and model is not target.model:
            models[drafter.name] = shape_of(model)
    return {"head_dim": head_dim, "ffn": FFN, "std": STD, "models": models}
