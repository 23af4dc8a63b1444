"""Loading a target sharded across the ranks, and rank 0's drafter.

mlx-lm does the work: the model is built lazily, then `shard()` (tensor
parallel) or `pipeline()` keeps this rank's part, so only that part is ever
evaluated and held. This module picks the kind, refuses an architecture with
neither, splits the vocabulary where it can (`vocab.py`), checks the rank's
share fits, and loads the drafter on rank 0 alone: the others never draft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import mlx.core as mx
from mlx.utils import tree_flatten

from ..compat import check_vocab_fits
from ..drafters import Drafter
from ..errors import SpecmlxError, first_line
from ..loading import (DrafterSource, LoadedModel, Progress, check_pair, display_name, is_head_dir, load_drafter,
                       load_tokenizer, resolve, resolve_drafter)
from ..presets import default_preset_name
from ..vocab import vocab_size
from .follower import Follower
from .group import Group
from .memory import check_rank_fits
from .vocab import shard_vocab

TENSOR, PIPELINE, AUTO = "tensor", "pipeline", "auto"
SHARDINGS = (AUTO, TENSOR, PIPELINE)


def sharding_of(path: Path, wanted: str = AUTO) -> str:
    """Tensor parallel where the architecture has `shard()`, else pipeline where
    it has `pipeline()`; `wanted` forces one. Read from the lazily built model."""
    from mlx_lm.utils import load_model

    try:
        model, _ = load_model(path, lazy=True, strict=False)
    except Exception as err:  # mlx-lm raises many types for unknown or broken configs
        raise SpecmlxError(f"{path}: cannot build the model: {first_line(err)}") from None
    kinds = [k for k, ok in ((TENSOR, hasattr(model, "shard")),
                             (PIPELINE, hasattr(getattr(model, "model", None), "pipeline"))) if ok]
    kind = getattr(model, "model_type", type(model).__name__)
    if not kinds:
        raise SpecmlxError(f"{kind} models cannot be sharded (mlx-lm gives them neither shard() nor pipeline())")
    if wanted == AUTO:
        return kinds[0]
    if wanted not in kinds:
        raise SpecmlxError(f"{kind} models cannot be sharded by {wanted}; they support {' and '.join(kinds)}")
    return wanted


def load_sharded(source: str, path: Path, group: Group, sharding: str, vocab_split: bool) -> LoadedModel:
    """This rank's shard of the target, and the tokenizer (never remote code).

    Pipeline stages load through mlx-lm's `sharded_load`. Tensor parallelism
    takes its steps (a lazy model, `shard()`, evaluate) with the vocabulary
    split put between the last two, so no rank ever reads in a whole table it
    will not keep. Loading is not under the watchdog: ranks may read their
    shards at very different speeds."""
    from mlx_lm.utils import load_model, sharded_load

    try:
        if sharding == PIPELINE:
            model, tokenizer = sharded_load(str(path), pipeline_group=group.group,
                                            tokenizer_config={"trust_remote_code": False})
        else:
            model, _ = load_model(path, lazy=True)
            model.shard(group.group)
            if vocab_split:
                shard_vocab(model, group.group)
            # A tensor at a time: each is read whole, cut, and dropped before the next is read.
            for _, weight in tree_flatten(model.parameters()):
                mx.eval(weight)
            tokenizer = load_tokenizer(source, path)
    except FileNotFoundError as err:  # pipeline loading reads the weights' index
        raise SpecmlxError(f"{source}: cannot shard by pipeline without {Path(err.filename or '').name or 'its index'} "
                           "(specmlx convert and mlx_lm.convert write one)") from None
    except (OSError, ValueError) as err:
        raise SpecmlxError(f"{source}: cannot shard: {first_line(err)}") from None
    loaded = LoadedModel(model, tokenizer, path, display_name(source))
    check_vocab_fits(tokenizer, vocab_size(model), source)
    return loaded


def load_drafters_sharded(target: str | None, specs: Sequence[str | None], group: Group, sharding: str = AUTO,
                          progress: Progress | None = None) -> tuple[LoadedModel, list[Drafter]]:
    """This rank's shard of the target and, on rank 0, each drafter with weights;
    elsewhere a `Follower` named after it. Every rank checks what it will hold before any
    weights load. With tensor parallelism the vocabulary is split too, unless
    a drafter reads the target's own embeddings and head (an MTP head)."""
    say = progress or (lambda step: None)
    target = target or default_preset_name()
    sources = [resolve_drafter(spec, target) for spec in specs]
    target_path = resolve(target)
    paths = {s: None if s.builtin else resolve(s.source) for s in dict.fromkeys(sources)}
    kind = sharding_of(target_path, sharding)
    vocab_split = kind == TENSOR and not any(p is not None and is_head_dir(p) for p in paths.values())
    say(f"checking {display_name(target)}" + "".join(f" + {s.name}" for s in paths if not s.builtin)
        + f" on {group.size} ranks")
    models = [p for p in paths.values() if p is not None]

    def fits(t: Path, d: Path | None) -> None:  # rank 0 holds every drafter
        check_rank_fits(t, models if group.leads else [], group.size, vocab_split, pipeline=kind == PIPELINE)

    for source in paths if group.leads else ():
        check_pair(target, source, fits=fits)
    fits(target_path, None)
    say(f"loading 1/{group.size} of target {display_name(target)} by {kind} parallelism ({target_path})")
    loaded = load_sharded(target, target_path, group, kind, vocab_split)
    built: dict[DrafterSource, Drafter] = {}
    for source, path in paths.items():
        if path is None:  # ngram and none hold no weights: every rank has them as they are
            built[source] = load_drafter(source, loaded)
        elif group.leads:
            say(f"loading drafter {source.name} ({path})")
            built[source] = load_drafter(source, loaded, path)
        else:
            built[source] = Follower(source.name)
    # Every rank waits for rank 0's drafters here, untimed: the watchdog times only the rounds after.
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group.group, stream=mx.cpu))
    return loaded, [built[s] for s in sources]


def load_pair_sharded(target: str | None, drafter: str | None, group: Group, sharding: str = AUTO,
                      progress: Progress | None = None) -> tuple[LoadedModel, Drafter]:
    """`load_drafters_sharded` for one drafter."""
    loaded, (built,) = load_drafters_sharded(target, [drafter], group, sharding, progress)
    return loaded, built
