"""`specmlx serve --distributed`: rank 0 listens; the other ranks run its jobs with it.

Rank 0's server mirrors its slots through `RankMirror` (the serve package's
`Mirror` seam). Before each generation it tells the others which slot the job
runs in, how much of that slot's context its caches keep, the prompt, what
ends the answer (max tokens, stop tokens, stop strings and the text they are
sought in: a chat's answer or a completion's), which slots it
emptied since the last job (to keep its caches under --cache-gb), and which
slot's start it copied into the job's slot (`Engine.adopt`): the rest
follows round by round through the engine's lockstep. A follower's slots
(`follow`) hold exactly the tokens rank 0's do, so every rank prefills the
same positions.
A rank lost, or a job that fails inside its collectives, leaves the ranks out
of step: the server cannot answer again, and stops with one line.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.kinds import KVBits
from ..engine import Engine, GenerationConfig
from ..errors import first_line
from ..log import user_error
from .follower import Follower
from .follower import follow as follow_generation
from .group import lost_link
from .lockstep import Lockstep


def job_message(slot: int, keep: int, prompt: Sequence[int], config: GenerationConfig,
                emptied: Sequence[int] = (), copied: tuple[int, int] | None = None) -> dict:
    """What the other ranks need of a job: where, from what, what ends it,
    which slots rank 0 emptied to keep its caches under --cache-gb, and the
    (slot, length) whose context's start rank 0 copied into the job's slot, if any."""
    return {"slot": slot, "keep": keep, "prompt": list(prompt), "max_tokens": config.max_tokens,
            "stop": list(config.stop), "stop_tokens": sorted(config.stop_tokens),
            "continues_text": config.continues_text, "emptied": list(emptied),
            "copied": None if copied is None else list(copied)}


def job_config(job: dict) -> GenerationConfig:
    """What ends rank 0's answer, on this rank: its stop rules as rank 0 applies them."""
    return GenerationConfig(max_tokens=job["max_tokens"], stop=tuple(job["stop"]),
                            stop_tokens=frozenset(job["stop_tokens"]), continues_text=job["continues_text"])


class RankMirror:
    """Rank 0's slots and jobs, mirrored on the other ranks: the server's `Mirror` on a sharded target."""

    one_at_a_time = True  # the other ranks follow one generation (`follow`)

    def __init__(self, lockstep: Lockstep) -> None:
        self.lockstep = lockstep
        self.peers = lockstep  # every slot's engine keeps step with the other ranks
        self._emptied: set[int] = set()  # slots emptied since the last job was published
        self._copied: dict[int, tuple[int, int]] = {}  # slot -> (source, length) copied, not yet published

    def emptied(self, slot: int) -> None:
        self._emptied.add(slot)
        self._copied.pop(slot, None)  # what was copied into it is gone with it

    def copied(self, source: int, slot: int, length: int) -> None:
        self._copied[slot] = (source, length)

    def begin(self, slot: int, keep: int, prompt: Sequence[int], config: GenerationConfig) -> None:
        """The other ranks run the job with us, in the same slot, from the same prefix."""
        emptied, self._emptied = sorted(self._emptied), set()
        # only this slot's copy: one into a slot whose job failed before it began waits for that slot's next job
        copied = self._copied.pop(slot, None)
        self.lockstep.publish(job_message(slot, keep, prompt, config, emptied, copied))

    def lost(self, err: BaseException, begun: bool) -> str | None:
        """A lost rank, or a job failed somewhere in its collectives: the ranks cannot keep step again."""
        rank = self.lockstep.group.name()
        if lost_link(err):  # a lost rank says all in one line
            return f"{rank}: lost the other ranks ({first_line(err)})"
        if begun:  # anything else leaves its traceback in the log file
            return f"{rank}: {user_error(err, 'a generation failed')}, and the ranks are out of step"
        return None

    def watch(self, lose: Callable[[str], None]) -> None:
        """A rank's process that ends is seen at once (the liveness connection), whatever the MLX thread waits in."""
        self.lockstep.group.when_lost(lambda err: lose(self.lost(err, begun=True)))

    def end(self) -> None:
        self.lockstep.publish(None)  # the other ranks end with us


def follow(lockstep: Lockstep, target: nn.Module, tokenizer: Any, drafter: str, kv: KVBits | None = None) -> int:
    """Run rank 0's jobs until it ends (exit 0) or is lost (SpecmlxError, via the caller's guard).
    Slots are made as rank 0 first uses them: their count is rank 0's to choose; their caches keep this
    rank's heads' keys and values as rank 0's keep its own (`kv`, `--kv-bits`)."""
    engines: dict[int, Engine] = {}
    while (job := lockstep.subscribe()) is not None:
        slot = job["slot"]
        for gone in {*job["emptied"], *([slot] if job["keep"] == 0 else [])}:  # as rank 0's: empty
            engines.pop(gone, None)
        if job["emptied"]:
            mx.clear_cache()
        if slot not in engines:
            engines[slot] = Engine(target, Follower(drafter), tokenizer, peers=lockstep, kv=kv)
        if job["copied"] is not None:  # as rank 0's: the start of another slot's context, copied
            source, length = job["copied"]
            engines[slot].adopt(engines[source], length)
        engines[slot].forget(job["keep"])
        follow_generation(engines[slot], job["prompt"], job_config(job), lockstep)
    return 0
