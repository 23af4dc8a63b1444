"""`specmlx serve --distributed`: rank 0 listens; the other ranks run its jobs with it.

Before each generation, rank 0 tells the others which slot it runs in, how
much of that slot's context its caches keep, the prompt, and what ends the
answer (max tokens, stop strings): the rest follows round by round through
the engine's lockstep. A follower's slots hold exactly the tokens rank 0's
do, so every rank prefills the same positions.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..distributed import Follower, Lockstep
from ..distributed.follower import follow as follow_generation
from ..engine import Engine, GenerationConfig


def job_message(slot: int, keep: int, prompt: Sequence[int], config: GenerationConfig,
                emptied: Sequence[int] = ()) -> dict:
    """What the other ranks need of a job: where, from what, what ends it, and
    which slots rank 0 emptied to keep its caches under --cache-gb."""
    return {"slot": slot, "keep": keep, "prompt": list(prompt), "max_tokens": config.max_tokens,
            "stop": list(config.stop), "emptied": list(emptied)}


def follow(lockstep: Lockstep, target: nn.Module, tokenizer: Any, drafter: str) -> int:
    """Run rank 0's jobs until it ends (exit 0) or is lost (SpecmlxError, via the caller's guard).
    Slots are made as rank 0 first uses them: their count is rank 0's to choose."""
    engines: dict[int, Engine] = {}
    while (job := lockstep.subscribe()) is not None:
        slot = job["slot"]
        for gone in {*job["emptied"], *([slot] if job["keep"] == 0 else [])}:  # as rank 0's: empty
            engines.pop(gone, None)
        if job["emptied"]:
            mx.clear_cache()
        if slot not in engines:
            engines[slot] = Engine(target, Follower(drafter), tokenizer, peers=lockstep)
        engines[slot].forget(job["keep"])
        config = GenerationConfig(max_tokens=job["max_tokens"], stop=tuple(job["stop"]))
        follow_generation(engines[slot], job["prompt"], config, lockstep)
    return 0
