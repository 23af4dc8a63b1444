"""What a round costs on this machine, learned from the wall time of finished rounds.

A round that drafts k > 0 tokens costs

    base + k * step + verify(k)

and one that drafts nothing costs `base`. Each verify width is measured on its
own (`verify`), as the forward over k + 1 rows is not a line: a 4-bit matmul
costs 1.10 single-row forwards at 2 rows, 1.41 at 3, 2.04 at 5, 2.15 at 9. A
width not measured yet is guessed low (`_read`): from the nearest width
measured below, or before any from the line

    base + jump + k * width

(at the slope `width`, at most its prior's), and no higher than the line
between its measured neighbours; the round that tries it measures it. With:

- `base`: a plain round: the target's forward of one token and the engine's
  own work around it;
- `step`: one drafter step;
- `jump`: what scoring more than one token costs at all. On this CPU a
  one-token forward runs the BLAS's matrix-vector path and two tokens its
  matrix-matrix one, about 30% slower; on a GPU it is close to nothing;
- `width`: what each scored draft adds beyond that (5 tokens cost about 1.3
  to 1.4 single-token forwards here).

This machine's speed drifts by up to 2x within minutes, and both models drift
together. So `step`, `jump` and `width` are kept as ratios to `base`, and only
`base` follows every round: a drift moves all of them and changes no choice.

- `base` comes from every round, once its drafting (timed apart, or its
  predicted share) is taken out and its verify share divided out;
- `step` from the last rounds whose drafting was timed apart (one more
  sync), each over its own base, as the current verify shape gives it;
- each width's verify from consecutive rounds that drafted different sizes:
  both ran at the same speed, so the ratio of what they took after drafting
  is the ratio of their verify widths, and one of the two is known (a plain
  round's is 1); each width keeps the median of its last few;
- `jump` and `width` from the same pairs of rounds: the ratio is a linear
  equation in the two; the last few such equations are solved by least
  squares, held gently towards the priors while they cannot tell the two
  apart (then the jump takes the difference: a guess beyond the widths
  measured leans low, and a guess too low is corrected by the round that
  tries it, where one too high would never be tried);
- a probe's cost (a drafter step, and the catching up on the tokens it
  skipped) from the rounds that probed, over the base: the automatic length
  budgets its probes by it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from statistics import median

from .realized import Realized

# Ratios assumed before a round measures them; the first measurement replaces each.
STEP_PRIOR, JUMP_PRIOR, WIDTH_PRIOR = 0.1, 0.0, 0.05
SMOOTHING = 0.3  # weight of each new measurement of `base`
TIMED = 8  # timed rounds the step is the median of, and probes the probe cost is
PAIRS = 16  # equations the verify shape is fitted to
KEPT = 5  # measurements of one width its verify is the median of
RIDGE_JUMP, RIDGE_WIDTH = 0.001, 0.01  # pull of the priors in that fit: decides only what the pairs leave open
MAX_RATIO = 1.0  # no scored token costs a whole plain round more


@dataclass(frozen=True)
class CostEstimate:
    """Seconds, as measured so far: a plain round, one drafter step, scoring
    more than one token at all, and each scored draft (the line), and the
    verify of each width measured on its own (drafts scored, seconds)."""

    base_s: float
    step_s: float
    jump_s: float
    width_s: float
    widths: tuple[tuple[int, float], ...] = ()

    def verify_s(self, rows: int) -> float:
        """The target's forward over `rows` tokens, engine work included."""
        return _read(rows - 1, dict(self.widths), self.base_s, self.jump_s, self.width_s)


def _read(drafted: int, measured: dict[int, float], base: float, jump: float, width: float) -> float:
    """A verify scoring `drafted` drafts, in the unit of `base`: as measured, else on a line of
    slope `width` (at most the prior's) from the nearest width measured below (from `base` +
    `jump` before any), or on the line between the measured neighbours where that is lower.
    A guess that leans low is tried, and so measured: a knee before a cliff is found so."""
    if drafted <= 0:
        return base
    if drafted in measured:
        return measured[drafted]
    below = max((d for d in measured if d < drafted), default=None)
    above = min((d for d in measured if d > drafted), default=None)
    slope = min(width, WIDTH_PRIOR * base)  # leaning low: no wider guess is left untried
    line = base + jump + drafted * slope if below is None else measured[below] + (drafted - below) * slope
    if above is None:
        return line
    d0, v0 = (0, base) if below is None else (below, measured[below])
    return min(line, v0 + (measured[above] - v0) * (drafted - d0) / (above - d0))


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


