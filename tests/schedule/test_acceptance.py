"""Per-position acceptance rates learned from finished rounds."""

import pytest

from specmlx.schedule.acceptance import Acceptance, Record, expected_tokens


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


def _record(*chances: float) -> Record:
    record = Record()
    for chance in chances:
        record.observe(chance)
    return record


def test_a_drafter_right_one_time_in_five_or_less_gives_up_after_six_tries():
    assert not _record(0, 0, 0, 0, 0).gave_up  # five tries say too little
    assert _record(1, 0, 0, 0, 0, 0).gave_up  # one in six
    assert not _record(1, 0, 1, 0, 0, 0).gave_up  # one in three
    acceptance = Acceptance(4)
    for _ in range(3):
        acceptance.observe_first(0.0)  # the probes of a calibration
        acceptance.update(drafted=2, accepted=0)
    assert acceptance.gave_up  # probes and drafts alike are first tokens tried


def test_a_drafter_given_up_drafts_again_at_one_in_four_and_not_below():
    record = _record(*[0.0] * 40)
    for _ in range(200):  # a rate between the two thresholds keeps it given up
        record.observe(0.22)
    assert record.gave_up
    for _ in range(40):
        record.observe(0.3)
    assert not record.gave_up


def test_three_right_in_a_row_resume_a_drafter_given_up_and_two_misses_give_it_up_again():
    record = _record(*[0.0] * 40, 1, 1)
    assert record.gave_up
    record.observe(1.0)
    assert not record.gave_up
    record.observe(0.0)
    assert not record.gave_up
    record.observe(0.0)
    assert record.gave_up


def test_a_new_answer_weighs_the_last_ones_record_as_three_tries():
    """Right 60% of the time over the last answer, and never on this one: six misses give it up
    in the new answer, where the whole record would take thirty."""
    for anew, gives_up_after in ((True, 6), (False, 30)):
        record = _record(*[1.0, 1.0, 0.0, 1.0, 0.0] * 12)
        if anew:
            record.anew()
        assert record.accepts / record.trials == pytest.approx(0.6, abs=0.05)
        misses = 0
        while not record.gave_up:
            record.observe(0.0)
            misses += 1
        assert misses == pytest.approx(gives_up_after, abs=2)


def test_six_sure_misses_give_up_a_young_record_and_not_a_mature_one():
    """Four right of four (a lucky start), then six misses: given up, where the record alone (0.38)
    would take thirteen; a right probe then resumes it. Right 60% of the time over three dozen tries,
    six misses in a row (once in 240 tries) leave it drafting."""
    young = _record(1, 1, 1, 1, 0, 0, 0, 0, 0)
    assert not young.gave_up
    young.observe(0.0)
    assert young.gave_up
    young.observe(1.0)
    assert not young.gave_up
    mature = _record(*[1.0, 1.0, 0.0, 1.0, 0.0] * 8, *[0.0] * 6)
    assert not mature.gave_up
    assert not _record(1, 1, 1, 1, *[0.3] * 6).gave_up  # a probe's chance above 0 is no sure miss
