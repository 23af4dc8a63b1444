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

from ..errors import SpecmlxError
from .recurrent import RENDERED_AGAIN, RecurrentCache, is_recurrent, reachable, rewindable

PREFILL_STEP = 512


def make_cache(model: nn.Module, name: str = "model") -> list[Any]:
    """The model's mlx-lm cache, made rewindable.

    A sliding-window layer's RotatingKVCache overwrites its oldest entries and
    so cannot be trimmed once full. A full KVCache keeps the whole window and
    stays exact, because mlx-lm's sliding layers also pass `window_size` to
    their attention mask. It costs memory linear in the context, not the window.
    A recurrent layer's ArraysCache becomes a `RecurrentCache`, rewound by restoring a kept state
    and replaying accepted positions (`recurrent.py`).
    """
    cache = [_rewindable(layer) for layer in make_prompt_cache(model)]
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


def _rewindable(layer: Any) -> Any:
    if isinstance(layer, RotatingKVCache):
        return KVCache()
    if type(layer) is ArraysCache:  # subclasses may keep more than slots a forward replaces
        return RecurrentCache(len(layer.cache))
    return layer


def cache_length(cache: list[Any]) -> int:
    """How many tokens the cache holds."""
    return cache[0].offset if cache else 0


def held_bytes(cache: list[Any]) -> int:
    """What the cache's layers hold in memory now (a recurrent layer: its state and checkpoint)."""
    return sum(layer.nbytes for layer in cache if getattr(layer, "keys", None) is not None or is_recurrent(layer))


def bytes_per_position(cache: list[Any]) -> int:
    """What the cache holds per position, from its layers' shapes (evaluated or not)."""
    layers = [c for c in cache if getattr(c, "keys", None) is not None]
    return sum((c.keys.nbytes + c.values.nbytes) // c.keys.shape[2] for c in layers)


def kv_bytes_per_token(model: nn.Module) -> int:
    """What a model's KV cache holds per token, read from shapes alone: one token is run
    lazily and never evaluated, so this costs no forward (and no collective when sharded)."""
    return bytes_per_position(_one_token(model))


def recurrent_bytes(model: nn.Module) -> int:
    """What a model's recurrent layers hold at any length (0 for a transformer), from shapes alone."""
    return sum(slot.nbytes for layer in _one_token(model) if is_recurrent(layer)
               for slot in layer.cache if slot is not None)


def _one_token(model: nn.Module) -> list[Any]:
    """A cache that one token was run into, lazily: its shapes are known, nothing is computed."""
    cache = make_cache(model)
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
        if is_recurrent(layer):
            layer.hold([None] * len(layer.cache), 0)
        else:
            layer.keys = layer.values = None
            layer.offset = 0


def take_rows(cache: list[Any], rows: Sequence[Any]) -> None:
    """Each layer holds its row's arrays (a recurrent layer: its state) and length in place of its
    own: O(1), nothing is copied."""
    for layer, row in zip(cache, rows):
        if is_recurrent(layer):
            layer.hold(row.cache, row.offset)
        else:
            layer.keys, layer.values, layer.offset = row.keys, row.values, row.offset


def copyable(cache: list[Any]) -> bool:
    """Whether `copy_prefix` can copy into or from `cache`: every layer a plain `KVCache` (a rotating
    window's or a recurrent layer's state is not a prefix of positions)."""
    return all(type(c) is KVCache for c in cache)


def copy_prefix(cache: list[Any], source: list[Any], length: int) -> int:
    """Make `cache` hold `source`'s first `length` positions in buffers of its own (a memory copy,
    not a forward); how many it holds: 0 where either is not `copyable`."""
    length = min(length, cache_length(source))
    if length <= 0 or not (copyable(cache) and copyable(source)):
        return 0
    clear(cache)
    for mine, theirs in zip(cache, source):
        mine.update_and_fetch(theirs.keys[..., :length, :], theirs.values[..., :length, :])
    mx.eval([c.state for c in cache])
    return length


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
