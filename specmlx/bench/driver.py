"""Run the plan for every prompt in turn, with a progress bar on stderr."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tqdm import tqdm

from ..caches.kinds import KVBits
from ..grammar import Grammar
from ..prompting import EncodedPrompt
from .lineup import Lineup
from .plan import MLX_LM_SPEC, SPECMLX, TARGET, RunSpec
from .runs import Measurement, run_mlx_lm_spec, run_specmlx, run_target


@dataclass(frozen=True)
class RunSettings:
    max_tokens: int
    seed: int  # prompt i samples with seed + i in every mode
    profile: bool  # a second, profiled specmlx pass for the draft/verify split
    warmup_tokens: int = 0  # untimed runs of the whole plan first; 0 skips them
    kv: KVBits | None = None  # the target's keys and values quantized in every mode (`--kv-bits`)


def run_one(lineup: Lineup, prompt: EncodedPrompt, spec: RunSpec, settings: RunSettings, seed: int) -> Measurement:
    target = lineup.target
    common = dict(prompt_id=prompt.id, prompt=prompt.tokens, temp=spec.temp,
                  max_tokens=settings.max_tokens, seed=seed, kv=settings.kv)
    if spec.mode == TARGET:
        return run_target(target.model, target.tokenizer, **common)
    entrant = next(e for e in lineup.entrants if e.name == spec.drafter)
    if spec.mode == MLX_LM_SPEC:
        return run_mlx_lm_spec(target.model, target.tokenizer, entrant.model, entrant.name,
                               num_draft=spec.num_draft, **common)
    if spec.mode == SPECMLX:
        prediction = prompt.prediction if entrant.predicted else ()
        grammar = Grammar.json_schema(json.loads(prompt.schema)) if entrant.constrained and prompt.schema else None
        measured = run_specmlx(target.model, target.tokenizer, entrant.drafter, entrant.name,
                               num_draft=spec.num_draft, policy=entrant.policy, lockstep=lineup.lockstep,
                               prediction=prediction, grammar=grammar, **common)
        if settings.profile:
            # Profiling adds a sync per round: its own pass, so tokens/s stays clean.
            profiled = run_specmlx(target.model, target.tokenizer, entrant.drafter, entrant.name,
                                   num_draft=spec.num_draft, profile=True, policy=entrant.policy,
                                   lockstep=lineup.lockstep, prediction=prediction, grammar=grammar, **common)
            measured = replace(measured, split=profiled.split)
        return measured
    raise ValueError(f"unknown mode {spec.mode!r}")


def run_all(lineup: Lineup, prompts: Sequence[EncodedPrompt], plan: Sequence[RunSpec],
            settings: RunSettings,
            prompt_done: Callable[[list[Measurement]], None] | None = None,
            show: bool = True) -> list[Measurement]:
    """Every run of `plan` for the first prompt, then for the second, and so on.
    `prompt_done` gets the measurements so far each time a prompt is finished.
    `show`: draw the progress bar (rank 0 of a sharded target alone draws it).

    First, unless `warmup_tokens` is 0, the plan runs once on the first prompt
    with that few tokens, discarded: the first use of a mode pays one-off costs
    (mlx-lm compiles its sampler per temperature, buffers get allocated) that
    would otherwise land on whichever run comes first.
    """
    # (label, prompt, settings, seed, kept?) for each turn through the plan
    turns = [(p.id, p, settings, settings.seed + i, True) for i, p in enumerate(prompts)]
    if settings.warmup_tokens > 0:
        warmup = replace(settings, max_tokens=settings.warmup_tokens, profile=False)
        turns.insert(0, ("warm-up", prompts[0], warmup, settings.seed, False))
    measurements = []
    with tqdm(total=len(turns) * len(plan), desc="bench", unit="run", file=sys.stderr,
              dynamic_ncols=True, disable=not show) as bar:
        for name, prompt, turn_settings, seed, kept in turns:
            for spec in plan:
                bar.set_postfix_str(f"{name} {spec.label}", refresh=True)
                measured = run_one(lineup, prompt, spec, turn_settings, seed)
                if kept:
                    measurements.append(measured)
                bar.update()
            if kept and prompt_done is not None:
                prompt_done(list(measurements))
    return measurements
