"""Predicted outputs: draft by copying the text the caller expects the answer to be.

OpenAI's `prediction` parameter: an editor that asks for a file with a small
change sends the current file, and most of the answer copies it. The
prediction is followed from where the output stands in it: while the output
agrees with it, its next tokens are proposed; after a divergence (the edit),
the output's tail is looked up in the prediction, the longest match first and,
among equals, the nearest at or after the place the output last agreed, and
copying resumes there.

What is proposed depends only on the committed tokens, and a copy is
deterministic (q one-hot), so verification stays exact at every temperature,
as for prompt lookup.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from mlx_lm.utils import common_prefix_len

# A realignment needs the output's last REALIGN_MIN tokens to match: shorter
# tails (a bracket, a newline) match everywhere in code and would propose long
# copies from the wrong place. Longer matches, up to REALIGN_MAX, break ties.
REALIGN_MIN, REALIGN_MAX = 3, 16


class Prediction:
    """Where one generation's output stands in its prediction.

    `tokens`: the prediction; `start`: where the output begins in the
    sequence `propose` is given (the prompt's length)."""

    def __init__(self, tokens: Sequence[int], start: int) -> None:
        self.tokens = list(tokens)
        self.start = start
        self.at: int | None = 0  # the prediction's index after the output's last token; None: lost
        self.hint = 0  # where the output last agreed with the prediction
        self.seen = 0  # output tokens accounted for
        self._index: dict[tuple[int, ...], list[int]] | None = None  # n-gram -> where it ends, made when needed

    @property
    def index(self) -> dict[tuple[int, ...], list[int]]:
        """Where each REALIGN_MIN-gram ends in the prediction: made at the first divergence, not
        when the request starts (an output that agrees to the end never needs it)."""
        if self._index is None:
            self._index = defaultdict(list)
            for end in range(REALIGN_MIN, len(self.tokens) + 1):
                self._index[tuple(self.tokens[end - REALIGN_MIN : end])].append(end)
        return self._index

    def propose(self, sequence: Sequence[int], num: int) -> list[int]:
        """Up to `num` tokens the prediction has after the output in `sequence`; none when lost."""
        self._follow(sequence)
        if self.at is None or num <= 0:
            return []
        return self.tokens[self.at : self.at + num]

    def _follow(self, sequence: Sequence[int]) -> None:
        # Only what is new and the tail a realignment reads: copying the whole output each round
        # would cost a long answer's length every round.
        new = list(sequence[self.start + self.seen :])
        if not new:  # asked again with nothing new (a round retried): nothing moved
            return
        self.seen = len(sequence) - self.start
        if self.at is not None:
            self.hint = self.at + common_prefix_len(self.tokens[self.at : self.at + len(new)], new)
            if self.hint == self.at + len(new):
                self.at = self.hint
                return
        self.at = self.realign(sequence[max(self.start, len(sequence) - REALIGN_MAX - 1) :])

    def realign(self, output: Sequence[int]) -> int | None:
        """Where the output's tail (`output`: its last REALIGN_MAX + 1 tokens or fewer) ends in the
        prediction: the longest match (REALIGN_MIN to REALIGN_MAX tokens), nearest at or after the
        last agreed place, else nearest before it."""
        if len(output) < REALIGN_MIN:
            return None
        ends = self.index.get(tuple(output[-REALIGN_MIN:]), [])
        if not ends:
            return None
        hint = self.hint

        def rank(end: int) -> tuple[int, int, int]:
            n = REALIGN_MIN
            while n < min(REALIGN_MAX, len(output), end) and self.tokens[end - n - 1] == output[-n - 1]:
                n += 1
            return (-n, end < hint, abs(end - hint))

        return min(ends, key=rank)
