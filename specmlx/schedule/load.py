"""Load-aware draft lengths: one k per row, for the batch as a whole.

A batched round costs each row's drafter steps plus one target forward over
every row's fed positions, padded to the widest row (B x L positions). The
choice is the k_i that maximise the whole batch's expected committed tokens
per second:

    sum_i E_i(k_i) / (sum_i k_i step_i + verify(B L)),   L = 1 + max k_i

(rows of one shared drafter pay its steps once: max k_i step over them)
with E_i from the row's drafter's acceptance (`acceptance.py`) and costs
in one unit (seconds, as a batch measures them: `load_costs.py`): verify
cost is a function of the total positions scored, so a batch that fills the machine makes every
scored draft dear and the choice drafts less, and none once a drafted token
costs more than it saves. For each width L, the rows' k_i are found by
Dinkelbach's iteration (each row then maximises E_i(k) - ratio k step_i on
its own). Each k_i, and so each width, is one of the set (`widths.py`). With
one row this is the cost-aware choice of `auto.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from ..events import draft_steps
from .acceptance import expected_tokens
from .widths import widest, within

ITERATIONS = 4  # Dinkelbach steps a width: the ratio settles in two or three


@dataclass(frozen=True)
class Lane:
    """One row as the choice sees it: its drafter's acceptance rates, the most it
    may draft, and one drafter step (in the unit of `choose`'s verify). `fixed`:
    a row whose length is not chosen here (its request fixed it). `blocks`: its drafter proposes a
    whole draft in one step (a block drafter)."""

    rates: tuple[float, ...]
    cap: int
    step: float
    fixed: int | None = None
    group: Hashable | None = None  # rows of one shared drafter: one step drafts for all of them
    blocks: bool = False

    def steps(self, k: int) -> int:
        return draft_steps(k, self.blocks)


def choose(lanes: Sequence[Lane], verify: Callable[[int], float]) -> list[int]:
    """Each row's k for the most expected tokens per unit of time; `verify(n)`: a forward over n positions."""
    gains = [[expected_tokens(list(lane.rates), k) for k in range(_top(lane) + 1)] for lane in lanes]
    best, chosen = -1.0, [0] * len(lanes)
    fixed = {lane.fixed for lane in lanes if lane.fixed is not None}
    widths = {1 + k for lane in lanes for k in within(_top(lane), lane.blocks)} | {1 + k for k in fixed}
    for width in sorted(widths):
        ratio = 0.0
        for _ in range(ITERATIONS):
            ks = [_fit(lane, gain, width, ratio) for lane, gain in zip(lanes, gains)]
            ratio = _ratio(lanes, gains, ks, verify)
        if ratio > best + 1e-12:
            best, chosen = ratio, ks
    return chosen


def _top(lane: Lane) -> int:
    return lane.fixed if lane.fixed is not None else lane.cap


def _fit(lane: Lane, gain: list[float], width: int, ratio: float) -> int:
    """The row's best k within `width` at this tokens-per-time `ratio`. A row of a shared drafter
    drafts the whole width: the group's steps and the padding are paid whatever it drafts."""
    if lane.fixed is not None:
        return lane.fixed
    if lane.group is not None:
        return widest(min(lane.cap, width - 1), lane.blocks)
    return max(within(min(lane.cap, width - 1), lane.blocks), key=lambda k: gain[k] - ratio * lane.step * lane.steps(k))


def _ratio(lanes: Sequence[Lane], gains: list[list[float]], ks: Sequence[int], verify: Callable[[int], float]) -> float:
    tokens = sum(gain[k] for gain, k in zip(gains, ks))
    shared: dict[Hashable, float] = {}
    for lane, k in zip(lanes, ks):
        if lane.group is not None:
            shared[lane.group] = max(shared.get(lane.group, 0.0), lane.step * k)
    cost = sum(lane.step * lane.steps(k) for lane, k in zip(lanes, ks) if lane.group is None) + sum(shared.values())
    return tokens / (cost + verify(len(lanes) * (1 + max(ks))))
