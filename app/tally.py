"""Live round counts of one answer, read off the sources of its tokens.

Every round ends with one token the target wrote itself (corrected, bonus or
plain target), after the drafts it accepted; so the sources alone give the
accepted drafts per round while the answer streams. The engine's frozen
`GenerationStats` replaces these figures when the answer ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from specmlx.events import Source


@dataclass
class Tally:
    tokens: int = 0
    closed: list[int] = field(default_factory=list)  # accepted drafts of each ended round
    open_drafts: int = 0  # accepted drafts of a round cut before its target token (EOS, stop)
    draft_lengths: list[int] = field(default_factory=list)  # the length chosen for each round

    def add(self, sources: Iterable[Source], draft_length: int | None = None) -> None:
        """One streamed batch: its tokens' sources and, if given, its round's chosen draft length."""
        if draft_length is not None:
            self.draft_lengths.append(draft_length)
        for source in sources:
            self.tokens += 1
            if source is Source.DRAFT:
                self.open_drafts += 1
            else:
                self.closed.append(self.open_drafts)
                self.open_drafts = 0

    @property
    def accepted_per_round(self) -> list[int]:
        return self.closed + ([self.open_drafts] if self.open_drafts else [])

    @property
    def rounds(self) -> int:
        return len(self.accepted_per_round)

    @property
    def mean_accepted(self) -> float:
        """Tokens per round (accepted drafts plus the target's own), as the engine counts it."""
        return self.tokens / self.rounds if self.rounds else 0.0
