"""A single stream's caches (`cache.make_cache`) as named arrays for a span of positions, and back.

A KV layer keeps one row per position: a span is a slice of its keys and values, and a prefix is
restored by concatenating its blocks' slices. A recurrent layer (`recurrent.py`) keeps a whole state,
not positions: a span holds the state at its end, when the layer holds one there
(`RecurrentCache.state_at`), and a prefix is restored from its last block's alone. An MTP drafter's
hidden states (`drafters/history.py`) are rows per position, as KV.

Names: `{prefix}.span` (start, end), `{prefix}.{layer}.keys|values`, `{prefix}.{layer}.state.{slot}`,
so a target's and a drafter's caches share one block's dict under two prefixes.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .stream import cache_length, clear, rewind
from ..errors import SpecmlxError
from .recurrent import is_recurrent

Arrays = dict[str, mx.array]
TARGET = "target"  # the target's arrays' prefix; a drafter's are `drafter.{name}`


def keepable(cache: list[Any]) -> bool:
    """Whether every layer is one `capture` keeps: a plain KV cache (rows are positions; not a chunked
    or rotating one's buffer) or a recurrent layer."""
    return all(type(layer) is KVCache or is_recurrent(layer) for layer in cache)


def capture(cache: list[Any], start: int, end: int, prefix: str = TARGET) -> Arrays:
    """Copies of what `cache` holds for positions `start`..`end - 1`; a recurrent layer's state only
    where it holds one at `end` (else the span cannot end a restored prefix: `restorable`)."""
    if not 0 <= start < end <= cache_length(cache):
        raise SpecmlxError(f"the cache holds {cache_length(cache)} positions, not {start}..{end - 1}")
    arrays = {f"{prefix}.span": mx.array([start, end], dtype=mx.int32)}
    for i, layer in enumerate(cache):
        if is_recurrent(layer):
            for j, slot in enumerate(layer.state_at(end) or ()):
                if slot is not None:
                    arrays[f"{prefix}.{i}.state.{j}"] = slot
        elif type(layer) is KVCache and layer.keys is not None:
            arrays[f"{prefix}.{i}.keys"] = mx.contiguous(layer.keys[..., start:end, :])
            arrays[f"{prefix}.{i}.values"] = mx.contiguous(layer.values[..., start:end, :])
        else:
            raise SpecmlxError(f"layer {i}'s cache ({type(layer).__name__}) cannot be kept on disk")
    mx.eval(list(arrays.values()))
    return arrays


def restorable(cache: list[Any], blocks: Sequence[Mapping[str, mx.array]], prefix: str = TARGET) -> int:
    """How many of `blocks` (from the first) `restore` can take: a recurrent layer is restored only
    from a block that holds its state, so the prefix ends at the last such block."""
    recurrent = [i for i, layer in enumerate(cache) if is_recurrent(layer)]
    attention = [i for i in range(len(cache)) if i not in recurrent]
    # Blocks of a model of other layers (a drafter of the same name) restore nothing.
    if any(f"{prefix}.{len(cache)}.keys" in b or f"{prefix}.{len(cache)}.state.0" in b or
           not all(f"{prefix}.{i}.keys" in b for i in attention) for b in blocks):
        return 0
    for n in range(len(blocks), 0, -1):
        if all(any(k.startswith(f"{prefix}.{i}.state.") for k in blocks[n - 1]) for i in recurrent):
            return n
    return 0


def restore(cache: list[Any], blocks: Sequence[Mapping[str, mx.array]], prefix: str = TARGET) -> int:
    """Make `cache` hold the positions `blocks` cover, from position 0, in order; how many."""
    spans = [span(block, prefix) for block in blocks]
    if not spans or spans[0][0] != 0 or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        raise SpecmlxError(f"blocks of positions {spans} are not a prefix")
    if restorable(cache, blocks, prefix) != len(blocks):
        raise SpecmlxError("the last block holds no state for the recurrent layers")
    length, last = spans[-1][1], blocks[-1]
    rewind(cache, 0)  # a recurrent layer's checkpoint would hold a state of other tokens
    clear(cache)
    for i, layer in enumerate(cache):
        if is_recurrent(layer):
            layer.hold([last.get(f"{prefix}.{i}.state.{j}") for j in range(len(layer.cache))], length)
        else:
            layer.update_and_fetch(*(mx.concatenate([b[f"{prefix}.{i}.{part}"] for b in blocks], axis=2)
                                     for part in ("keys", "values")))
    mx.eval([layer.state for layer in cache])
    return length


def span(block: Mapping[str, mx.array], prefix: str = TARGET) -> tuple[int, int]:
    """The positions (start, end) a block's arrays under `prefix` hold."""
    start, end = block[f"{prefix}.span"].tolist()
    return start, end


def leading(blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
    """How many of `blocks`, from the first, hold arrays under `prefix` (a drafter's, kept beside
    the target's only while that drafter was in use)."""
    return next((n for n, block in enumerate(blocks) if f"{prefix}.span" not in block), len(blocks))


def capture_rows(rows: mx.array, name: str = "hidden") -> Arrays:
    """A span's rows of hidden states (`HiddenHistory.rows(start, end)`), kept as a copy."""
    return {f"{name}.rows": mx.contiguous(rows)}


def restore_rows(blocks: Sequence[Mapping[str, mx.array]], name: str = "hidden") -> mx.array:
    """The prefix's rows, for `HiddenHistory.observe(0, rows)`."""
    return mx.concatenate([block[f"{name}.rows"] for block in blocks])