class Costs:
    def __init__(self) -> None:
        self.base: float | None = None  # seconds
        self.timed: deque[tuple[float, float, int]] = deque(maxlen=TIMED)  # (step s, rest s, drafted)
        self.shape: tuple[float, float] | None = None  # (jump, width) / base
        self.last: tuple[int, float] | None = None  # the latest round's (drafted, seconds less drafting)
        self.pairs: deque[tuple[float, float, float]] = deque(maxlen=PAIRS)  # equations in (jump, width)
        self.measures: dict[int, deque[float]] = {}  # drafts scored -> the last few measured verifies / base
        self.verified: dict[int, float] = {}  # drafts scored -> the median of those
        self.probes: deque[float] = deque(maxlen=TIMED)  # the last probes' costs / base
        self.realized = Realized()  # what drafting bought by the clock, beside what this prices

    @property
    def measured(self) -> bool:
        """Whether every part has been measured at least once."""
        return self.base is not None and bool(self.timed) and self.shape is not None

    @property
    def step(self) -> float:
        """One drafter step over `base`: in each timed round, over that round's
        own base, so that a drift since does not enter; before any, the cheapest probe's (a step
        and its catching up: the one with least to catch up), which the calibration measures first."""
        if not self.timed:
            return min(self.probes) if self.probes else STEP_PRIOR
        return median(step / (rest / self.verify(drafted)) for step, rest, drafted in self.timed)

    @property
    def jump(self) -> float:
        return JUMP_PRIOR if self.shape is None else self.shape[0]

    @property
    def width(self) -> float:
        return WIDTH_PRIOR if self.shape is None else self.shape[1]

    @property
    def probe(self) -> float:
        """A probe (a drafter step and its catching up) over `base`; one step until measured, and never
        less than a step as timed drafting rounds measure it: a cheap head's probe hides in the noise
        of a plain round's time, and read as free it would be asked every round."""
        probe = median(self.probes) if self.probes else STEP_PRIOR
        return max(probe, self.step) if self.timed else probe

    def verify(self, drafted: int) -> float:
        """Scoring `drafted` drafts after the last token, over `base`: as measured at that width,
        else read off the widths measured and the line (`_read`)."""
        return _read(drafted, self.verified, 1.0, self.jump, self.width)

    def relative(self, steps: int, drafted: int | None = None) -> float:
        """A round of `steps` drafter steps scoring `drafted` drafts (as many as
        steps unless told), in plain rounds."""
        return steps * self.step + self.verify(steps if drafted is None else drafted)

    def update(self, seconds: float, steps: int, drafted: int, draft_s: float | None = None) -> None:
        """A round of `steps` drafter steps proposed `drafted` tokens (a looked-up
        draft takes no step) and took `seconds`; `draft_s` is its drafting
        alone when timed apart."""
        timed = draft_s is not None
        if not timed:  # drafting and verifying ran as one graph: split by the current estimate
            draft_s = seconds * steps * self.step / self.relative(steps, drafted)
        rest = seconds - draft_s  # the target's forward and the engine's work
        if rest <= 0.0:  # a clock too coarse to have seen the round: nothing to learn from it
            return
        self.base = _smooth(self.base, rest / self.verify(drafted))
        if timed and steps > 0:
            self.timed.append((draft_s / steps, rest, drafted))
        if self.last is not None and self.last[0] != drafted:
            self._measure(self.last, (drafted, rest))
            self.pairs.append(_equation(self.last, (drafted, rest)))
            self.shape = _fit(self.pairs)
        self.last = (drafted, rest)

    def probed(self, seconds: float) -> None:
        """A round that drafted nothing and probed took `seconds`: beyond a plain round (the last
        one if it came just before, at this speed), the probe."""
        plain = self.last[1] if self.last is not None and self.last[0] == 0 else self.base
        if plain is not None:
            self.probes.append(max(seconds / plain - 1.0, 0.0))

    def _measure(self, one: tuple[int, float], other: tuple[int, float]) -> None:
        """Two rounds at one speed, (drafted, rest) each: the width not yet known from the one known
        (a plain round's is 1), else the later from the earlier."""
        (d1, r1), (d2, r2) = one, other
        if d1 and not (d2 and d1 in self.verified):
            d1, r1, d2, r2 = d2, r2, d1, r1  # learn d1 from d2
        if not d2 or not (d1 == 0 or d1 in self.verified):
            return
        ratio = self.verified.get(d1, 1.0) * r2 / r1
        kept = self.measures.setdefault(d2, deque(maxlen=KEPT))
        kept.append(min(max(ratio, 1.0), 1.0 + MAX_RATIO * (1 + d2)))
        self.verified[d2] = median(kept)

    def estimate(self) -> CostEstimate | None:
        if self.base is None:
            return None
        widths = tuple(sorted((d, v * self.base) for d, v in self.verified.items()))
        return CostEstimate(self.base, self.step * self.base, self.jump * self.base, self.width * self.base, widths)


def _equation(one: tuple[int, float], other: tuple[int, float]) -> tuple[float, float, float]:
    """Two rounds at one speed, (drafted d, rest r) each with r = base (1 + jump [d > 0] + width d):
    r1 (1 + jump e2 + width d2) = r2 (1 + jump e1 + width d1), as (a_jump, a_width, b) of
    a_jump jump + a_width width = b, scaled by r1."""
    (d1, r1), (d2, r2) = one, other
    e1, e2 = float(d1 > 0), float(d2 > 0)
    return (e2 - r2 / r1 * e1, d2 - r2 / r1 * d1, r2 / r1 - 1.0)


def _fit(pairs: deque[tuple[float, float, float]]) -> tuple[float, float]:
    """(jump, width) by least squares over the equations, then again without the
    worst quarter: a round slowed by something else, or two rounds either side
    of a sudden drift, give one equation far off the rest."""
    jump, width = _solve(pairs)
    if len(pairs) >= 4:
        kept = sorted(pairs, key=lambda e: abs(e[0] * jump + e[1] * width - e[2]))[: len(pairs) * 3 // 4]
        jump, width = _solve(kept)
    return min(max(jump, 0.0), MAX_RATIO), min(max(width, 0.0), MAX_RATIO)


def _solve(pairs) -> tuple[float, float]:
    """Least squares with a ridge towards the priors."""
    aa = ab = bb = ay = by = 0.0
    for a, b, y in pairs:
        aa, ab, bb, ay, by = aa + a * a, ab + a * b, bb + b * b, ay + a * y, by + b * y
    aa, bb = aa + RIDGE_JUMP, bb + RIDGE_WIDTH
    ay, by = ay + RIDGE_JUMP * JUMP_PRIOR, by + RIDGE_WIDTH * WIDTH_PRIOR
    det = aa * bb - ab * ab  # > 0: the ridge keeps the system positive definite
    return (ay * bb - by * ab) / det, (aa * by - ab * ay) / det
