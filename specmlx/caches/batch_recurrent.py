"""A batch's recurrent layers: every row's state in one layer, each rewound at its own accepted length.

A recurrent state belongs to a row, not to its positions, so rows' states are concatenated on
axis 0 with no left padding, and outside a rewind the layer gives no mask. The round's verify
forward, of width W for every row (a row's rejected drafts and the right padding of shorter rows
included), is recorded (`replay.recording`). After it, row i keeps its first n_i positions of it:
the state before the forward (its mark) is restored and the recorded forward replayed from it,
lazily, so the round still syncs once:

- where the mixer stops each row's state at its own length (mlx-lm's `ArraysCache.lengths`: its
  short convolution's window taken at the row's end, no update past it under the mask
  `make_mask`), one replay for all rows, of width max(n_i);
- elsewhere (Nemotron-H's Mamba-2 mixer passes no lengths to its state update), one replay for
  each group of rows that keep the same count, on those rows alone.
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache

from ..errors import SpecmlxError
from .replay import Recorded

# Mixers whose state update honours a batch's per-row `lengths` (mlx-lm 0.32.2, read and checked by
# tests/caches/test_batch_recurrent.py). Nemotron-H's is not one: its SSM update is not told the lengths.
BY_LENGTH = frozenset({
    "mlx_lm.models.qwen3_5.GatedDeltaNet", "mlx_lm.models.qwen3_next.Qwen3NextGatedDeltaNet",
    "mlx_lm.models.mamba2.Mamba2Block", "mlx_lm.models.granitemoehybrid.GraniteMoeHybridMamba2Mixer",
    "mlx_lm.models.lfm2.ShortConv",
})


def by_length(recorded: Recorded) -> bool:
    """Whether one replay under each row's length rewinds every row of this recorded mixer."""
    kind = type(recorded.mixer)
    return f"{kind.__module__}.{kind.__qualname__}" in BY_LENGTH


class BatchRecurrentCache(ArraysCache):
    """One recurrent layer of a batch's rows: each slot holds every row's state, row i at index i."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.rows = 0
        self.offset = 0  # positions fed, padding included (the recorder checks the layer advanced)
        self.pending: Recorded | None = None  # set by the recorder just before its mixer's forward
        self._mark = tuple(self.cache)  # every row's state before the forward not yet kept
        self._fed: tuple[Recorded | None, int] | None = None  # that forward: its record and width
        self._replaying = False

    @property
    def nbytes(self) -> int:
        return sum(slot.nbytes for slot in self.cache if slot is not None)

    def advance(self, n: int) -> None:
        """Called by the mixer at the end of each forward, with its new state in place."""
        super().advance(n)
        self.offset += n
        if self._replaying:
            return
        if self._fed is not None:
            raise SpecmlxError("a batch's recurrent layer was fed twice before its rows kept what they accepted")
        self._fed, self.pending = (self.pending, n), None

    def join(self, slots: Sequence[mx.array | None]) -> None:
        """Add a row holding `slots`, a single-row layer's state (a slot of none: zeros)."""
        self.cache = [_concatenate(mine, self.rows, theirs, 1) for mine, theirs in zip(self.cache, slots)]
        self.rows += 1
        self._held()

    def row(self, i: int) -> tuple[mx.array | None, ...]:
        """Row `i`'s state, as a single row's slots (the batch then `filter`s it out)."""
        return tuple(None if slot is None else mx.contiguous(slot[i : i + 1]) for slot in self.cache)

    def filter(self, batch_indices: mx.array) -> None:
        """Keep only the rows `batch_indices`, in that order."""
        super().filter(batch_indices)
        self.rows = batch_indices.size
        self._held()

    def keep(self, dropped: Sequence[int]) -> None:
        """After the forward of width W: row i keeps its first W - `dropped[i]` positions of it."""
        fed, self._fed = self._fed, None
        width = 0 if fed is None else fed[1]
        kept = [width - d for d in dropped]
        if min(kept, default=0) < 0:
            raise SpecmlxError("a row cannot keep more than its recurrent layer was fed")
        if all(n == width for n in kept):  # every row keeps the whole forward: its end state
            self._held()
            return
        if fed[0] is None:
            raise SpecmlxError("cannot rewind a batch's recurrent layer: its forward was not recorded")
        after, self.cache = self.cache, list(self._mark)
        self._replaying = True
        try:
            if by_length(fed[0]):
                self._replay_by_length(fed[0], kept)
            else:
                self._replay_by_group(fed[0], kept, width, after)
        finally:
            self._replaying, self.lengths = False, None
        self._held()

    def _replay_by_length(self, replay: Recorded, kept: list[int]) -> None:
        """One replay for every row, each stopping at its own length."""
        if max(kept):
            self.lengths = mx.array(kept)
            replay(max(kept), mask=self.make_mask(max(kept)))

    def _replay_by_group(self, replay: Recorded, kept: list[int], width: int, after: list) -> None:
        """One replay for each group of rows that keep the same count; rows that keep none, their mark;
        rows that keep the whole forward of `width`, its end state (`after`)."""
        mark, order, parts = self._mark, [], []
        for n in sorted(set(kept) - {0}):
            rows = [i for i, k in enumerate(kept) if k == n]
            index = mx.array(rows)
            if n == width:
                self.cache = [slot[index] for slot in after]
            else:
                self.cache = [None if slot is None else slot[index] for slot in mark]
                replay(n, rows=index)
            order += rows
            parts.append(self.cache)
        rest = [i for i, k in enumerate(kept) if k == 0]
        if not parts:
            self.cache = list(mark)
            return
        if rest:
            parts.append([_rows(slot, rest, like) for slot, like in zip(mark, parts[0])])
        back = mx.argsort(mx.array(order + rest))
        self.cache = [mx.concatenate(slots)[back] for slots in zip(*parts)]

    def _held(self) -> None:
        """What the layer holds now is every row's state before the next forward."""
        self._mark = tuple(self.cache)


def _concatenate(a: mx.array | None, a_rows: int, b: mx.array | None, b_rows: int) -> mx.array | None:
    """Two slots' rows one after the other; a slot of none holds zeros (as mlx-lm's layers read it)."""
    if a is None and b is None:
        return None
    like = a if b is None else b
    a = mx.zeros((a_rows, *like.shape[1:]), like.dtype) if a is None else a
    b = mx.zeros((b_rows, *like.shape[1:]), like.dtype) if b is None else b
    return mx.concatenate([a, b])


def _rows(slot: mx.array | None, rows: list[int], like: mx.array) -> mx.array:
    """`rows` of a mark's slot; of a slot of none, zeros shaped as a replayed one's rows."""
    if slot is None:
        return mx.zeros((len(rows), *like.shape[1:]), like.dtype)
    return slot[mx.array(rows)]
