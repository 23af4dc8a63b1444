"""The other processes that keep the server's slots: none, for one process.

A target sharded over ranks (`specmlx.distributed.serve.RankMirror`) needs
every rank to hold the same slots and run each job with rank 0, one at a time.
The slots and the worker call these hooks in the same places whatever serves;
`NoMirror`, the one-process default, does nothing, and its engines keep step
with no one.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from ..config import GenerationConfig
from ..peers import ALONE, Peers


class Mirror(Protocol):
    peers: Peers  # what every slot's engine keeps in step with
    one_at_a_time: bool  # the others follow one generation at a time: the worker runs no batch

    def emptied(self, slot: int) -> None:
        """Slot `slot` was emptied (its caches freed, its engine made anew)."""

    def copied(self, source: int, slot: int, length: int) -> None:
        """Slot `slot` now holds the first `length` tokens of slot `source`'s context, copied."""

    def begin(self, slot: int, keep: int, prompt: Sequence[int], config: GenerationConfig) -> None:
        """A job runs in `slot`, whose engine keeps the first `keep` tokens of its context."""

    def lost(self, err: BaseException, begun: bool) -> str | None:
        """Why the server cannot answer again after `err` (one line), or None if only this job failed.
        `begun`: the job had begun (`begin`) when it failed."""

    def watch(self, lose: Callable[[str], None]) -> None:
        """Call `lose` with one line, from a thread of the mirror's, as soon as the others are seen
        lost: between jobs too, and whatever the MLX thread waits in."""

    def end(self) -> None:
        """The server stops with the others still there: they end too."""


class NoMirror:
    """One process: nobody else holds the slots."""

    peers: Peers = ALONE
    one_at_a_time = False

    def emptied(self, slot: int) -> None:
        pass

    def copied(self, source: int, slot: int, length: int) -> None:
        pass

    def begin(self, slot: int, keep: int, prompt: Sequence[int], config: GenerationConfig) -> None:
        pass

    def lost(self, err: BaseException, begun: bool) -> str | None:
        return None

    def watch(self, lose: Callable[[str], None]) -> None:
        pass

    def end(self) -> None:
        pass


NO_MIRROR = NoMirror()
