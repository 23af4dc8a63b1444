"""KV caches that can be rewound in O(1), built from mlx-lm's own.

A rewind only lowers each layer's offset (mlx-lm's `trim`); nothing is
recomputed. Caches that cannot be rewound are swapped or refused up front, so
a rejected draft can never leave stale entries behind.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache, make_prompt_cache

from ..errors import SpecmlxError, first_line
from .kinds import KVBits, kind_of, known
from .recurrent import RENDERED_AGAIN, RecurrentCache, is_recurrent, reachable, rewindable

PREFILL_STEP = 512


def make_cache(model: nn.Module, name: str = "model", kv: KVBits | None = None) -> list[Any]:
    """The model's mlx-lm cache, made rewindable; with `kv`, its attention layers' keys and values
    quantized (`kinds.KVBits`), refused in one line where the model's attention cannot read them so.

    A sliding-window layer's RotatingKVCache overwrites its oldest entries and
    so cannot be trimmed once full. A full KVCache keeps the whole window and
    stays exact, because mlx-lm's sliding layers also pass `window_size` to
    their attention mask. It costs memory linear in the context, not the window.
    A recurrent layer's ArraysCache becomes a `RecurrentCache`, rewound by restoring a kept state
    and replaying accepted positions (`recurrent.py`).
    """
    cache = [_rewindable(layer, kv) for layer in make_prompt_cache(model)]
    if kv is not None:
        _reads_quantized(model, name, kv)
    # A layer keeping several caches (a CacheList: Falcon-H1's attention beside Mamba, DeepSeek-V3.2's and
    # GLM-5's indexer keys beside the latent KV) has no single length to read, rewind or copy by.
    stuck = sorted({type(c).__name__ for c in cache if isinstance(c, CacheList) or not c.is_trimmable()})
    if stuck:
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(
            f"{name} ({kind}) uses caches that cannot be rewound ({', '.join(stuck)}); "
            "speculative decoding needs KV caches or recurrent layers held in an ArraysCache"
        )
    return cache


def refuse_recurrent(model: nn.Module, what: str) -> None:
    """Refuse, in one line, a model with recurrent layers where `what` does not rewind them yet."""
    if any(type(layer) is ArraysCache for layer in make_prompt_cache(model)):
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{what}: targets with recurrent layers ({kind}) are not supported yet; "
                           "one process runs them (`specmlx generate`, `serve`, the chat app)")


def _rewindable(layer: Any, kv: KVBits | None = None) -> Any:
    if isinstance(layer, RotatingKVCache) or type(layer) is KVCache:
        return KVCache() if kv is None else kv.layer()
    if type(layer) is ArraysCache:  # subclasses may keep more than slots a forward replaces
        return RecurrentCache(len(layer.cache))
    return layer


def _reads_quantized(model: nn.Module, name: str, kv: KVBits) -> None:
    """Refuse, in one line, a model whose attention cannot read quantized keys and values: one token
    is run lazily into such a cache (nothing is computed). Gemma 4's layers that share an earlier
    layer's keys read them without their cache, so not quantized; a head whose width the group size
    does not divide cannot be quantized by groups."""
    try:
        model(mx.array([[0]], dtype=mx.uint32), cache=[_rewindable(layer, kv) for layer in make_prompt_cache(model)])
    except (TypeError, ValueError, AttributeError) as err:
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{name} ({kind}) cannot keep its keys and values at {kv.bits} bits in groups of "
                           f"{kv.group_size}: {first_line(err)}") from None


def cache_length(cache: list[Any]) -> int:
    """How many tokens the cache holds."""
    return cache[0].offset if cache else 0


def held_bytes(cache: list[Any]) -> int:
    """What the cache's layers hold in memory now (a recurrent layer: its state and checkpoint)."""
    return sum(kind_of(layer).nbytes(layer) for layer in cache)


def bytes_per_position(cache: list[Any]) -> int:
    """What the cache holds per position, from its layers' shapes (evaluated or not)."""
    return sum(kind_of(layer).per_position(layer) for layer in cache)


def kv_bytes_per_token(model: nn.Module, kv: KVBits | None = None) -> int:
    """What a model's KV cache holds per token (kept as `kv` says), read from shapes alone: one token
    is run lazily and never evaluated, so this costs no forward (and no collective when sharded)."""
    return bytes_per_position(_one_token(model, kv))


def recurrent_bytes(model: nn.Module) -> int:
    """What a model's recurrent layers hold at any length (0 for a transformer), from shapes alone."""
    return sum(slot.nbytes for layer in _one_token(model) if is_recurrent(layer)
               for slot in layer.cache if slot is not None)


def _one_token(model: nn.Module, kv: KVBits | None = None) -> list[Any]:
    """A cache that one token was run into, lazily: its shapes are known, nothing is computed."""
    cache = make_cache(model, kv=kv)
    model(mx.array([[0]], dtype=mx.uint32), cache=cache)
    return cache


