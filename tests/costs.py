"""Round costs for the automatic draft length that ignore the clock, for tests."""

from __future__ import annotations

from dataclasses import dataclass

from specmlx.schedule.costs import Costs
from specmlx.schedule.realized import Realized


class Unclocked(Realized):
    """No verdict of the clock's on drafting."""

    def drafting_round(self, seconds, tokens) -> bool:
        return False


class FixedCosts(Costs):
    """Costs as given, in plain rounds, whatever the clock says: the automatic
    length's choices then follow the acceptance history alone, that is the
    tokens generated."""

    def __init__(self, step: float, width: float, jump: float = 0.0) -> None:
        super().__init__()
        self.base = 1.0
        self.fixed = (step, jump, width)
        self.realized = Unclocked()

    step = property(lambda self: self.fixed[0])
    jump = property(lambda self: self.fixed[1])
    width = property(lambda self: self.fixed[2])

    def update(self, seconds, steps, drafted, draft_s=None) -> None:
        pass

    def probed(self, seconds) -> None:
        pass


@dataclass(frozen=True)
class CostScenario:
    """Round costs a test injects instead of the clock's, named for the machine they describe."""

    name: str
    step: float  # a drafter step, in target steps
    width: float  # each scored draft token, in target steps

    def costs(self) -> FixedCosts:
        return FixedCosts(self.step, self.width)


# The default pair on a 2-core x86-64 CPU under OpenBLAS (a 5-token verify costs 1.28 target steps),
# by drafter: the 0.5B's step is a third of the 1.5B's, the bundled head's a twentieth.
TWO_CORE_CPU = {
    "qwen2.5-coder-0.5b": CostScenario("two-core CPU, 0.5B drafter", step=0.315, width=0.07),
    "mtp": CostScenario("two-core CPU, bundled MTP head", step=0.056, width=0.07),
}
