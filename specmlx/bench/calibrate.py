"""The cost ratio c of Leviathan's formula: one drafter step over one target step.

Timed directly before the runs, on the first prompt: single-token target
forwards, and single-token drafts through the `Drafter` protocol (so any
drafter kind is timed the same way). Each timed step is rewound, so every one
sees the same context. The median resists a busy neighbour; the warm-up step
also warms up the models for the first run.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from time import perf_counter
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from ..cache import make_cache, prefill, rewind
from ..drafters import Drafter
from ..sampling import SamplingParams

WARMUP = 1


@dataclass(frozen=True)
class Calibration:
    steps: int
    context: int  # tokens in the caches while timing
    target_step_s: float
    drafter_step_s: dict[str, float]  # by entrant name

    def cost_ratio(self, drafter: str) -> float | None:
        step = self.drafter_step_s.get(drafter)
        if step is None or self.target_step_s <= 0:
            return None
        return step / self.target_step_s


def time_target_step(model: nn.Module, prompt: Sequence[int], steps: int) -> float:
    """Median seconds of one single-token target forward after `prompt[:-1]`."""
    cache = make_cache(model, name="target")
    prefill(model, cache, prompt[:-1])
    last = mx.array([prompt[-1:]], dtype=mx.uint32)
    times = []
    for i in range(WARMUP + steps):
        start = perf_counter()
        mx.eval(model(last, cache=cache)[:, -1])
        if i >= WARMUP:
            times.append(perf_counter() - start)
        rewind(cache, len(prompt) - 1)
    return median(times)


def time_drafter_step(drafter: Drafter, prompt: Sequence[int], steps: int) -> float:
    """Median seconds for `drafter` to propose one token after `prompt`."""
    drafter.rewind(0)
    drafter.prefill(prompt)
    greedy, key = SamplingParams(), mx.random.key(0)
    times = []
    for i in range(WARMUP + steps):
        start = perf_counter()
        mx.eval(drafter.draft(prompt, 1, greedy, key).tokens)
        if i >= WARMUP:
            times.append(perf_counter() - start)
        drafter.rewind(len(prompt) - 1)
    drafter.rewind(0)
    return median(times)


def calibrate(target: nn.Module, drafters: dict[str, Drafter], prompt: Sequence[int], steps: int) -> Calibration:
    if steps < 1:
        raise ValueError("calibration needs at least one step")
    return Calibration(
        steps=steps,
        context=len(prompt) - 1,
        target_step_s=time_target_step(target, prompt, steps),
        drafter_step_s={name: time_drafter_step(d, prompt, steps) for name, d in drafters.items()},
    )
