"""A rank that does not lead: rank 0's rounds, scored with this rank's shard.

Such a rank never drafts or decides. Each round it learns from rank 0 how
many tokens are proposed, takes them through the lockstep, runs the same
target forward (its collectives pair with rank 0's), and commits rank 0's
verdict, so its caches hold exactly rank 0's tokens.
"""

from __future__ import annotations

from time import perf_counter
from typing import Sequence

import mlx.core as mx

from ..drafters import Draft
from ..engine import Engine, GenerationConfig
from ..generation import emit
from ..plan import Round
from ..round import score
from ..sampling import SamplingParams
from ..stats import GenerationStats, StatsRecorder
from .lockstep import Control, Lockstep


class Follower:
    """The drafter of a rank that does not draft: holds no weights and proposes
    nothing itself; named after rank 0's drafter so that every rank's stats say
    what drafted. Not a `NoDrafter`: code that plans by drafter kind (the
    bench's runs) must plan the same on every rank, and rank 0's drafter does draft."""
    drafts = True
    draft_model, reads_target_cache = None, False

    def __init__(self, name: str) -> None:
        self.name = name

    def fresh(self) -> "Follower":
        return Follower(self.name)

    def prefill(self, tokens: Sequence[int]) -> None:
        pass

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0) -> Draft:
        return Draft.empty()

    def rewind(self, length: int) -> None:
        pass

    def adopt(self, source: "Follower | None", length: int) -> int:
        return length  # it holds nothing


def follow(engine: Engine, prompt: Sequence[int], config: GenerationConfig,
           lockstep: Lockstep) -> tuple[tuple[int, ...], GenerationStats]:
    """One generation of rank 0's, on this rank: from `prompt` until rank 0
    says it is over (not before: rank 0 may be cancelled). Tokens are committed
    by the stop rules rank 0 applies, so both ranks' contexts end alike.
    Returns the tokens emitted and this rank's stats."""
    engine.check(prompt, config)  # refused here as on rank 0, before any collective
    rec = StatsRecorder(drafter=engine.drafter.name, num_draft=config.policy.start)
    # The same text as rank 0's, so that its stop strings end the answer at the same token; made before
    # prefill's collectives, as rank 0 makes it, so a tokenizer that refuses it fails both ranks there.
    text = config.text_stream(engine.tokenizer)
    start = perf_counter()
    engine.prefill(list(prompt))
    rec.prefill_s, rec.prompt_tokens = perf_counter() - start, len(prompt)
    tokens, emitted, finish = engine.context, [], ""
    rec.resume()
    while (control := lockstep.follow()) is not None:
        done = follow_round(engine, tokens, control, lockstep, rec)
        rec.record_round(control.size, done)
        if not finish:
            events, finish = emit(done, tokens, text, config.end_tokens(engine.eos_token_ids),
                                  config.max_tokens - len(emitted))
            emitted += [e.token for e in events]
    rec.generation_tokens = len(emitted)
    engine.rewind(len(tokens))
    return tuple(emitted), rec.freeze(config.profile, finish or "cancelled")


def follow_round(engine: Engine, tokens: list[int], control: Control, lockstep: Lockstep,
                 rec: StatsRecorder) -> Round:
    """Score rank 0's proposal with this rank's shard, then rewind by rank 0's verdict."""
    start = perf_counter()
    draft = lockstep.share(mx.zeros((control.size,), dtype=mx.uint32))
    hidden, logits = score(engine, tokens, draft)
    # A rank holding part of the head computes its logits whenever rank 0 does; otherwise they stay unevaluated.
    scored = logits if lockstep.vocab else hidden
    accepted, following = lockstep.decide(mx.array(0), mx.array(0), after=scored)
    proposal, accepted, following = engine.sync(rec, draft, accepted, following, keep=(scored,))
    engine.rewind(len(tokens) + accepted)
    rec.verify_s += perf_counter() - start
    return Round(tuple(proposal[:accepted]) + (following,), control.size, control.looked_up)
