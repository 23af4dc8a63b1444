"""A batch's costs by size: what a round of each size took, and what a size not seen would take."""

from __future__ import annotations

import pytest

from specmlx.schedule.costs import CostEstimate
from specmlx.schedule.load_costs import LoadCosts

ALONE = CostEstimate(base_s=0.4, step_s=0.04, jump_s=0.1, width_s=0.03)  # one row's: 5 positions ~ 1.5 plain


def roofline(positions: int) -> float:
    """A CPU's forward: the weights' read up to 8 positions, then compute, 0.05 s a position."""
    return max(0.4, 0.05 * positions)


def test_before_any_batched_round_one_rows_figures_are_all_there_is():
    costs = LoadCosts()
    assert costs.verify_s(5, ALONE) == pytest.approx(ALONE.verify_s(5))
    assert costs.step_s(8, ALONE) == ALONE.step_s


def test_a_size_seen_is_what_it_took_and_sizes_between_lie_on_the_line():
    costs = LoadCosts()
    for n in (16, 48):
        costs.update(n, 16, roofline(n), 0, None, ALONE)
    assert costs.verify_s(16, ALONE) == pytest.approx(0.8)
    assert costs.verify_s(32, ALONE) == pytest.approx(1.6)  # (0.8 + 2.4) / 2


def test_beyond_the_largest_size_seen_the_last_slope_goes_on():
    """One row's shape (5 positions ~ 1.5 plain rounds), scaled through 32 positions, would call
    96 about 2.3 times 32; a CPU that compute binds takes 3 times. From 16 and 32 seen, the slope
    between them reads 96 right."""
    costs = LoadCosts()
    for n in (16, 32):
        costs.update(n, 16, roofline(n), 0, None, ALONE)
    assert costs.verify_s(96, ALONE) == pytest.approx(roofline(96))
    assert roofline(32) * ALONE.verify_s(96) / ALONE.verify_s(32) < 0.8 * roofline(96)


def test_where_reading_the_weights_binds_a_wider_forward_is_not_guessed_proportional():
    """Two sizes that cost the same (the weights' read): a wider one is guessed as one row's shape
    scales, not as positions do; a guess too high would never be tried, and so never corrected."""
    costs = LoadCosts()
    for n in (2, 4):
        costs.update(n, 2, roofline(n), 0, None, ALONE)
    assert costs.verify_s(8, ALONE) == pytest.approx(0.4 * ALONE.verify_s(8) / ALONE.verify_s(4))
    assert costs.verify_s(8, ALONE) < 0.7 * (0.4 * 8 / 4)


def test_one_size_seen_scales_one_rows_shape_through_it():
    costs = LoadCosts()
    costs.update(10, 2, 0.9, 0, None, ALONE)
    assert costs.verify_s(10, ALONE) == pytest.approx(0.9)
    assert costs.verify_s(2, ALONE) == pytest.approx(0.9 * ALONE.verify_s(2) / ALONE.verify_s(10))


def test_drafting_timed_apart_is_the_step_and_the_rest_is_the_forward():
    costs = LoadCosts()
    costs.update(48, 8, 3.0, 4, 1.2, ALONE)  # four steps of 0.3 s, the forward 1.8 s
    assert costs.step_s(8, ALONE) == pytest.approx(0.3)
    assert costs.verify_s(48, ALONE) == pytest.approx(1.8)
    assert costs.step_s(16, ALONE) == pytest.approx(0.3)  # a size not seen: the nearest seen
    costs.update(24, 8, 2.4, 2, None, ALONE)  # untimed: its drafting's share is the step's prediction
    assert costs.verify_s(24, ALONE) == pytest.approx(1.8)


def test_each_size_follows_its_new_rounds_smoothly():
    costs = LoadCosts()
    costs.update(16, 16, 1.0, 0, None, ALONE)
    costs.update(16, 16, 2.0, 0, None, ALONE)
    assert 1.0 < costs.verify_s(16, ALONE) < 2.0
