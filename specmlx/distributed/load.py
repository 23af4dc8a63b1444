"""Loading a target sharded across the ranks, and rank 0's drafter.

mlx-lm does the work: `sharded_load` builds the model lazily, then `shard()`
(tensor parallel) or `pipeline()` keeps this rank's part, so only that part
is ever evaluated and held. This module picks the kind, refuses an
architecture with neither, checks the rank's share fits, and loads the
drafter on rank 0 alone: the others never draft.
"""

from __future__ import annotations

from pathlib import Path

from ..compat import check_vocab_fits
from ..drafters import Drafter
from ..errors import SpecmlxError, first_line
from ..loading import LoadedModel, Progress, check_pair, display_name, load_drafter, resolve, resolve_drafter
from ..presets import default_preset_name
from ..vocab import vocab_size
from .follower import Follower
from .group import Group
from .memory import check_rank_fits

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


def sharded_by(loaded: LoadedModel) -> str:
    """How a loaded target was split: mlx-lm's pipeline() leaves its stage size on the model."""
    return PIPELINE if getattr(getattr(loaded.model, "model", None), "pipeline_size", 1) > 1 else TENSOR


def load_sharded(source: str, path: Path, group: Group, sharding: str) -> LoadedModel:
    """This rank's shard of the target, and the tokenizer (never remote code)."""
    from mlx_lm.utils import sharded_load

    pipeline, tensor = (group.group, None) if sharding == PIPELINE else (None, group.group)
    try:
        model, tokenizer = sharded_load(str(path), pipeline_group=pipeline, tensor_group=tensor,
                                        tokenizer_config={"trust_remote_code": False})
    except FileNotFoundError as err:  # pipeline loading reads the weights' index
        raise SpecmlxError(f"{source}: cannot shard by pipeline without {Path(err.filename or '').name or 'its index'} "
                           "(specmlx convert and mlx_lm.convert write one); use --sharding tensor") from None
    except (OSError, ValueError) as err:
        raise SpecmlxError(f"{source}: cannot shard: {first_line(err)}") from None
    loaded = LoadedModel(model, tokenizer, path, display_name(source))
    check_vocab_fits(tokenizer, vocab_size(model), source)
    return loaded


def load_pair_sharded(target: str | None, drafter: str | None, group: Group, sharding: str = AUTO,
                      progress: Progress | None = None) -> tuple[LoadedModel, Drafter]:
    """This rank's shard of the target and, on rank 0, the drafter; elsewhere a
    `Follower` named after it. Every check runs before any weights load."""
    say = progress or (lambda step: None)
    target = target or default_preset_name()
    source = resolve_drafter(drafter, target)
    if group.leads:
        say(f"checking {display_name(target)}" + ("" if source.builtin else f" + {source.name}"))
        target_path, drafter_path = check_pair(
            target, source, fits=lambda t, d: check_rank_fits(t, d, group.size, leads=True))
    else:
        target_path, drafter_path = resolve(target), None
        check_rank_fits(target_path, None, group.size, leads=False)
    kind = sharding_of(target_path, sharding)
    say(f"loading 1/{group.size} of target {display_name(target)} by {kind} parallelism ({target_path})")
    loaded = load_sharded(target, target_path, group, kind)
    if not group.leads:
        return loaded, Follower(source.name)
    if drafter_path is not None:
        say(f"loading drafter {source.name} ({drafter_path})")
    return loaded, load_drafter(source, loaded, drafter_path)
