"""Loading a target sharded across the ranks, and rank 0's drafter.

mlx-lm does the work: the model is built lazily, then `shard()` (tensor
parallel) or `pipeline()` keeps this rank's part, so only that part is ever
evaluated and held. This module picks the kind, refuses an architecture with
neither, splits the vocabulary where it can (`vocab.py`), checks the rank's
share fits, and loads the drafters on rank 0 alone: the others never draft.
`Ranks` plugs all of this into `specmlx.loading.load_models`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

import mlx.core as mx
from mlx.utils import tree_flatten

from ..caches.stream import refuse_recurrent
from ..compat import check_vocab_fits
from ..drafters import Drafter
from ..errors import SpecmlxError, first_line
from ..loading import (DrafterSource, LoadedModel, Progress, check_resolved, display_name, is_head_dir, load_drafter,
                       load_tokenizer)
from ..models.dflash import is_block_dir
from ..vocab import vocab_size
from .follower import Follower
from .group import Group
from .lockstep import Lockstep
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
    refuse_recurrent(model, "--distributed")
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


@dataclass(frozen=True)
class Ranks:
    """The `Placement` of a target sharded over `group`'s ranks (`sharding`: auto, tensor
    or pipeline; settled to one from the target's architecture). Each rank holds its shard
    and checks that it fits; rank 0 alone holds the drafters with weights, the others a
    `Follower` named after each. With tensor parallelism the vocabulary is split too, unless
    a drafter reads the target's own embeddings and head (an MTP head)."""

    group: Group
    sharding: str = AUTO
    vocab_split: bool = False
    drafter_paths: tuple[Path, ...] = ()  # what rank 0 holds beside its shard

    @property
    def where(self) -> str:
        return f" on {self.group.size} ranks"

    def settle(self, target: Path, drafters: Sequence[Path]) -> Ranks:
        for path in drafters:  # their taps of a sharded target's layers are untried: refused, never run wrong
            if is_block_dir(path):
                raise SpecmlxError(f"--distributed: block drafters ({path.name}) are not supported yet; one "
                                   "process runs them (`specmlx generate`, `serve`, the chat app)")
        kind = sharding_of(target, self.sharding)
        vocab_split = kind == TENSOR and not any(is_head_dir(p) for p in drafters)
        return replace(self, sharding=kind, vocab_split=vocab_split, drafter_paths=tuple(drafters))

    def fits(self, target: Path, drafter: Path | None = None) -> None:
        """This rank's share of `target`, and on rank 0 every drafter beside it."""
        check_rank_fits(target, list(self.drafter_paths) if self.group.leads else [], self.group.size,
                        self.vocab_split, pipeline=self.sharding == PIPELINE)

    def check(self, target: str, target_path: Path, drafters: Mapping[DrafterSource, Path | None]) -> None:
        for drafter, path in drafters.items() if self.group.leads else ():
            check_resolved(target, target_path, drafter, path, fits=self.fits)
        self.fits(target_path)

    def load_target(self, source: str, path: Path, say: Progress) -> LoadedModel:
        say(f"loading 1/{self.group.size} of target {display_name(source)} by {self.sharding} parallelism ({path})")
        return load_sharded(source, path, self.group, self.sharding, self.vocab_split)

    def load_drafter(self, drafter: DrafterSource, target: LoadedModel, path: Path | None,
                     say: Progress) -> Drafter:
        if path is None:  # ngram and none hold no weights: every rank has them as they are
            return load_drafter(drafter, target)
        if not self.group.leads:
            return Follower(drafter.name)
        say(f"loading drafter {drafter.name} ({path})")
        return load_drafter(drafter, target, path)

    def peers(self, target: LoadedModel) -> Lockstep:
        # Every rank waits for rank 0's drafters here, untimed: the watchdog times only the rounds after.
        mx.eval(mx.distributed.all_sum(mx.array(1.0), group=self.group.group, stream=mx.cpu))
        return Lockstep.of(self.group, target.model)
