"""Leviathan et al.'s expected tokens per round and speed-up, and alpha from a mean."""

from __future__ import annotations

import pytest

from specmlx.bench.leviathan import alpha_from_mean_accepted, expected_tokens, predicted_speedup


def test_known_value_with_free_drafts():
    # (1 - 0.8^5) / 0.2 = 3.3616
    assert predicted_speedup(0.8, 4, 0.0) == pytest.approx(3.3616)


def test_drafting_cost_divides_the_gain():
    assert predicted_speedup(0.8, 4, 0.25) == pytest.approx(3.3616 / 2.0)
    assert predicted_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)  # nothing accepted: a loss


def test_expected_tokens_at_the_ends():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        expected_tokens(1.5, 2)


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.62, 0.8, 0.97])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_alpha_round_trips_through_the_mean(alpha, k):
    assert alpha_from_mean_accepted(expected_tokens(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_alpha_is_clamped():
    assert alpha_from_mean_accepted(1.0, 4) == 0.0
    assert alpha_from_mean_accepted(0.5, 4) == 0.0
    assert alpha_from_mean_accepted(5.0, 4) == 1.0
    assert alpha_from_mean_accepted(7.0, 4) == 1.0
    assert alpha_from_mean_accepted(2.0, 0) == 0.0


def test_prediction_from_a_measured_mean_is_the_mean_over_the_cost():
    # With alpha solved from m, (1 - a^(k+1)) / (1 - a) is m again.
    m, k, c = 2.7, 4, 0.15
    assert predicted_speedup(alpha_from_mean_accepted(m, k), k, c) == pytest.approx(m / (k * c + 1))
