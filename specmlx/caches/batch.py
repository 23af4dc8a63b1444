"""The target's cache for a batch of rows: each layer its kind's batch form (`kinds.py`), mlx-lm's
`BatchKVCache` for a plain KV layer.

mlx-lm keeps rows right-aligned with left padding, and offers `merge`,
`extend`, `extract` and `filter` for rows that join and leave, and a roll
(`prepare(right_padding=...)`, `finalize()`) that moves a row's tail into
its left padding. What it lacks is a rewind that differs per row, which
speculation needs each round: a row keeps its last token and its accepted
drafts and drops the rest. `keep` does it: the part every row drops is a
plain O(1) trim, and only the difference between rows is rolled (a copy of
the cache; none for a batch of one, or when every row drops the same).
Lengths and padding are mirrored on the host so that nothing here syncs.
A quantized layer's rows are three of those, moved alike (`batch_quantized.py`).
A hybrid target's recurrent layers hold each row's state instead, rewound at
each row's own length by a replay of the forward (`batch_recurrent.py`).
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx

from ..errors import SpecmlxError
from .stream import Stream

COMPACT_AT = 256  # drop left padding every row has once it is this long: attention reads it


class BatchCache:
    """Rows of one target's cache; row i holds `lengths[i]` tokens."""

    def __init__(self, layers: int) -> None:
        # Each layer's kind is its first row's (`join`): KV, quantized KV or a recurrent state, read once.
        self.layers: list[Any] = [None] * layers
        self.kinds: list[Any] = []
        self.rewindable = False  # a recurrent layer's rows are rewound by a replay (`replay.recording`)
        self.lengths: list[int] = []
        self.padding: list[int] = []  # each row's left padding, as in every layer
        self.size = 0  # positions every layer holds (mlx-lm's `_idx`)

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers if layer is not None)

    def join(self, cache: Stream, length: int) -> None:
        """Add a row holding the first `length` tokens of a single-row cache (copied)."""
        kinds = list(cache.kinds)
        if len(cache) != len(self.layers) or not all(kind.batched for kind in kinds):
            raise SpecmlxError("only a target whose every layer keeps a plain or quantized KV cache or a "
                               "recurrent state can be batched")
        if not self.rows:  # the first row's kinds are the batch's; its join makes each layer
            self.kinds, self.layers = kinds, [None] * len(kinds)
            self.rewindable = any(kind.recurrent for kind in kinds)
        elif kinds != self.kinds:
            raise SpecmlxError("a row's layers are not of the batch's kinds")
        for i, (kind, one) in enumerate(zip(kinds, cache)):
            one.trim(max(one.offset - length, 0))
            self.layers[i] = kind.join(self.layers[i], one, length)
        padding = max(self.size - length, 0)
        self.padding = [p + max(length - self.size, 0) for p in self.padding] + [padding]
        self.lengths.append(length)
        self.size = max(self.size, length)

    def move_in(self, cache: Stream, length: int) -> None:
        """`join` a slot's single-row cache, which is then emptied: its rows live in the batch now."""
        self.join(cache, length)
        cache.clear()

    def move_out(self, row: int, cache: Stream) -> None:
        """Row `row` leaves (`leave`) into a slot's single-row cache, which holds what it held."""
        cache.take_rows(self.leave(row))

    def leave(self, row: int) -> list[Any]:
        """Remove row `row`; its tokens come back as a single-row cache."""
        out = [kind.leave(layer, row, self.padding[row], self.size, self.lengths[row])
               for kind, layer in zip(self.kinds, self.layers)]
        rest = [i for i in range(self.rows) if i != row]
        del self.lengths[row], self.padding[row]
        if rest:
            self._filter(rest)
        else:
            self.__init__(len(self.layers))
        return out

    def _filter(self, rows: list[int]) -> None:
        index = mx.array(rows)
        for layer in self.layers:
            layer.filter(index)  # also drops the left padding every row has
        drop = min(self.padding)
        self.padding = [p - drop for p in self.padding]
        self.size -= drop

    def keep(self, lengths: Sequence[int]) -> None:
        """After a forward of `width` positions a row: row i keeps its first `lengths[i]` tokens."""
        excess = [self.size - self.padding[i] - n for i, n in enumerate(lengths)]
        if min(excess) < 0:
            raise SpecmlxError("a row cannot keep more than it holds")
        common = min(excess)
        roll = [e - common for e in excess]
        for kind, layer in zip(self.kinds, self.layers):
            kind.keep(layer, excess, common, roll)
        self.size -= common
        self.padding = [p + r for p, r in zip(self.padding, roll)]
        self.lengths = list(lengths)
        if min(self.padding) >= COMPACT_AT:
            self._filter(list(range(self.rows)))

    def grown(self, width: int) -> None:
        """Every row was fed `width` positions (padding included)."""
        self.size += width
        self.lengths = [n + width for n in self.lengths]

    def view(self, row: "RowRef") -> list["RowView"]:
        """Each layer's cache as one row of it reads (what a Gemma 4 assistant attends over)."""
        return [RowView(self, i, row) for i in range(len(self.layers))]


class RowRef:
    """Where a row sits in the batch now; rows move as others leave."""

    def __init__(self, index: int) -> None:
        self.index = index


class RowView:
    """One row of one layer, read like a single-row `KVCache` (keys from position 0)."""

    def __init__(self, cache: BatchCache, layer: int, row: RowRef) -> None:
        self.cache, self.layer, self.row = cache, layer, row

    @property
    def offset(self) -> int:
        return self.cache.lengths[self.row.index]

    def _slice(self, array: mx.array) -> mx.array:
        i, start = self.row.index, self.cache.padding[self.row.index]
        return array[i : i + 1, :, start : self.cache.size]

    @property
    def keys(self) -> mx.array:
        return self._slice(self.cache.layers[self.layer].keys)

    @property
    def values(self) -> mx.array:
        return self._slice(self.cache.layers[self.layer].values)
