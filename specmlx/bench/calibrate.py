"""The cost ratio c of Leviathan's formula: one drafter step over one target step.

Timed directly before the runs, on the first prompt, as medians, which resist
a busy neighbour. The target step is a single-token forward, rewound after
each timing. The drafter step is timed inside the engine, with profiling on
and one token drafted per round: drafters that read the target (MTP heads)
only draft after the engine has attached them and fed them hidden states, so
calling `draft` by hand would time them doing nothing. The warm-up steps also
warm up the models for the first run.

Leviathan's formula counts a verify pass as one target step. On a GPU it
nearly is; on a CPU a forward of k+1 tokens can cost noticeably more, so the
calibration also times the target's forward of each verify width in the plan.

What a round costs beyond its forwards (its host work) needs the forwards alone:
a drafter model's single-token forward, synced, and after the runs the target's
forward at every verify width the rounds used (`with_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median
from time import perf_counter
from typing import Callable, Iterable, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.kinds import KVBits
from ..caches.stream import make_cache, prefill
from ..caches.replay import recording
from ..drafters import Drafter
from ..engine import Engine, GenerationConfig
from ..policy import DraftPolicy

WARMUP = 1


@dataclass(frozen=True)
class Calibration:
    steps: int
    context: int  # tokens in the caches while timing
    target_step_s: float
    drafter_step_s: dict[str, float]  # by entrant name
    verify_step_s: dict[int, float] = field(default_factory=dict)  # by tokens in the forward (k + 1)
    # A drafter model's single-token forward alone, synced, by entrant name (drafters with a model)
    drafter_forward_s: dict[str, float] = field(default_factory=dict)

    def cost_ratio(self, drafter: str) -> float | None:
        step = self.drafter_step_s.get(drafter)
        if step is None or self.target_step_s <= 0:
            return None
        return step / self.target_step_s

    def verify_ratio(self, rows: int) -> float | None:
        """A forward of `rows` tokens over a single-token one."""
        step = self.verify_step_s.get(rows)
        return None if step is None or self.target_step_s <= 0 else step / self.target_step_s

    def forward_s(self, rows: int) -> float | None:
        """The target's forward of `rows` tokens: a plain step (1) or a verify pass."""
        return self.target_step_s if rows == 1 else self.verify_step_s.get(rows)

    def drafter_forward(self, drafter: str) -> float | None:
        """One drafter step's forward: its model's, else (prompt lookup, heads) the step the engine timed."""
        return self.drafter_forward_s.get(drafter, self.drafter_step_s.get(drafter))


def time_target_step(model: nn.Module, prompt: Sequence[int], steps: int, rows: int = 1,
                     kv: KVBits | None = None) -> float:
    """Median seconds of one target forward of `rows` tokens after `prompt[:-1]`,
    with the vocabulary projection of every row, as a verify pass computes (into keys and values kept as
    `kv` says)."""
    cache = make_cache(model, name="target", kv=kv)
    prefill(model, cache, prompt[:-1])
    last = mx.array([prompt[-1:] * rows], dtype=mx.uint32)
    times = []
    for i in range(WARMUP + steps):
        start = perf_counter()
        with recording(model, cache):  # as a verify records a recurrent layer's forward, to rewind it
            mx.eval(model(last, cache=cache))
        if i >= WARMUP:
            times.append(perf_counter() - start)
        cache.rewind(len(prompt) - 1)
    return median(times)


def time_drafter_step(target: nn.Module, drafter: Drafter, prompt: Sequence[int], steps: int,
                      kv: KVBits | None = None) -> float:
    """Median seconds for `drafter` to propose one token, measured by the engine.

    Each step is one short generation continuing the last, so the caches (and
    a head's hidden-state history) are warm and only a token or two is new:
    `draft_s / drafted` is then one drafter step plus the profiling sync.
    A drafter that proposed nothing (prompt lookup without a match) costs
    what its empty attempt took.
    """
    engine = Engine(target, drafter, eos_token_ids=(), kv=kv)
    config = GenerationConfig(max_tokens=2, seed=0, profile=True, policy=DraftPolicy(num_draft=1))
    context = list(prompt)
    times = []
    for i in range(WARMUP + steps):
        generation = engine.generate(context, config)
        for _ in generation:
            pass
        stats = generation.stats
        if i >= WARMUP:
            times.append(stats.draft_s / max(stats.drafted, 1))
        context = list(engine.context)
    drafter.rewind(0)
    return median(times)


