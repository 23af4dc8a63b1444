"""Round costs for the automatic draft length that ignore the clock, for tests."""

from __future__ import annotations

from specmlx.schedule.costs import Costs


class FixedCosts(Costs):
    """Costs as given, in plain rounds, whatever the clock says: the automatic
    length's choices then follow the acceptance history alone, that is the
    tokens generated."""

    def __init__(self, step: float, width: float, jump: float = 0.0) -> None:
        super().__init__()
        self.base = 1.0
        self.fixed = (step, jump, width)

    step = property(lambda self: self.fixed[0])
    jump = property(lambda self: self.fixed[1])
    width = property(lambda self: self.fixed[2])

    def update(self, seconds, steps, drafted, draft_s=None) -> None:
        pass
