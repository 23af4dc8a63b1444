"""How many tokens each round drafts: a schedule asked before every round.

`DraftLength` fixes it or follows the acceptance history (+2/-1);
`AutoDraft` weighs expected tokens against measured costs, k = 0 included.
Every length either drafts is one of a small set (`widths.py`), so that every
verify shape can be compiled before the first answer.
A schedule sees only finished rounds, so whatever it chooses, verification
keeps the target's distribution.
"""

from __future__ import annotations

from typing import Protocol

from ..plan import Plan, Round
from .adaptive import DraftLength
from .auto import AutoDraft, AutoDrafts, AutoEstimate
from .costs import CostEstimate


class Schedule(Protocol):
    def plan(self, room: int) -> Plan:
        """The next round, drafting at most `room` tokens."""

    def likely_plain(self, room: int) -> bool:
        """Whether the round after the one planned last will likely draft nothing,
        guessed before that one finishes (a plain round overlaps the next on it)."""

    def update(self, done: Round, seconds: float) -> None:
        """That round finished: `done`, in `seconds` of the engine's time."""

    def estimate(self) -> AutoEstimate | None:
        """What it measured, for the stats; None for a length that measures nothing."""

    @property
    def planned(self) -> int | None:
        """The length it drafts, as the stats report it, when it fixes one (a length that adapts,
        its first); None for one that chooses each round's (the policy's start is reported)."""

    @property
    def auto(self) -> AutoDraft | None:
        """Itself when it is the automatic length, whose measures (acceptance, costs, probes) a
        batch's load-aware choice reads; None otherwise."""


__all__ = ["AutoDraft", "AutoDrafts", "AutoEstimate", "CostEstimate", "DraftLength", "Schedule"]
