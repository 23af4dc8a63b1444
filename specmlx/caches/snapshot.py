"""A single stream's caches (`stream.make_cache`) as named arrays for a span of positions, and back.

A KV layer keeps one row per position (a quantized one: packed values, scales and biases), each
layer's kind says how (`kinds.py`): a span is a slice of its keys and values, and a prefix is
restored by concatenating its blocks' slices. A recurrent layer (`recurrent.py`) keeps a whole state,
not positions: a span holds the state at its end, when the layer holds one there
(`RecurrentCache.state_at`), and a prefix is restored from its last block's alone. An MTP drafter's
hidden states (`drafters/history.py`) are rows per position, as KV.

Names: `{prefix}.span` (start, end), `{prefix}.{layer}.keys|values` (quantized:
`{prefix}.{layer}.keys|values.q{bits}g{group}.{part}`), `{prefix}.{layer}.state.{slot}`,
so a target's and a drafter's caches share one block's dict under two prefixes.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import mlx.core as mx

from ..errors import SpecmlxError
from .kinds import Arrays
from .stream import Stream

TARGET = "target"  # the target's arrays' prefix; a drafter's are `drafter.{name}`


def capture(cache: Stream, start: int, end: int, prefix: str = TARGET) -> Arrays:
    """Copies of what `cache` holds for positions `start`..`end - 1`; a recurrent layer's state only
    where it holds one at `end` (else the span cannot end a restored prefix: `restorable`). Only a
    `keepable` stream is kept: a KV layer, plain or quantized (rows are positions; not a rotating
    window's buffer), or a recurrent layer."""
    if not 0 <= start < end <= cache.length:
        raise SpecmlxError(f"the cache holds {cache.length} positions, not {start}..{end - 1}")
    if not cache.keepable:
        raise SpecmlxError(f"a cache of {sorted({type(c).__name__ for c in cache})} cannot be kept on disk")
    arrays = {f"{prefix}.span": mx.array([start, end], dtype=mx.int32)}
    for i, (kind, layer) in enumerate(zip(cache.kinds, cache)):
        arrays.update(kind.capture(layer, start, end, prefix, i))
    mx.eval(list(arrays.values()))
    return arrays


def restorable(cache: Stream, blocks: Sequence[Mapping[str, mx.array]], prefix: str = TARGET) -> int:
    """How many of `blocks` (from the first) `restore` can take: each must hold every position layer's
    rows under its kind's names (a block kept at another `--kv-bits`, or of a model of other layers, a
    drafter of the same name, restores nothing), and a recurrent layer is restored only from a block
    that holds its state, so the prefix ends at the last such block."""
    kinds = cache.kinds
    named = [name for i, kind in enumerate(kinds) for name in kind.names(prefix, i)]
    recurrent = [i for i, kind in enumerate(kinds) if not kind.positions]
    beyond = (f"{prefix}.{len(cache)}.", )
    if any(not all(name in b for name in named) or any(k.startswith(beyond) for k in b) for b in blocks):
        return 0
    for n in range(len(blocks), 0, -1):
        if all(any(k.startswith(f"{prefix}.{i}.state.") for k in blocks[n - 1]) for i in recurrent):
            return n
    return 0


def restore(cache: Stream, blocks: Sequence[Mapping[str, mx.array]], prefix: str = TARGET) -> int:
    """Make `cache` hold the positions `blocks` cover, from position 0, in order; how many."""
    spans = [span(block, prefix) for block in blocks]
    if not spans or spans[0][0] != 0 or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        raise SpecmlxError(f"blocks of positions {spans} are not a prefix")
    if restorable(cache, blocks, prefix) != len(blocks):
        raise SpecmlxError("the blocks do not hold this cache's layers (the last one: no state for its recurrent layers)")
    cache.rewind(0)  # a recurrent layer's checkpoint would hold a state of other tokens
    cache.clear()
    for i, (kind, layer) in enumerate(zip(cache.kinds, cache)):
        kind.restore(layer, blocks, prefix, i)
    mx.eval([layer.state for layer in cache])
    return spans[-1][1]


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
