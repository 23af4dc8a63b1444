"""What the engine streams: one event per round, holding its emitted tokens."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Source(str, Enum):
    """Who wrote a token."""

    DRAFT = "draft"  # drafted and accepted by the target
    CORRECTED = "corrected"  # the target's token where it rejected a draft
    BONUS = "bonus"  # the target's extra token after every draft was accepted
    TARGET = "target"  # the target's token in a round with nothing drafted


@dataclass(frozen=True)
class TokenEvent:
    """One emitted token. `text` is the text it releases (may be empty while
    a multi-byte character or a possible stop string is still incomplete)."""

    token: int
    text: str
    source: Source


def draft_steps(drafted: int, blocked: bool) -> int:
    """Drafter forwards `drafted` tokens take: one for them all from a block drafter (`blocked`), else one each."""
    return min(drafted, 1) if blocked else drafted


def drafter_steps(drafted: int, looked_up: bool, blocked: bool, probe: float | None) -> int:
    """Drafter forwards a round took: none for a looked-up proposal, one for a probe."""
    return (0 if looked_up else draft_steps(drafted, blocked)) + (probe is not None)


@dataclass(frozen=True)
class RoundEvent:
    """One round: the tokens it emitted, with their text and sources, and what it did.

    `num_draft` is the draft length planned for it; it proposed `drafted`
    tokens (copied, from the context or the request's prediction, when `looked_up`) and the target accepted
    `accepted` of them (`blocked`: one drafter forward proposed them). `probe` is, for a plain round
    that probed the drafter, the chance the target would have accepted the probe's token. `tokens` can
    hold fewer than accepted + 1 when the generation ended inside the round
    (end of sequence, a stop string, max tokens), or none."""

    tokens: tuple[TokenEvent, ...]
    num_draft: int
    drafted: int
    accepted: int
    looked_up: bool = False
    probe: float | None = None
    blocked: bool = False

    @property
    def steps(self) -> int:
        """The drafter forwards it took."""
        return drafter_steps(self.drafted, self.looked_up, self.blocked, self.probe)

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)
