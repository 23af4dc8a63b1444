"""Live round counts of one answer, read off the engine's round events.

Each `RoundEvent` says what its round planned (`num_draft`) and how many
drafts the target accepted, so the sparklines need no guessing where a round
ended. The engine's frozen `GenerationStats` replaces these figures when the
answer ends; the per-round lists stay for the sparklines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from specmlx.events import RoundEvent


@dataclass
class Tally:
    tokens: int = 0  # emitted: a round cut by end of sequence or a stop string emits fewer than it accepted
    first_round: int = 0  # tokens of the first round, which also paid for the prefill
    accepted_per_round: list[int] = field(default_factory=list)
    draft_lengths: list[int] = field(default_factory=list)  # the length planned for each round

    @classmethod
    def of(cls, rounds: Iterable[RoundEvent]) -> "Tally":
        tally = cls()
        for event in rounds:
            tally.add(event)
        return tally

    def add(self, event: RoundEvent) -> None:
        if not self.rounds:
            self.first_round = len(event.tokens)
        self.tokens += len(event.tokens)
        self.accepted_per_round.append(event.accepted)
        self.draft_lengths.append(event.num_draft)

    @property
    def rounds(self) -> int:
        return len(self.accepted_per_round)

    @property
    def mean_accepted(self) -> float:
        """Tokens per round (accepted drafts plus the target's own), as `GenerationStats` counts it."""
        return (sum(self.accepted_per_round) + self.rounds) / self.rounds if self.rounds else 0.0
