"""How many tokens a round proposes, and from where: the draft policy.

One frozen record, carried by `GenerationConfig` and by the bench's drafter
variants, so the settings that shape a round are named in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SpecmlxError

# Longest tail a lookup matches: longer matches are tried first and are the
# more reliable copies.
LOOKUP_NGRAM = 8
# The draft length when not told, and where the automatic and adaptive ones start.
START_DRAFT = 4


@dataclass(frozen=True)
class DraftPolicy:
    """`num_draft`: tokens drafted a round (default `START_DRAFT`); None
    chooses it every round, from 0 (plain decoding) to `max_draft`, for the
    most tokens per second measured (`specmlx.schedule.auto`). With `adaptive` it is where
    the length starts before it follows the acceptance history, up to `max_draft`.
    `p_min` > 0 stops a draft after a step whose top probability is below it
    (one small sync per drafted token); `num_draft` is then a cap.
    `lookup` = n > 0 first looks for the last n (up to `LOOKUP_NGRAM`) tokens
    earlier in the context and, when found, proposes up to `lookup_draft`
    tokens that followed them instead of asking the drafter: free drafts where
    the answer copies its input (code edits)."""

    num_draft: int | None = START_DRAFT
    max_draft: int = 12
    adaptive: bool = False
    p_min: float = 0.0
    lookup: int = 0
    lookup_draft: int = 8

    def __post_init__(self) -> None:
        if self.num_draft is not None and self.num_draft < 0:
            raise SpecmlxError(f"number of draft tokens must be >= 0, got {self.num_draft}")
        if self.max_draft < 1:
            raise SpecmlxError(f"maximum draft length must be >= 1, got {self.max_draft}")
        if not 0.0 <= self.p_min < 1.0:
            raise SpecmlxError(f"draft p-min must be in [0, 1), got {self.p_min}")
        if not 0 <= self.lookup <= LOOKUP_NGRAM:
            raise SpecmlxError(f"lookup match length must be in 0..{LOOKUP_NGRAM} (0 turns it off), "
                               f"got {self.lookup}")
        if self.lookup_draft < 1:
            raise SpecmlxError(f"lookup draft length must be >= 1, got {self.lookup_draft}")

    @property
    def auto(self) -> bool:
        """The draft length is chosen each round from measured costs."""
        return self.num_draft is None and not self.adaptive

    @property
    def start(self) -> int:
        """The first rounds' draft length."""
        return START_DRAFT if self.num_draft is None else self.num_draft

    @property
    def fixed_length(self) -> bool:
        """`num_draft` drafts every round: what Leviathan's speed-up formula assumes."""
        return not self.auto and not self.adaptive and self.p_min == 0.0 and self.lookup == 0
