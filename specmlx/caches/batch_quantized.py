"""A batch's quantized keys and values (`--kv-bits`): mlx-lm has a batch form of its KV cache and a
quantized form, not the two together (its server turns batching off with `--kv-bits`).

A quantized layer keeps three arrays by position for its keys and three for its values: the packed values,
a scale and a bias a group (mlx's affine quantization). Each pair of them (packed keys and packed values,
their scales, their biases) is held here as the keys and values of one mlx-lm `BatchKVCache`, which then
pads, rolls, trims, filters and extends them by position as it does plain rows. The three move alike, so
they share one padding and one length; the first is read for them. Its `bits` and `group_size` make
mlx-lm's attention read it as quantized, as it reads a single row's `QuantizedKVCache`.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, _BaseCache

PARTS = 3  # what `mx.quantize` makes of an array: packed values, scales, biases


class BatchQuantizedKVCache(_BaseCache):
    """Rows of one quantized attention layer, left-padded and right-aligned as `BatchKVCache`'s."""

    def __init__(self, bits: int, group_size: int, parts: list[BatchKVCache] | None = None) -> None:
        self.bits, self.group_size = bits, group_size
        self.parts = parts if parts is not None else [BatchKVCache([]) for _ in range(PARTS)]

    @classmethod
    def merge(cls, one: QuantizedKVCache) -> "BatchQuantizedKVCache":
        """One row, from a single row's layer holding its first `one.offset` positions (copied)."""
        parts = []
        for j in range(PARTS):
            part = KVCache()
            if one.keys is not None and one.offset:
                part.keys, part.values = one.keys[j][..., : one.offset, :], one.values[j][..., : one.offset, :]
                part.offset = one.offset
            parts.append(BatchKVCache.merge([part]))
        return cls(one.bits, one.group_size, parts)

    def extract(self, row: int, start: int, end: int, length: int) -> QuantizedKVCache:
        """Row `row`'s positions `start:end` (past its padding) as a single row's layer holding `length`."""
        one = QuantizedKVCache(group_size=self.group_size, bits=self.bits)
        if self.keys is not None and length:
            one.keys, one.values = ([mx.contiguous(p[row : row + 1, :, start:end]) for p in parts]
                                    for parts in (self.keys, self.values))
            one.offset = length
        return one

    @property
    def keys(self) -> list[mx.array] | None:
        return None if self.parts[0].keys is None else [p.keys for p in self.parts]

    @property
    def values(self) -> list[mx.array] | None:
        return None if self.parts[0].values is None else [p.values for p in self.parts]

    @property
    def offset(self) -> mx.array:
        return self.parts[0].offset

    @property
    def left_padding(self) -> mx.array:
        return self.parts[0].left_padding

    @property
    def _idx(self) -> int:  # mlx-lm's name for the positions every row's layer holds
        return self.parts[0]._idx

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[list[mx.array], list[mx.array]]:
        packed = (mx.quantize(keys, group_size=self.group_size, bits=self.bits),
                  mx.quantize(values, group_size=self.group_size, bits=self.bits))
        fetched = [part.update_and_fetch(k, v) for part, k, v in zip(self.parts, *packed)]
        return [k for k, _ in fetched], [v for _, v in fetched]

    def make_mask(self, *args: Any, **kwargs: Any) -> Any:
        return self.parts[0].make_mask(*args, **kwargs)

    @property
    def state(self) -> list[Any]:
        """Its parts' arrays, to evaluate; never set: a batch layer is made by `merge` and grown by `extend`."""
        return [part.state for part in self.parts]

    def prepare(self, **kwargs: Any) -> None:
        for part in self.parts:
            part.prepare(**kwargs)

    def finalize(self) -> None:
        for part in self.parts:
            part.finalize()

    def trim(self, n: int) -> int:
        return [part.trim(n) for part in self.parts][0]

    def filter(self, rows: mx.array) -> None:
        # Each part reads its left padding on the host (a sync each): only as a row leaves, or at a compaction.
        for part in self.parts:
            part.filter(rows)

    def extend(self, other: "BatchQuantizedKVCache") -> None:
        for part, theirs in zip(self.parts, other.parts):
            part.extend(theirs)

    def is_trimmable(self) -> bool:
        return True

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.parts[0].keys is None

    @property
    def nbytes(self) -> int:
        return sum(part.nbytes for part in self.parts)
