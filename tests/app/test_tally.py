"""Rounds read off token sources while an answer streams."""

from app.tally import Tally
from specmlx.events import Source

D, C, B, T = Source.DRAFT, Source.CORRECTED, Source.BONUS, Source.TARGET


def test_each_round_ends_with_the_targets_own_token():
    tally = Tally()
    tally.add([D, D, C, D, D, D, D, B, T])
    tally.add([D, C])
    assert tally.accepted_per_round == [2, 4, 0, 1]
    assert tally.tokens == 11
    assert tally.mean_accepted == 11 / 4


def test_a_round_cut_before_its_target_token_still_counts():
    tally = Tally()
    tally.add([D, B, D, D])  # e.g. EOS came right after two accepted drafts
    assert tally.accepted_per_round == [1, 2]
    assert tally.rounds == 2
