"""Recurrent layers' caches (Gated DeltaNet, Mamba-2), rewound exactly after a verify.

A recurrent layer's state after a token is a fixed-size array (its short convolution's window
and its recurrent state), not a list of positions: a rejected draft cannot be dropped by
lowering an offset. MLX arrays are immutable, so the state before each forward is kept by
reference for free (a `Mark`); a forward run under `replay.recording` also leaves a way to
replay any prefix of it from that mark. A rewind restores the mark at or below the length and
replays the rest of that forward's accepted positions, lazily: the replay is evaluated with the
next round's graph, so a round still syncs once.

A conversation kept between requests is rewound further back: a chat's next turn renders the
end of the last prompt anew (`RENDERED_AGAIN`), and drops the answer's reasoning. A prefill
keeps a `checkpoint` of the state just before the prompt's last few tokens, and a rewind below
every mark lands there, so the next turn is prefilled from it rather than from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache

Replay = Any  # `replay.Recorded`: called with n, runs a recorded forward's first n positions into its cache

# A chat's next turn may render the last few tokens of this prompt anew: a template's generation prompt
# that the answer's turn drops (Qwen3's `<think>\n\n</think>\n\n` with thinking off), a merge across its end.
RENDERED_AGAIN = 8


@dataclass(frozen=True)
class Mark:
    """The layer's state after `offset` positions, and the recorded forward that starts there, if any."""

    offset: int
    slots: tuple
    replay: Replay | None = None


class RecurrentCache(ArraysCache):
    """mlx-lm's `ArraysCache` that counts its positions and rewinds to any length inside the forwards
    recorded since its last rewind (and the one before it); below those, only to nothing."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.offset = 0
        self.pending: Replay | None = None  # set by the recorder just before its layer's forward
        self._marks = [Mark(0, tuple(self.cache))]
        self._checkpoint: Mark | None = None  # a state kept for a rewind below every mark
        self._replaying = False

    def advance(self, n: int) -> None:
        """Called by the layer at the end of each forward, with its new state in place."""
        super().advance(n)
        self.offset += n
        if self._replaying:
            return
        replay, self.pending = self.pending, None
        if replay is None:  # an unrecorded forward (a prefill): what came before can no longer be reached
            self._marks = []
            # Mamba-2's window is a view of the chunk's whole input: copied, it no longer holds the chunk
            # (in the mark, a checkpoint, a kept conversation).
            self.cache = [None if slot is None else mx.contiguous(slot) for slot in self.cache]
        else:
            self._marks[-1] = replace(self._marks[-1], replay=replay)
        self._marks.append(Mark(self.offset, tuple(self.cache)))

    def hold(self, slots: Sequence[Any], offset: int) -> None:
        """Hold `slots`, the state after `offset` positions reached elsewhere (a batch's row; none: the
        state of no position). Nothing below it can be reached, as after a prefill."""
        self.cache, self.offset, self.pending = list(slots), offset, None
        self._marks = [Mark(offset, tuple(self.cache))]

    def is_trimmable(self) -> bool:
        return True

    def checkpoint(self) -> None:
        """Keep the state now held, for a later rewind to this length (one checkpoint: the last)."""
        self._checkpoint = Mark(self.offset, tuple(self.cache))

    def state_at(self, length: int) -> tuple | None:
        """The state after exactly `length` positions, where one is held (now, a mark, the
        checkpoint) without a replay; else None. Kept by reference: MLX arrays are immutable."""
        if length == self.offset:
            return tuple(self.cache)
        kept = (*self._marks, *((self._checkpoint,) if self._checkpoint is not None else ()))
        return next((m.slots for m in kept if m.offset == length), None)

    @property
    def nbytes(self) -> int:
        """The state, and what is kept to rewind it: the marks' states and records, the checkpoint."""
        kept = (self._checkpoint,) if self._checkpoint is not None else ()
        arrays = {id(a): a for slots in (self.cache, *(m.slots for m in (*self._marks, *kept)))
                  for a in slots if a is not None}
        records = sum(m.replay.nbytes for m in self._marks if m.replay is not None)
        return sum(a.nbytes for a in arrays.values()) + records

    def reachable(self, length: int) -> int:
        """The longest prefix of at most `length` positions this layer can restore exactly."""
        length = min(length, self.offset)
        best = self._checkpoint.offset if self._checkpoint and self._checkpoint.offset <= length else 0
        for mark in reversed(self._marks):
            if mark.offset <= length:
                return max(best, length if mark.offset == length or mark.replay is not None else mark.offset)
        return best

    def trim(self, n: int) -> int:
        """Hold `n` positions fewer (`reachable` must allow it): restore the mark below and replay
        the rest; keep the mark before it, so the next rewind may still reach into this forward."""
        length = self.offset - n
        if self.reachable(length) != length:
            raise ValueError(f"cannot rewind a recurrent layer from {self.offset} to {length} positions")
        if self._checkpoint is not None and self._checkpoint.offset > length:
            self._checkpoint = None  # the positions it holds are being dropped
        at = max((i for i, m in enumerate(self._marks) if m.offset <= length), default=None)
        if at is None or self._marks[at].offset < length and self._marks[at].replay is None:
            # Below every mark that reaches it: the checkpoint, else the state of no position at all
            # (mlx-lm's layers read None as zeros).
            kept = self._checkpoint or Mark(0, (None,) * len(self.cache))
            self.cache, self.offset = list(kept.slots), kept.offset
            self._marks = [kept]
            return n
        mark = self._marks[at]
        self._marks = self._marks[max(0, at - 1) : at + 1]
        self.cache, self.offset = list(mark.slots), mark.offset
        if length > mark.offset:
            self._replaying = True
            try:
                mark.replay(length - mark.offset)
            finally:
                self._replaying = False
            self._marks.append(Mark(self.offset, tuple(self.cache)))
        return n


def mlx_lm_state(layer: Any) -> list | None:
    """The state an mlx-lm cache layer holds if it is a recurrent one (its `ArraysCache` slots), else None
    (a KV layer: rewound by an offset). For mlx-lm's own caches, which `stream.make_cache` replaces."""
    return list(layer.cache) if isinstance(layer, ArraysCache) else None


def is_recurrent(layer: Any) -> bool:
    """Whether a single stream's layer is recurrent (a `RecurrentCache`: rewound by its marks)."""
    return hasattr(layer, "reachable")
