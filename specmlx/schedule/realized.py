"""What drafting has bought, by the wall clock: the automatic length's check on its own costs.

The automatic length drafts when its cost model says a round of k pays (`auto.py`). That
model prices what it can measure, and a drafter that pays by a few percent on paper lives
within its errors: a width measured once beside a slow round, the look-ahead a plain round
gets and a drafting one does not, the first rounds after a prefill. The bundled MTP head,
right one time in five on a held-out edit, drafted 30 of 58 rounds priced to pay and ran
at 0.86x the target alone.

So each `WINDOW` drafting rounds' seconds, over the tokens they committed, are held
against the last plain rounds' seconds a token: drafting slower than plain decoding by the
clock, by more than `MARGIN`, gives the drafter up (`acceptance.Record.give_up`), whatever
the model says. Copies (a lookup, a prediction) are not the drafter's and are left out.
Windows do not overlap: a drafter right 80% of the time has an unlucky window of eight now
and then, and judged after every round it was given up in one answer of six, simulated.
"""

from __future__ import annotations

from collections import deque

WINDOW = 8  # drafting rounds weighed together: their clock's noise (10% a round here) averages to 4%
PLAIN = 4  # plain rounds it needs before it judges: one round alone was 25% off the rest here
MARGIN = 0.1  # what the window's noise leaves of it: the MTP head's drafting above ran 25% slower a token


class Realized:
    def __init__(self) -> None:
        self.plain: deque[float] = deque(maxlen=WINDOW)  # seconds of the last plain rounds, a token each
        self.drafting: deque[tuple[float, int]] = deque(maxlen=WINDOW)  # (seconds, tokens committed)

    def plain_round(self, seconds: float) -> None:
        self.plain.append(seconds)

    def drafting_round(self, seconds: float, tokens: int) -> bool:
        """A round that drafted took `seconds` and committed `tokens`: whether, with it, a window
        of `WINDOW` such rounds ran slower a token than plain rounds do, by more than `MARGIN`."""
        self.drafting.append((seconds, tokens))
        if len(self.drafting) < WINDOW or len(self.plain) < PLAIN:
            return False
        spent = sum(s for s, _ in self.drafting) / sum(t for _, t in self.drafting)
        self.drafting.clear()
        return spent > (1.0 + MARGIN) * sum(self.plain) / len(self.plain)
