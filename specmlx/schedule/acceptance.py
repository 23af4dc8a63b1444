"""How likely each draft position is to be accepted, learned from finished rounds.

Position i of a draft is only looked at when positions 1..i-1 were accepted,
so each position keeps its own counts of those trials and of its accepts:
a_i = P(position i accepted | positions before it were). Every position's
counts fade by `decay` at each round that drafted, so the estimate follows
the text (code after prose, a copied block) rather than the whole session.

A position with few trials leans on the pooled rate of all positions
(`prior_weight` pseudo-trials at it): deep positions are tried only after
accepts, so their own counts are few and, left alone, one unlucky early
trial would keep the draft short for good. As a position goes untried its
counts fade, and it returns to the pooled rate: the draft grows again.
"""

from __future__ import annotations


class Acceptance:
    def __init__(self, positions: int, decay: float = 0.9, first: float = 0.5,
                 prior_weight: float = 4.0) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.first = first  # the rate assumed before any trial
        self.prior_weight = prior_weight
        self.trials = [0.0] * positions
        self.accepts = [0.0] * positions

    @property
    def positions(self) -> int:
        return len(self.trials)

    def grow(self, positions: int) -> None:
        """Track at least `positions` positions (a longer cap for the next generation)."""
        extra = positions - len(self.trials)
        if extra > 0:
            self.trials += [0.0] * extra
            self.accepts += [0.0] * extra

    def update(self, drafted: int, accepted: int) -> None:
        """A round proposed `drafted` tokens and the target accepted the first `accepted`."""
        if drafted == 0:
            return
        self._fade()
        for i in range(min(accepted + 1, drafted, len(self.trials))):  # positions the target ruled on
            self.trials[i] += 1.0
            self.accepts[i] += 1.0 if i < accepted else 0.0

    def observe_first(self, chance: float) -> None:
        """A probe: a first draft token the target would have accepted with this chance."""
        self._fade()
        self.trials[0] += 1.0
        self.accepts[0] += chance

    def _fade(self) -> None:
        self.trials = [self.decay * t for t in self.trials]
        self.accepts = [self.decay * a for a in self.accepts]

    def pooled(self) -> float:
        """The acceptance rate over every position's trials."""
        trials = sum(self.trials)
        return (sum(self.accepts) + self.first) / (trials + 1.0)

    def rates(self) -> list[float]:
        """a_1..a_n, each in [0, 1]."""
        pooled = self.pooled()
        weight = self.prior_weight
        return [(accepts + weight * pooled) / (trials + weight) for trials, accepts in zip(self.trials, self.accepts)]


def expected_tokens(rates: list[float], k: int) -> float:
    """Tokens a round drafting k commits on average: every accepted draft plus
    the target's own token, 1 + a_1 + a_1 a_2 + ... + a_1...a_k."""
    total, run = 1.0, 1.0
    for rate in rates[:k]:
        run *= rate
        total += run
    return total