def rewind(cache: list[Any], length: int) -> None:
    """Keep only the first `length` tokens; a no-op if it holds fewer. A recurrent layer may reach
    only fewer (`recurrent.reachable`): then every layer holds that many, and the caller feeds the rest."""
    held = cache_length(cache)
    recurrent = [layer for layer in cache if is_recurrent(layer)]  # one scan a round, in the hot path
    length = reachable(recurrent, min(length, held)) if recurrent else min(length, held)
    if length < held or recurrent:  # a recurrent layer drops its marks even at its own length
        for layer in cache:
            layer.trim(held - length)


def clear(cache: list[Any]) -> None:
    """Hold nothing: each layer lets go of its arrays (whoever else holds them keeps them); a
    recurrent layer keeps its checkpoint, for the positions it will hold again (a server slot)."""
    for layer in cache:
        kind_of(layer).clear(layer)


def take_rows(cache: list[Any], rows: Sequence[Any]) -> None:
    """Each layer holds its row's arrays (a recurrent layer: its state) and length in place of its
    own: O(1), nothing is copied."""
    for layer, row in zip(cache, rows):
        kind_of(layer).take(layer, row)


def copyable(cache: list[Any]) -> bool:
    """Whether `copy_prefix` can copy into or from `cache`: every layer's rows are positions (a
    recurrent layer's state is not a prefix of positions)."""
    return all(known(c) and kind_of(c).positions for c in cache)


def copy_prefix(cache: list[Any], source: list[Any], length: int) -> int:
    """Make `cache` hold `source`'s first `length` positions in buffers of its own (a memory copy,
    not a forward); how many it holds: 0 where either is not `copyable`, or their kinds differ."""
    length = min(length, cache_length(source))
    if length <= 0 or not (copyable(cache) and copyable(source)) or labels(cache) != labels(source):
        return 0
    for mine, theirs in zip(cache, source):
        kind_of(mine).copy(mine, theirs, length)
    mx.eval([c.state for c in cache])
    return length


def labels(cache: list[Any]) -> list[str]:
    """Each layer's kind, by name and setting (a quantized layer's bits and group)."""
    return [kind_of(layer).label for layer in cache]


def resumes_at(prompt_length: int) -> int:
    """Where a chat's next turn after a prompt of this length may start to differ from it: its last
    `RENDERED_AGAIN` tokens (at most half of it) may be rendered anew. The one place that rule is
    written: a prefill keeps a recurrent checkpoint there, the disk keeps a block ending there, and a
    slot's conversation is continued by a prompt sharing it up to there."""
    return prompt_length - min(RENDERED_AGAIN, prompt_length // 2)


def chunks(cache: list[Any], prompt_length: int, every: int | None = None) -> Iterator[tuple[int, int]]:
    """The spans a prefill feeds to bring `cache` from what it holds to `prompt_length - 1` positions
    (the last token is the first round's), `PREFILL_STEP` at most, and ending at each multiple of
    `every` on the way (where a caller keeps the caches by block). With recurrent layers it also stops
    `RENDERED_AGAIN` before the prompt's end and keeps a checkpoint there once the caller has fed
    that span: a chat's next turn, which may render those tokens anew, is rewound to it."""
    start, end = cache_length(cache), prompt_length - 1
    at = resumes_at(prompt_length) if rewindable(cache) else None
    if at is not None and 0 < start >= at:  # already past it (a turn that continued): the nearest is here
        checkpoint(cache)
    blocks = range((start // every + 1) * every, end, every) if every else ()
    cuts = sorted({*range(start, end, PREFILL_STEP), end, *blocks,
                   *([at] if at is not None and start < at <= end else [])})
    for low, high in zip(cuts, cuts[1:]):
        yield low, high
        if high == at:
            checkpoint(cache)


def checkpoint(cache: list[Any]) -> None:
    """Each recurrent layer keeps the state it holds now, to be rewound to later."""
    for layer in cache:
        if hasattr(layer, "checkpoint"):
            layer.checkpoint()


def prefill_prompt(model: nn.Module, cache: list[Any], prompt: Sequence[int]) -> None:
    """Bring `cache` to hold `prompt[:-1]`, from what it holds of it (its `chunks`), and evaluate."""
    for low, high in chunks(cache, len(prompt)):
        model(mx.array(prompt[low:high], dtype=mx.uint32)[None], cache=cache)
        mx.eval([c.state for c in cache])


def prefill(model: nn.Module, cache: list[Any], tokens: Sequence[int]) -> None:
    """Run `tokens` through the model into the cache, in chunks, and evaluate."""
    for start in range(0, len(tokens), PREFILL_STEP):
        chunk = mx.array(tokens[start : start + PREFILL_STEP], dtype=mx.uint32)
        model(chunk[None], cache=cache)
        mx.eval([c.state for c in cache])
