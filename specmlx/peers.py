"""The other processes a round keeps in step with: none, for one process.

A target sharded over ranks (`specmlx.distributed.Lockstep`) needs every rank
to score the same tokens and commit the same verdict. The round calls these
hooks in the same places whatever runs it; `Alone`, the one-process default,
passes everything through and waits on the device alone.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import ContextManager, Protocol

import mlx.core as mx


class Peers(Protocol):
    @property
    def one_process(self) -> bool:
        """Whether nothing is kept in step: a round may then run ahead of its sync (`round.start_ahead`)."""

    def waiting(self) -> ContextManager[None]:
        """Around every blocking wait on the device (with ranks: bounded, since they wait on each other)."""

    def propose(self, tokens: mx.array, looked_up: bool) -> mx.array:
        """The round's draft tokens as every process scores them (lazy)."""

    def decide(self, accepted: mx.array, following: mx.array, after: mx.array) -> tuple[mx.array, mx.array]:
        """The verdict every process commits: accepted drafts and the next token (lazy).
        `after` is the round's forward, which the verdict must not run ahead of."""

    def end_round(self) -> None:
        """The round has synced."""

    def stop(self) -> None:
        """The generation is over, however it ended."""

    def lockstep(self) -> "Peers | None":
        """The ranks' lockstep (`distributed.Lockstep`, which the callers that start and stop ranks hand
        their followers), or None in one process."""


class Alone:
    """One process: nothing to keep in step with."""

    @property
    def one_process(self) -> bool:
        return True

    def waiting(self) -> ContextManager[None]:
        return nullcontext()

    def propose(self, tokens: mx.array, looked_up: bool) -> mx.array:
        return tokens

    def decide(self, accepted: mx.array, following: mx.array, after: mx.array) -> tuple[mx.array, mx.array]:
        return accepted, following

    def end_round(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def lockstep(self) -> None:
        return None


ALONE = Alone()
