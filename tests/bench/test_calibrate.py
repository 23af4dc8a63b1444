"""Timing one target step and one drafter step for the cost ratio c."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specmlx.bench.calibrate import Calibration, calibrate, pooled, rows_used, time_forwards, with_rows
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter


def test_steps_are_timed_and_the_drafter_left_empty(tokenizer, target, noisy_drafter, random_drafter, vocab):
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    drafters = {"noisy": ModelDrafter(noisy_drafter, vocab, "noisy"),
                "small": ModelDrafter(random_drafter, vocab, "small"),
                "ngram": PromptLookupDrafter(), "none": NoDrafter()}
    result = calibrate(target, drafters, prompt, steps=3)
    assert result.steps == 3 and result.context == len(prompt) - 1
    assert result.target_step_s > 0
    assert set(result.drafter_step_s) == set(drafters)
    assert all(s > 0 for s in result.drafter_step_s.values())
    # a model drafter starts the runs with an empty cache, as a fresh Engine expects
    assert drafters["noisy"].cache.length == 0
    # prompt lookup costs far less than a forward of a model
    assert result.cost_ratio("ngram") < result.cost_ratio("noisy")


def test_verify_widths_are_timed(tokenizer, target):
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    result = calibrate(target, {}, prompt, steps=2, verify_rows=[5, 2, 5])
    assert list(result.verify_step_s) == [2, 5] and all(s > 0 for s in result.verify_step_s.values())
    assert result.verify_ratio(5) == result.verify_step_s[5] / result.target_step_s


def test_cost_ratio():
    calibration = Calibration(steps=1, context=10, target_step_s=0.2, drafter_step_s={"d": 0.05},
                              verify_step_s={5: 0.3})
    assert calibration.cost_ratio("d") == pytest.approx(0.25)
    assert calibration.cost_ratio("unknown") is None
    assert calibration.verify_ratio(5) == pytest.approx(1.5) and calibration.verify_ratio(9) is None


def test_at_least_one_step(target):
    with pytest.raises(ValueError):
        calibrate(target, {}, [1, 2, 3], steps=0)


def test_variants_of_one_drafter_are_timed_once(tokenizer, target, noisy_drafter, vocab):
    """`d` and `d+auto` share their weights: one timing, so one cost ratio."""
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    shared = ModelDrafter(noisy_drafter, vocab, "noisy")
    result = calibrate(target, {"d": shared, "d+auto": shared}, prompt, steps=2)
    assert result.drafter_step_s["d"] == result.drafter_step_s["d+auto"]


def test_the_widths_runs_used_are_timed_after_them_once(tokenizer, target, vocab):
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    result = calibrate(target, {"self": ModelDrafter(target, vocab, "self")}, prompt, steps=1, verify_rows=[3])
    assert result.drafter_forward_s == {"self": result.target_step_s}  # the target drafting costs its step
    wider = with_rows(result, target, prompt, [1, 2, 3, 5])
    assert list(wider.verify_step_s) == [2, 3, 5] and wider.verify_step_s[3] == result.verify_step_s[3]
    assert wider.forward_s(1) == result.target_step_s and wider.forward_s(4) is None
    assert with_rows(wider, target, prompt, [2, 5]) is wider


def test_forwards_timed_between_the_runs_are_pooled_by_median():
    """A busy moment of the machine weighs on one timing of the forwards, not on the figure."""
    first = Calibration(steps=1, context=9, target_step_s=0.010, drafter_step_s={"d": 0.02},
                        verify_step_s={3: 0.02}, drafter_forward_s={"d": 0.004})
    busy = replace(first, target_step_s=0.050, verify_step_s={3: 0.09, 5: 0.1}, drafter_forward_s={"d": 0.04})
    calm = replace(first, target_step_s=0.012, verify_step_s={3: 0.03, 5: 0.04}, drafter_forward_s={"d": 0.005})
    result = pooled([first, busy, calm])
    assert result.target_step_s == 0.012 and result.drafter_forward_s == {"d": 0.005}
    assert result.verify_step_s == {3: 0.03, 5: pytest.approx(0.07)} and result.drafter_step_s == {"d": 0.02}
    assert rows_used([(3, 0, 1), (0, 0, 0, 0, 2)]) == {1, 3, 5}


def test_forwards_are_timed_again_at_the_widths_used(tokenizer, target, noisy_drafter, vocab):
    prompt = tokenizer.encode("def add(a, b):\n    return a + b\n")
    drafters = {"d": ModelDrafter(noisy_drafter, vocab, "d"), "n": PromptLookupDrafter()}
    result = calibrate(target, drafters, prompt, steps=1)
    again = time_forwards(result, target, drafters, prompt, {1, 4})
    assert list(again.verify_step_s) == [4] and set(again.drafter_forward_s) == {"d"}
    assert again.drafter_step_s == result.drafter_step_s  # the engine-timed steps are kept