def calibrate(target: nn.Module, drafters: dict[str, Drafter], prompt: Sequence[int], steps: int,
              verify_rows: Sequence[int] = (), kv: KVBits | None = None) -> Calibration:
    if steps < 1:
        raise ValueError("calibration needs at least one step")
    timed: dict[int, float] = {}  # variants share a drafter: time each drafter once
    for drafter in drafters.values():
        if id(drafter) not in timed:
            timed[id(drafter)] = time_drafter_step(target, drafter, prompt, steps, kv)
    target_step = time_target_step(target, prompt, steps, kv=kv)
    return Calibration(
        steps=steps,
        context=len(prompt) - 1,
        target_step_s=target_step,
        drafter_step_s={name: timed[id(d)] for name, d in drafters.items()},
        verify_step_s={rows: time_target_step(target, prompt, steps, rows, kv) for rows in sorted(set(verify_rows))},
        drafter_forward_s=drafter_forwards(target, target_step, drafters, prompt, steps),
    )


def drafter_forwards(target: nn.Module, target_step: float, drafters: dict[str, Drafter], prompt: Sequence[int],
                     steps: int) -> dict[str, float]:
    """Each drafter model's single-token forward, by entrant name, each model timed once."""
    forwards = {id(target): target_step}  # a drafter that is the target (`self`) costs its step
    for drafter in drafters.values():
        model = drafter.draft_model
        if model is not None and id(model) not in forwards:
            forwards[id(model)] = time_target_step(model, prompt, steps)
    return {name: forwards[id(d.draft_model)] for name, d in drafters.items() if d.draft_model is not None}


def time_forwards(calibration: Calibration, target: nn.Module, drafters: dict[str, Drafter], prompt: Sequence[int],
                  rows: Iterable[int], kv: KVBits | None = None) -> Calibration:
    """`calibration` with its forwards timed again now: the target's at one row and at each of `rows`,
    each drafter model's; the engine-timed drafter steps are kept."""
    steps = calibration.steps
    target_step = time_target_step(target, prompt, steps, kv=kv)
    return replace(calibration, target_step_s=target_step,
                   verify_step_s={r: time_target_step(target, prompt, steps, r, kv) for r in sorted(set(rows) - {1})},
                   drafter_forward_s=drafter_forwards(target, target_step, drafters, prompt, steps))


def pooled(calibrations: Sequence[Calibration]) -> Calibration:
    """One calibration from several taken between the runs: each forward's median over those that timed it,
    so that a busy moment of the machine weighs on the forwards as on the runs around it."""
    first = calibrations[0]
    widths = sorted({r for c in calibrations for r in c.verify_step_s})
    return replace(
        first, target_step_s=median(c.target_step_s for c in calibrations),
        verify_step_s={r: median(c.verify_step_s[r] for c in calibrations if r in c.verify_step_s) for r in widths},
        drafter_forward_s={n: median(c.drafter_forward_s[n] for c in calibrations if n in c.drafter_forward_s)
                           for n in first.drafter_forward_s})


def rows_used(drafted_histograms: Iterable[Sequence[int]]) -> set[int]:
    """The verify widths (tokens drafted + 1) of rounds counted by tokens drafted."""
    return {n + 1 for histogram in drafted_histograms for n, count in enumerate(histogram) if count}


def with_rows(calibration: Calibration, target: nn.Module, prompt: Sequence[int], rows: Iterable[int],
              say: Callable[[str], None] = lambda line: None, kv: KVBits | None = None) -> Calibration:
    """`calibration` with the target's forward timed at each of `rows` it lacks (the widths runs used)."""
    missing = sorted(set(rows) - set(calibration.verify_step_s) - {1})
    if not missing:
        return calibration
    say(f"timing the target's forward of {', '.join(map(str, missing))} tokens (widths the rounds used)")
    timed = {r: time_target_step(target, prompt, calibration.steps, r, kv) for r in missing}
    return replace(calibration, verify_step_s=dict(sorted((calibration.verify_step_s | timed).items())))
