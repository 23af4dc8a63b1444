"""What the engine streams: one event per emitted token."""

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
