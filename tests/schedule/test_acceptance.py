"""Per-position acceptance rates learned from finished rounds."""

import pytest

from specmlx.schedule.acceptance import Acceptance, expected_tokens


def test_before_any_round_every_position_has_the_first_guess():
    assert Acceptance(3, first=0.5).rates() == [0.5, 0.5, 0.5]


def test_a_round_rules_on_the_accepted_positions_and_the_first_rejected_one():
    acceptance = Acceptance(4, decay=1.0, first=0.5, prior_weight=1.0)
    acceptance.update(drafted=4, accepted=2)
    assert acceptance.trials == [1, 1, 1, 0]  # position 4 was never looked at
    assert acceptance.accepts == [1, 1, 0, 0]
    pooled = (2 + 0.5) / (3 + 1)
    assert acceptance.pooled() == pytest.approx(pooled)
    assert acceptance.rates() == pytest.approx([(1 + pooled) / 2, (1 + pooled) / 2, pooled / 2, pooled])


def test_a_full_accept_rules_on_every_drafted_position_only():
    acceptance = Acceptance(4, decay=1.0)
    acceptance.update(drafted=2, accepted=2)
    assert acceptance.trials == [1, 1, 0, 0] and acceptance.accepts == [1, 1, 0, 0]


def test_an_untried_position_fades_back_to_the_pooled_rate():
    """Drafts kept short never try position 3 again; its one bad trial must not pin it."""
    acceptance = Acceptance(3, decay=0.9)
    acceptance.update(3, 1)  # position 2 rejected once
    for _ in range(30):
        acceptance.update(1, 1)
    assert acceptance.rates()[1] == pytest.approx(acceptance.pooled(), abs=0.05)


def test_recent_rounds_weigh_more():
    acceptance = Acceptance(1, decay=0.8)
    for _ in range(20):
        acceptance.update(1, 1)
    for _ in range(5):
        acceptance.update(1, 0)
    assert acceptance.rates()[0] < 0.4  # five rejections outweigh twenty older accepts


def test_grow_keeps_what_was_learned():
    acceptance = Acceptance(2, decay=1.0)
    acceptance.update(2, 1)
    before = acceptance.rates()
    acceptance.grow(4)
    assert acceptance.rates()[:2] == before and acceptance.positions == 4


def test_expected_tokens_sums_the_chances_of_each_prefix():
    assert expected_tokens([0.5, 0.5, 0.5], 0) == 1.0
    assert expected_tokens([0.5, 0.5, 0.5], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens([1.0, 0.0, 1.0], 3) == 2.0
