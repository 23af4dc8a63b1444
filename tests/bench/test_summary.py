"""Summing per-prompt measurements into rows: rates of sums, ratios, predictions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specmlx.bench.calibrate import Calibration
from specmlx.bench.leviathan import alpha_from_mean_accepted, predicted_speedup
from specmlx.bench.runs import Measurement, TimeSplit
from specmlx.bench.summary import summarize


def measure(mode, prompt, tokens, decode_s, rounds, drafted=0, accepted=0, drafter="d", temp=0.0, k=2,
            split=None, finish="length", round_tokens=None, fixed_length=True, histogram=(), plain=0):
    if mode == "target":
        drafter, k = "", 0
    return Measurement(mode=mode, drafter=drafter, temp=temp, num_draft=k, prompt_id=prompt,
                       tokens=tuple(tokens), decode_s=decode_s, rounds=rounds,
                       round_tokens=accepted + rounds if round_tokens is None else round_tokens,
                       drafted=drafted, accepted=accepted, finish_reason=finish, split=split,
                       fixed_length=fixed_length, draft_histogram=histogram, plain_rounds=plain)


SAME = [1, 2, 3, 4]
OTHER = [1, 2, 9]


@pytest.fixture
def rows():
    ms = [
        measure("target", "a", SAME, 4.0, 4), measure("target", "b", OTHER, 2.0, 4, finish="eos"),
        measure("mlx-lm-spec", "a", SAME, 2.0, 2, 4, 2), measure("mlx-lm-spec", "b", OTHER, 2.0, 2, 4, 1),
        measure("specmlx", "a", SAME, 1.0, 2, 4, 2, split=TimeSplit(2, 0.4, 0.5, 0.1)),
        measure("specmlx", "b", [1, 2, 3], 1.0, 1, 2, 2, split=TimeSplit(1, 0.2, 0.6, 0.2)),
        measure("target", "a", SAME, 8.0, 4, temp=0.7),
    ]
    calibration = Calibration(steps=3, context=9, target_step_s=0.1, drafter_step_s={"d": 0.02})
    return {(r.mode, r.temp): r for r in summarize(ms, calibration)}


def test_one_row_per_mode_drafter_temperature_and_k(rows):
    assert list(rows) == [("target", 0.0), ("mlx-lm-spec", 0.0), ("specmlx", 0.0), ("target", 0.7)]
    assert rows[("specmlx", 0.0)].prompts == 2


def test_rates_are_ratios_of_sums(rows):
    target, mlx, ours = rows[("target", 0.0)], rows[("mlx-lm-spec", 0.0)], rows[("specmlx", 0.0)]
    assert target.tokens == 7 and target.tokens_per_s == pytest.approx(7 / 6)
    assert ours.tokens_per_s == pytest.approx(7 / 2)
    assert ours.speedup == pytest.approx((7 / 2) / (7 / 6))
    assert ours.vs_mlx_lm == pytest.approx((7 / 2) / (7 / 4))
    assert mlx.speedup == pytest.approx((7 / 4) / (7 / 6)) and mlx.vs_mlx_lm is None
    assert target.speedup is None and target.mean_accepted == 1.0 and target.acceptance_rate is None
    assert rows[("target", 0.7)].speedup is None


def test_acceptance_and_tokens_per_round(rows):
    ours = rows[("specmlx", 0.0)]
    assert ours.rounds == 3 and ours.drafted == 6 and ours.accepted == 4
    assert ours.mean_accepted == pytest.approx((4 + 3) / 3)
    assert ours.acceptance_rate == pytest.approx(4 / 6)
    assert ours.s_per_round == pytest.approx(2 / 3)
    assert ours.split_per_round == pytest.approx((0.6 / 3, 1.1 / 3, 0.3 / 3))
    assert rows[("mlx-lm-spec", 0.0)].split_per_round is None


def test_greedy_rows_count_prompts_matching_the_target(rows):
    assert rows[("mlx-lm-spec", 0.0)].same_as_target == 2
    assert rows[("specmlx", 0.0)].same_as_target == 1  # prompt b differs
    assert rows[("target", 0.0)].same_as_target is None and rows[("target", 0.7)].same_as_target is None


def test_leviathan_prediction_from_mean_and_calibration(rows):
    ours = rows[("specmlx", 0.0)]
    assert ours.cost_ratio == pytest.approx(0.2)
    assert ours.alpha == pytest.approx(alpha_from_mean_accepted(7 / 3, 2))
    assert ours.predicted_speedup == pytest.approx(predicted_speedup(ours.alpha, 2, 0.2))
    assert ours.predicted_speedup == pytest.approx((7 / 3) / 1.4)
    assert ours.verify_ratio is None  # no verify width calibrated: Leviathan's one step


def test_the_prediction_counts_the_measured_verify_cost():
    ms = [measure("target", "a", SAME, 1.0, 4), measure("specmlx", "a", SAME, 1.0, 2, 4, 2)]
    calibration = Calibration(steps=3, context=9, target_step_s=0.1, drafter_step_s={"d": 0.02},
                              verify_step_s={3: 0.13})
    row = summarize(ms, calibration)[1]
    assert row.verify_ratio == pytest.approx(1.3)
    assert row.predicted_speedup == pytest.approx((4 / 2) / (2 * 0.2 + 1.3))


def test_rows_show_the_lowest_prompt_and_the_chosen_lengths():
    ms = [measure("target", "a", SAME, 4.0, 4), measure("target", "b", SAME, 4.0, 4),
          measure("specmlx", "a", SAME, 2.0, 4, 2, 0, drafter="d+auto", k=None, fixed_length=False,
                  histogram=(3, 1), plain=3),
          measure("specmlx", "b", SAME, 5.0, 4, 0, 0, drafter="d+auto", k=None, fixed_length=False,
                  histogram=(2, 0, 2), plain=2)]
    row = summarize(ms, None)[1]  # the target's prompts make one row
    assert row.num_draft is None and row.speedup == pytest.approx(8 / 7)
    assert (row.min_speedup, row.min_prompt) == (pytest.approx(0.8), "b")
    assert row.mean_chosen == pytest.approx((1 + 2 * 2) / 8) and row.plain_share == pytest.approx(5 / 8)
    assert row.alpha is None and row.predicted_speedup is None


def test_without_calibration_there_is_no_prediction():
    ms = [measure("target", "a", SAME, 1.0, 4), measure("specmlx", "a", SAME, 1.0, 2, 4, 2)]
    row = summarize(ms, None)[1]
    assert row.alpha is not None and row.cost_ratio is None and row.predicted_speedup is None


@pytest.mark.parametrize("name", ["d+adaptive", "d+pmin=0.5"])
def test_a_variable_length_run_gets_no_fixed_length_prediction(name):
    """The measurement says whether k drafts every round; the name is only a label."""
    ms = [measure("target", "a", SAME, 1.0, 4),
          measure("specmlx", "a", SAME, 1.0, 2, 4, 2, drafter=name, fixed_length=False)]
    calibration = Calibration(steps=3, context=9, target_step_s=0.1, drafter_step_s={name: 0.02})
    row = summarize(ms, calibration)[1]
    assert row.speedup == pytest.approx(1.0) and row.alpha is None and row.predicted_speedup is None


# -- host work: what a round costs beyond its forwards ------------------------------


def test_host_work_is_a_round_less_its_calibrated_forwards_in_target_steps():
    calibration = Calibration(steps=1, context=9, target_step_s=0.010, drafter_step_s={"d": 0.009},
                              verify_step_s={3: 0.020}, drafter_forward_s={"d": 0.004})
    target = replace(measure("target", "a", SAME, 0.032, 4), drafted_histogram=(4,), drafter_steps=0)
    # 3 rounds: two drafted 2 (verify of 3 rows), one plain (1 row); 5 drafter forwards in all
    spec = replace(measure("specmlx", "a", SAME, 0.090, 3, 4, 2), drafted_histogram=(1, 0, 2), drafter_steps=5)
    rows = {r.mode: r for r in summarize([target, spec], calibration)}
    forwards = (5 * 0.004 + 2 * 0.020 + 1 * 0.010) / 3
    assert rows["specmlx"].forward_s_per_round == pytest.approx(forwards)
    assert rows["specmlx"].host_s_per_round == pytest.approx(0.030 - forwards)
    assert rows["specmlx"].host_steps == pytest.approx((0.030 - forwards) / 0.008)  # the target's 32 ms / 4
    assert rows["target"].host_steps == pytest.approx((0.008 - 0.010) / 0.008)  # pipelining hides work: < 0


def test_host_work_is_unknown_where_a_width_or_the_rounds_are():
    calibration = Calibration(steps=1, context=9, target_step_s=0.010, drafter_step_s={"d": 0.009})
    lookup = replace(measure("specmlx", "a", SAME, 0.09, 3, 4, 2), drafted_histogram=(1, 0, 2), drafter_steps=0)
    unknown = replace(lookup, drafted_histogram=(), drafter_steps=None)  # a following rank's
    no_widths = replace(lookup, drafted_histogram=())
    for m in (lookup, unknown, no_widths):
        row = summarize([m], calibration)[0]
        assert row.host_s_per_round is None and row.host_steps is None
    # a drafter without a model forward costs the step the engine timed
    assert replace(calibration, verify_step_s={3: 0.02}).drafter_forward("d") == 0.009


# -- the headline: the median of per-prompt speed-ups, beside the total ---------------


def spiky(spike: float) -> list[Measurement]:
    """Five prompts the drafter runs in half the target's time; on e its run takes `spike` times longer."""
    ms = []
    for prompt in "abcde":
        ms.append(measure("target", prompt, SAME, 2.0, 4))
        ms.append(measure("specmlx", prompt, SAME, 1.0 * (spike if prompt == "e" else 1.0), 2, 4, 2))
    return ms


