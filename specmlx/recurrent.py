"""Recurrent layers' caches (Gated DeltaNet, Mamba-2), rewound exactly after a verify.

A recurrent layer's state after a token is a fixed-size array (its short convolution's window
and its recurrent state), not a list of positions: a rejected draft cannot be dropped by
lowering an offset. MLX arrays are immutable, so the state before each forward is kept by
reference for free (a `Mark`); a forward run under `replay.recording` also leaves a way to
replay any prefix of it from that mark. A rewind restores the mark at or below the length and
replays the rest of that forward's accepted positions, lazily: the replay is evaluated with the
next round's graph, so a round still syncs once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from mlx_lm.models.cache import ArraysCache

Replay = Callable[[int], None]  # runs a recorded forward's first n positions into its cache


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

    def reachable(self, length: int) -> int:
        """The longest prefix of at most `length` positions this layer can restore exactly."""
        length = min(length, self.offset)
        for mark in reversed(self._marks):
            if mark.offset <= length:
                return length if mark.offset == length or mark.replay is not None else mark.offset
        return 0

    def trim(self, n: int) -> int:
        """Hold `n` positions fewer (`reachable` must allow it): restore the mark below and replay
        the rest; keep the mark before it, so the next rewind may still reach into this forward."""
        length = self.offset - n
        if self.reachable(length) != length:
            raise ValueError(f"cannot rewind a recurrent layer from {self.offset} to {length} positions")
        at = max((i for i, m in enumerate(self._marks) if m.offset <= length), default=None)
        if at is None:  # below every mark: the state of no position at all (mlx-lm's layers read None as zeros)
            self.cache, self.offset = [None] * len(self.cache), 0
            self._marks = [Mark(0, tuple(self.cache))]
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


def rewindable(cache: Sequence[Any]) -> bool:
    """Whether any layer of `cache` is recurrent (records its forwards to be rewound)."""
    return any(hasattr(layer, "reachable") for layer in cache)


def reachable(cache: Sequence[Any], length: int) -> int:
    """The longest prefix of at most `length` positions every layer can hold (KV layers: any)."""
    while True:
        common = min([length, *(layer.reachable(length) for layer in cache if hasattr(layer, "reachable"))])
        if common == length:
            return length
        length = common
