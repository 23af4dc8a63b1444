"""Under load the batch drafts as its own costs say: where a wider forward is nearly free, its
rows draft; where compute binds, no row drafts, and no row probes either (a model drafter's
probe is a forward over every token it skipped, and no acceptance would make drafting pay)."""

from __future__ import annotations

from typing import Callable

from specmlx.batch import Batch, Member
from specmlx.caches.stream import make_cache
from specmlx.schedule.load_costs import LoadCosts
from tests.test_golden_generations import POLICIES, PROMPT, engine_for, models

from .test_batch import config

ROWS = 8


class Known(LoadCosts):
    """A machine whose costs are given: the rounds' wall times teach it nothing."""

    def __init__(self, forward: Callable[[int], float]) -> None:
        super().__init__()
        self.forward_s = forward

    def update(self, *args, **kwargs) -> None:
        pass

    def verify_s(self, positions, alone) -> float:
        return self.forward_s(positions)

    def step_s(self, rows, alone) -> float:
        return 0.05


def rounds(forward: Callable[[int], float], count: int = 4) -> list[list[tuple[int, float | None]]]:
    """Each round's (planned draft length, probe) per row, for 8 rows of a drafter known to be
    good, each of whose last probe would have been accepted."""
    target = models().target
    batch = Batch(target, len(make_cache(target)), max_rows=ROWS)
    batch.costs = Known(forward)
    batch.costs.step[ROWS] = 0.05  # drafting at this size measured: rows that joined others may try it
    for _ in range(ROWS):
        member = Member(engine_for("model", POLICIES["auto"]), PROMPT, config(0.0, "auto", max_tokens=40))
        for _ in range(30):
            member.auto.acceptance.update(4, 4)
        member.hit = True
        batch.add(member)
    return [[(event.num_draft, event.probe) for _, event in batch.step()] for _ in range(count)]


def test_where_a_wider_forward_is_nearly_free_every_row_drafts():
    served = rounds(lambda positions: 0.4 + 0.001 * positions)
    assert all(k > 0 for row in served for k, _ in row)


def test_where_compute_binds_no_row_drafts_or_probes():
    served = rounds(lambda positions: 0.05 * positions)
    assert all(k == 0 and probe is None for row in served for k, probe in row)
