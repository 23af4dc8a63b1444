"""Draft length tuned to the acceptance history, or fixed.

A round that accepts every draft says the drafter is on a run: draft more next
time. A round that rejects early wasted the drafts after the rejection: draft
fewer. This is the schedule Hugging Face uses for its assistant models (+2 on a
full accept, -1 otherwise), held within [1, limit]. It changes only how many
tokens are proposed, never what is accepted, so exactness is untouched.

Every length it drafts is one of the set of widths (`widths.py`), whose verify
shapes are compiled before the first answer: a start, limit or step that falls
between two of them is rounded down to the set (k = 5 drafts 4; +2 from 3 is 4). A block drafter's set
goes on past 8 (`widths.BLOCKED`): from 8 its next length is 12, not 10.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan import Plan, Round
from .widths import after, widest


@dataclass
class DraftLength:
    start: int
    limit: int
    adaptive: bool = True
    blocks: bool = False  # a block drafter's: its set reaches past 8 (`widths.BLOCKED`)

    def __post_init__(self) -> None:
        self.current = widest(self.start, self.blocks)

    def plan(self, room: int) -> Plan:
        return Plan(widest(min(self.current, room), self.blocks))

    def likely_plain(self, room: int) -> bool:
        return self.current == 0 or room <= 0

    def update(self, done: Round, seconds: float) -> None:
        if not done.looked_up:  # the length follows the drafter's record, not the lookup's
            self.follow(done.drafted, done.accepted)

    def estimate(self) -> None:
        return None

    @property
    def planned(self) -> int:
        """The length it drafts first: its start, on the set."""
        return widest(self.start, self.blocks)

    @property
    def auto(self) -> None:
        """None: a fixed or adaptive length is not the automatic one."""
        return None

    def _wider(self) -> int:
        """Two more, or the set's next length where that is further (a block drafter's 8, 12, 15), within the limit."""
        return widest(min(max(self.current + 2, after(self.current, self.blocks)), self.limit), self.blocks)

    def follow(self, drafted: int, accepted: int) -> None:
        if not self.adaptive or drafted == 0:
            return
        if accepted == drafted:
            self.current = self._wider()
        else:
            self.current = max(widest(self.current - 1, self.blocks), 1)
