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

Those rates follow the last ten rounds or so, and ten rounds of a drafter right
one time in six are lucky often enough to say it pays. So the first position
also keeps a longer record (`Record`): a drafter whose record falls to one in
five gives up (`gave_up`) until its record climbs back to one in four, or it is
right three times in a row. A new answer weighs the last ones' record as a few
tries (`Record.anew`): its text may suit the drafter less (prose after code it
copied) or more. A drafter right one time in six gains at most a
sixth of a token a round, less than the costs a round does
not see (the drafter catching up, the syncs), and less than the error
of the costs it does see. `give_up` is the clock's word (`realized.py`).
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
        self.record = Record()

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
        self.record.observe(1.0 if accepted else 0.0)

    def observe_first(self, chance: float) -> None:
        """A probe: a first draft token the target would have accepted with this chance."""
        self._fade()
        self.trials[0] += 1.0
        self.accepts[0] += chance
        self.record.observe(chance)

    @property
    def gave_up(self) -> bool:
        """Whether the drafter's longer record says it is right too seldom to draft at all."""
        return self.record.gave_up

    def anew(self) -> None:
        """A new answer: its text may suit the drafter more or less than the last one's (`Record.anew`)."""
        self.record.anew()

    def give_up(self) -> None:
        """Drafting ran slower than plain decoding by the clock (`realized.py`): as `Record.give_up`."""
        self.record.give_up()

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


GIVE_UP = 1 / 5  # a first token right this seldom over the record gives the drafter up: one in six is below it
RESUME = 1 / 4  # and it drafts again once right this often, or once right `STREAK` times in a row
STREAK = 3  # a drafter right one time in six does so once in 216 tries; one whose text turned easy, at once
MISSES = 6  # sure misses in a row that give up a drafter whose record is still young (`YOUNG`): one whose
# lucky start (three probes right) held up its record kept drafting 13 misses on the real pair; a drafter
# right 60% of the time misses six in a row about once in 240 tries
YOUNG = 12.0  # a record weighing fewer tries (faded) than this is young: a new answer's (`CARRIED`) or a fresh one's
RECORD_DECAY = 0.97  # the record weighs about the last 33 first tokens
RECORD_MIN = 6  # tries it needs before it may give up (the calibration's probes are three)
CARRIED = 3  # tries the last answers' record weighs in a new one: six misses give up one right 60% of the time


class Record:
    """How often the drafter's first token is right over its last few dozen tries, and whether
    that gave it up: it gives up at `GIVE_UP` and drafts again at `RESUME`, so a rate between
    the two keeps whichever it was doing. A streak of `STREAK` right tries resumes it at once,
    its record restarting at `RESUME` over `RECORD_MIN` tries: two misses give it up again. While
    its record is young, a run of `MISSES` sure misses gives it up at once, its record restarting
    at `GIVE_UP` over `RECORD_MIN` tries: a right probe then resumes it."""

    def __init__(self) -> None:
        self.trials = 0.0  # faded
        self.accepts = 0.0
        self.tries = 0
        self.streak = 0
        self.misses = 0
        self.gave_up = False

    def anew(self) -> None:
        """A new answer: the record keeps its rate and whether it gave up, weighed as `CARRIED`
        tries at most. Carried whole, three dozen tries of the last answer's text outweighed this
        one's: prompt lookup, right on code it copied, drafted its first 30 misses on prose."""
        if self.trials > CARRIED:
            self.accepts *= CARRIED / self.trials
            self.trials = float(CARRIED)

    def observe(self, chance: float) -> None:
        self.trials = RECORD_DECAY * self.trials + 1.0
        self.accepts = RECORD_DECAY * self.accepts + chance
        self.tries += 1
        self.streak = self.streak + 1 if chance >= 0.5 else 0
        self.misses = self.misses + 1 if chance == 0.0 else 0  # a sure miss: a draft's first token rejected
        rate = self.accepts / self.trials
        if self.gave_up and self.streak >= STREAK and rate < RESUME:
            rate = self._restart(RESUME)
        if not self.gave_up and self.misses >= MISSES and self.trials < YOUNG and rate > GIVE_UP:
            rate = self._restart(GIVE_UP)
        if self.gave_up:
            self.gave_up = rate < RESUME
        else:
            self.gave_up = self.tries >= RECORD_MIN and rate <= GIVE_UP

    def give_up(self) -> None:
        """Give the drafter up, whatever its rate: its record restarts at `GIVE_UP` over `RECORD_MIN`
        tries, as after sure misses, so probes right more often than that resume it."""
        self._restart(GIVE_UP)
        self.streak = self.misses = 0
        self.gave_up = True

    def _restart(self, rate: float) -> float:
        """The record starts again at `rate` over `RECORD_MIN` tries."""
        self.trials, self.accepts = float(RECORD_MIN), RECORD_MIN * rate
        return rate


def expected_tokens(rates: list[float], k: int) -> float:
    """Tokens a round drafting k commits on average: every accepted draft plus
    the target's own token, 1 + a_1 + a_1 a_2 + ... + a_1...a_k."""
    total, run = 1.0, 1.0
    for rate in rates[:k]:
        run *= rate
        total += run
    return total
