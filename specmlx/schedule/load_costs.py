"""What a batched round costs here, in seconds, learned from the batch's own rounds.

A one-row round's costs (`costs.py`) are ratios to a plain round, because one
row's rounds are all near that size. A batch's are not: its forward runs B x L
positions, and on a CPU that is compute-bound from a few rows on, so a
forward of 96 positions costs some six times one of 16, while one row's
measurements would say little more than one. A line through one row's
figures says nothing of the far end, and a drift-tracking base would absorb
the difference as if the machine had slowed down. So the batch keeps its own
figures, by size:

- `forward`: positions fed (padding included) -> the smoothed seconds of a
  round less its drafting: the target's forward and the engine's work. A size
  not yet seen is read off the line through the nearest sizes seen (beyond the
  largest, the slope of the last two, never below one row's shape scaled
  through the largest: where reading the weights binds, as on a Mac's GPU, a
  wider forward costs little more); with one size seen, one row's shape is
  scaled through it; with none, one row's figures are all there is. A guess
  too low is corrected by the round that tries it, one too high would never
  be tried: the guesses lean low;
- `step`: rows in the batch -> the smoothed seconds of one drafter step paid
  (a shared drafter's step drafts for all its rows), from rounds whose
  drafting was timed apart; a size not seen is the nearest size's (one
  forward over more rows costs little more), and with none one row's step.

Rounds in which a drafter first caught up on tokens it had skipped teach
nothing: that work is neither a step nor the forward.
"""

from __future__ import annotations

from .costs import CostEstimate

SMOOTHING = 0.3  # weight of each new measurement of a size


def _smooth(table: dict[int, float], size: int, seconds: float) -> None:
    old = table.get(size)
    table[size] = seconds if old is None else old + SMOOTHING * (seconds - old)


class LoadCosts:
    def __init__(self) -> None:
        self.forward: dict[int, float] = {}  # positions -> seconds
        self.step: dict[int, float] = {}  # rows -> seconds a paid drafter step

    def update(self, positions: int, rows: int, seconds: float, steps: int, draft_s: float | None,
               alone: CostEstimate | None) -> None:
        """A round fed `positions` (padding included) to `rows` rows and took `seconds`, of which
        `steps` paid drafter steps took `draft_s` when timed apart."""
        if draft_s is None:  # drafting ran in one graph with the forward: take out its predicted share
            draft_s = steps * self.step_s(rows, alone)
        elif steps:
            _smooth(self.step, rows, draft_s / steps)
        rest = seconds - draft_s
        if rest > 0.0:
            _smooth(self.forward, positions, rest)

    def verify_s(self, positions: int, alone: CostEstimate | None) -> float:
        """Seconds of a forward over `positions` (and the round's own work)."""
        if positions in self.forward:
            return self.forward[positions]
        seen = sorted(self.forward.items())
        if not seen:
            return _shape(positions, alone)
        below = [p for p in seen if p[0] < positions]
        above = [p for p in seen if p[0] > positions]
        if below and above:  # between two sizes seen: the line through them
            (n0, t0), (n1, t1) = below[-1], above[0]
            return t0 + (t1 - t0) * (positions - n0) / (n1 - n0)
        n, t = above[0] if above else seen[-1]
        scaled = t * _shape(positions, alone) / _shape(n, alone)  # one row's shape through the nearest size
        if above or len(seen) == 1:
            return scaled
        (n0, t0) = seen[-2]  # beyond the largest of two or more: their slope goes on
        return max(t + max((t - t0) / (n - n0), 0.0) * (positions - n), scaled)

    def step_s(self, rows: int, alone: CostEstimate | None) -> float:
        """Seconds of one drafter step paid for a batch of `rows` rows."""
        if rows in self.step:
            return self.step[rows]
        if self.step:
            return self.step[min(self.step, key=lambda r: abs(r - rows))]
        return 0.0 if alone is None else alone.step_s


def _shape(positions: int, alone: CostEstimate | None) -> float:
    """One row's measured shape (or the positions themselves, before anything is measured)."""
    return float(positions) if alone is None else alone.verify_s(positions)
