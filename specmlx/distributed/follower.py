"""A rank that does not lead: rank 0's rounds, scored with this rank's shard.

Such a rank never drafts or decides. Each round it learns from rank 0 how
many tokens are proposed, takes them through the lockstep, runs the same
target forward (its collectives pair with rank 0's), and commits rank 0's
verdict, so its caches hold exactly rank 0's tokens.
"""

from __future__ import annotations

from dataclasses import replace
from time import perf_counter
from typing import Sequence

import mlx.core as mx

from ..decoding import Decoding
from ..drafters import Draft
from ..drafters.base import AlwaysMayPropose, HoldsNothing
from ..engine import Engine, GenerationConfig
from ..plan import Plan, Round
from ..round import score
from ..sampling import SamplingParams
from ..schedule import DraftLength
from ..stats import GenerationStats
from .lockstep import Control, Lockstep


class Follower(AlwaysMayPropose, HoldsNothing):
    """The drafter of a rank that does not draft: holds no weights and proposes
    nothing itself; named after rank 0's drafter so that every rank's stats say
    what drafted. Not a `NoDrafter`: code that plans by drafter kind (the
    bench's runs) must plan the same on every rank, and rank 0's drafter does draft."""
    drafts = True

    def __init__(self, name: str) -> None:
        self.name = name

    def fresh(self) -> "Follower":
        return Follower(self.name)

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0) -> Draft:
        return Draft.empty()


def follow(engine: Engine, prompt: Sequence[int], config: GenerationConfig,
           lockstep: Lockstep) -> tuple[tuple[int, ...], GenerationStats]:
    """One generation of rank 0's, on this rank: from `prompt` until rank 0
    says it is over (not before: rank 0 may be cancelled). Tokens are committed
    by the stop rules rank 0 applies, so both ranks' contexts end alike.
    Returns the tokens emitted and this rank's stats."""
    engine.check(prompt, config)  # refused here as on rank 0, before any collective
    # Rank 0 alone proposes and plans: this rank reads no grammar, prediction or schedule of its own.
    # Its state makes rank 0's text, so rank 0's stop strings end the answer at the same token; made
    # before prefill's collectives, as rank 0 makes it, so a tokenizer that refuses it fails both ranks there.
    start = config.policy.start
    state = Decoding(engine, prompt, replace(config, grammar=None, prediction=()),
                     DraftLength(start, start, adaptive=False))
    state.prefill()
    emitted: list[int] = []
    while (control := lockstep.follow()) is not None:
        event = state.commit(Plan(control.size), follow_round(state, control, lockstep))
        emitted += [e.token for e in event.tokens]
    engine.rewind(len(state.tokens))
    return tuple(emitted), state.close()


def follow_round(state: Decoding, control: Control, lockstep: Lockstep) -> Round:
    """Score rank 0's proposal with this rank's shard, then rewind by rank 0's verdict."""
    engine, start = state.engine, perf_counter()
    draft = lockstep.share(mx.zeros((control.size,), dtype=mx.uint32))
    hidden, logits = score(engine, state.tokens, draft)
    # A rank holding part of the head computes its logits whenever rank 0 does; otherwise they stay unevaluated.
    scored = logits if lockstep.vocab else hidden
    accepted, following = lockstep.decide(mx.array(0), mx.array(0), after=scored)
    proposal, accepted, following = engine.sync(state.rec, draft, accepted, following, keep=(scored,))
    engine.rewind(len(state.tokens) + accepted)
    state.rec.verify_s += perf_counter() - start
    return Round(tuple(proposal[:accepted]) + (following,), control.size, control.looked_up)
