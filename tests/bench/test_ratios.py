"""Per-prompt speed-ups over the target alone: the pairing, the median and the spread."""

from __future__ import annotations

import pytest

from specmlx.bench.ratios import prompt_ratios
from specmlx.bench.runs import Measurement

TOKENS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)  # 10 tokens a run


def run(mode: str, prompt: str, decode_s: float, tokens=TOKENS) -> Measurement:
    return Measurement(mode=mode, drafter="" if mode == "target" else "d", temp=0.0, num_draft=2,
                       prompt_id=prompt, tokens=tuple(tokens), decode_s=decode_s, rounds=1, round_tokens=1,
                       drafted=0, accepted=0, finish_reason="length")


def targets(seconds: dict[str, float]) -> dict[str, Measurement]:
    return {prompt: run("target", prompt, s) for prompt, s in seconds.items()}


def test_each_ratio_pairs_a_run_with_the_target_on_the_same_prompt():
    target = targets({"a": 10.0, "b": 2.0})  # 1 and 5 tok/s
    group = [run("specmlx", "b", 1.0), run("specmlx", "a", 4.0)]  # 10 and 2.5 tok/s
    assert prompt_ratios(group, target).by_prompt == (("b", pytest.approx(2.0)), ("a", pytest.approx(2.5)))


def test_median_and_spread_name_the_worst_and_best_prompts():
    target = targets({p: 1.0 for p in "abcd"})
    ratios = prompt_ratios([run("specmlx", p, s) for p, s in zip("abcd", (0.5, 1.0, 2.0, 0.8))], target)
    assert ratios.median == pytest.approx((1.0 + 1.25) / 2)  # even count: the middle two's mean
    assert ratios.lowest == (pytest.approx(0.5), "c") and ratios.highest == (pytest.approx(2.0), "a")


def test_prompts_without_a_target_run_or_its_speed_are_left_out():
    target = targets({"a": 1.0, "b": 0.0})
    ratios = prompt_ratios([run("specmlx", p, 1.0) for p in "abc"], target)
    assert [p for p, _ in ratios.by_prompt] == ["a"]
    assert prompt_ratios([run("specmlx", "c", 1.0)], target) is None