def test_one_slow_prompt_moves_the_total_not_the_median():
    steady, spiked = (summarize(spiky(s), None)[1] for s in (1.0, 10.0))
    assert steady.median_speedup == pytest.approx(2.0) and steady.speedup == pytest.approx(2.0)
    assert spiked.median_speedup == pytest.approx(2.0)  # the headline holds
    assert spiked.speedup == pytest.approx((20 / 14) / (20 / 10))  # 0.71×: the total follows the spike
    assert (spiked.min_speedup, spiked.min_prompt) == (pytest.approx(0.2), "e")
    assert (spiked.max_speedup, spiked.max_prompt) == (pytest.approx(2.0), "a")
    assert [p for p, _ in spiked.prompt_speedups] == list("abcde")


def test_the_median_pairs_prompts_at_the_same_temperature():
    ms = [measure("target", "a", SAME, 2.0, 4), measure("target", "a", SAME, 8.0, 4, temp=0.7),
          measure("specmlx", "a", SAME, 1.0, 2, 4, 2), measure("specmlx", "a", SAME, 2.0, 2, 4, 2, temp=0.7)]
    rows = {(r.mode, r.temp): r for r in summarize(ms, None)}
    assert rows[("specmlx", 0.0)].median_speedup == pytest.approx(2.0)
    assert rows[("specmlx", 0.7)].median_speedup == pytest.approx(4.0)
    assert rows[("target", 0.0)].median_speedup is None and rows[("target", 0.0)].prompt_speedups == ()
