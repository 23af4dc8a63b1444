"""The three modes, each one generation of one prompt, each returning a `Measurement`.

Every mode starts from caches holding the prompt minus its last token, filled
outside the clock; decode time runs from the forward of the last prompt token
to the last generated token. That is what specmlx's `decode_s` measures, and
for mlx-lm it keeps prompt processing (and the first round a speculative run
hides in it) out of the figures. All modes stop at EOS and at `max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import generation_stream, stream_generate
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler

from ..caches.kinds import KVBits
from ..caches.stream import make_cache, prefill
from ..distributed import Lockstep
from ..distributed.follower import follow
from ..peers import ALONE
from ..drafters import Drafter
from ..engine import Engine, GenerationConfig
from ..events import RoundEvent
from ..grammar import Grammar
from ..policy import DraftPolicy
from ..warmup import warm_up_at_load
from ..sampling import SamplingParams
from .plan import MLX_LM_SPEC, SPECMLX, TARGET


@dataclass(frozen=True)
class TimeSplit:
    """Where a profiled specmlx run spent its decode time, over `rounds` rounds."""

    rounds: int
    draft_s: float
    verify_s: float
    other_s: float


@dataclass(frozen=True)
class Measurement:
    """One generation. `rounds` counts target forwards; `round_tokens` the
    tokens those rounds produced (an EOS included), so tokens per round is
    `round_tokens / rounds` in every mode."""

    mode: str
    drafter: str
    temp: float
    num_draft: int | None  # None: chosen each round
    prompt_id: str
    tokens: tuple[int, ...]  # generated, EOS excluded
    decode_s: float
    rounds: int
    round_tokens: int
    drafted: int
    accepted: int
    finish_reason: str  # "eos" or "length"
    split: TimeSplit | None = None  # specmlx with --profile only
    fixed_length: bool = True  # num_draft drafts every round (not automatic, adaptive, p-min or lookup)
    draft_histogram: tuple[int, ...] = ()  # specmlx: rounds by chosen draft length
    plain_rounds: int = 0  # specmlx: rounds that proposed nothing
    prediction_drafted: int | None = None  # specmlx with the prompt's prediction: tokens copied from it
    prediction_accepted: int | None = None  # ... and accepted
    constrained: bool = False  # specmlx under the prompt's schema (+schema)
    # Rounds by tokens proposed (a round's verify scores that many + 1), and drafter forwards in all:
    # what the round's forwards cost, for its host work. Empty and None where unknown.
    drafted_histogram: tuple[int, ...] = ()
    drafter_steps: int | None = None

    @property
    def generated(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class RoundCount:
    rounds: int
    drafted: int
    accepted: int
    tokens: int
    drafted_histogram: tuple[int, ...] = ()  # rounds by tokens drafted


def histogram(values: Sequence[int]) -> tuple[int, ...]:
    """Counts of 0, 1, ... up to the largest of `values`."""
    counts = [0] * (max(values, default=-1) + 1)
    for value in values:
        counts[value] += 1
    return tuple(counts)


def count_rounds(from_draft: Sequence[bool], num_draft: int, max_tokens: int) -> RoundCount:
    """Rounds of mlx-lm's speculative generator, from its tokens' `from_draft` flags.

    A round yields its accepted drafts (True) then the target's token (False),
    so each False ends a round; a trailing run of True is a round cut short by
    `max_tokens` or EOS. mlx-lm drafts min(k, tokens left) per round.
    """
    rounds = accepted = emitted = 0
    widths = []  # each round's drafted tokens
    in_round = False
    for flag in from_draft:
        if not in_round:
            rounds += 1
            widths.append(min(num_draft, max_tokens - emitted))
            in_round = True
        emitted += 1
        if flag:
            accepted += 1
        else:
            in_round = False
    return RoundCount(rounds, sum(widths), accepted, emitted, histogram(widths))


def _mlx_lm_cache(model: nn.Module, prompt: Sequence[int], rewindable: bool, kv: KVBits | None = None) -> list[Any]:
    """A cache for `model` holding the prompt minus its last token: mlx-lm's own,
    or for speculative runs, which trim it after rejections, specmlx's version
    of it (a sliding-window layer's RotatingKVCache cannot be trimmed once full).
    With `kv`, the target's keys and values quantized as specmlx keeps them (`--kv-bits`): the
    baseline then runs the cache the speculative runs do."""
    cache = make_cache(model, kv=kv) if rewindable or kv is not None else make_prompt_cache(model)
    prefill(model, cache, prompt[:-1])
    return cache


def _stream(model: nn.Module, tokenizer: Any, prompt: Sequence[int], temp: float, max_tokens: int,
            seed: int, draft_model: nn.Module | None = None, num_draft: int = 0, kv: KVBits | None = None):
    """Run mlx-lm's stream_generate from prefilled caches: (tokens, from_draft flags, seconds, eos)."""
    speculative = draft_model is not None
    cache = _mlx_lm_cache(model, prompt, rewindable=speculative, kv=kv)
    kwargs: dict[str, Any] = {}
    if speculative:
        # mlx-lm splits one list: the target's layers first, then the drafter's.
        cache = cache + _mlx_lm_cache(draft_model, prompt, rewindable=True)
        kwargs = {"draft_model": draft_model, "num_draft_tokens": num_draft}
    mx.random.seed(seed)  # mlx-lm samples from the global generator
    responses = stream_generate(model, tokenizer, list(prompt[-1:]), max_tokens=max_tokens,
                                sampler=make_sampler(temp), prompt_cache=cache, **kwargs)
    tokens, flags, last = [], [], None
    start = perf_counter()
    for last in responses:
        tokens.append(int(last.token))
        flags.append(bool(last.from_draft))
    decode_s = perf_counter() - start
    responses.close()
    # mlx-lm launches the next step before yielding a token; let that spare
    # step finish outside the clock, not inside the next run's.
    mx.synchronize(generation_stream)
    eos = last is not None and last.finish_reason == "stop"
    return tokens[:-1] if eos else tokens, flags, decode_s, eos


def run_target(model: nn.Module, tokenizer: Any, prompt_id: str, prompt: Sequence[int],
               temp: float, max_tokens: int, seed: int, kv: KVBits | None = None) -> Measurement:
    """The target alone, through mlx-lm's own generator: the baseline (with `kv`, into the same quantized
    cache the speculative runs keep)."""
    tokens, flags, decode_s, eos = _stream(model, tokenizer, prompt, temp, max_tokens, seed, kv=kv)
    return Measurement(
        mode=TARGET, drafter="", temp=temp, num_draft=0, prompt_id=prompt_id, tokens=tuple(tokens),
        decode_s=decode_s, rounds=len(flags), round_tokens=len(flags), drafted=0, accepted=0,
        finish_reason="eos" if eos else "length", drafted_histogram=(len(flags),), drafter_steps=0,
    )


def run_mlx_lm_spec(model: nn.Module, tokenizer: Any, draft_model: nn.Module, drafter: str,
                    prompt_id: str, prompt: Sequence[int], temp: float, num_draft: int,
                    max_tokens: int, seed: int, kv: KVBits | None = None) -> Measurement:
    """mlx-lm's speculative decoding with the same drafter model."""
    tokens, flags, decode_s, eos = _stream(model, tokenizer, prompt, temp, max_tokens, seed,
                                           draft_model, num_draft, kv)
    count = count_rounds(flags, num_draft, max_tokens)
    return Measurement(
        mode=MLX_LM_SPEC, drafter=drafter, temp=temp, num_draft=num_draft, prompt_id=prompt_id,
        tokens=tuple(tokens), decode_s=decode_s, rounds=count.rounds, round_tokens=count.tokens,
        drafted=count.drafted, accepted=count.accepted, finish_reason="eos" if eos else "length",
        drafted_histogram=count.drafted_histogram, drafter_steps=count.drafted,  # a forward per drafted token
    )


def run_specmlx(model: nn.Module, tokenizer: Any, drafter: Drafter, name: str, prompt_id: str,
                prompt: Sequence[int], temp: float, num_draft: int | None, max_tokens: int, seed: int,
                profile: bool = False, policy: DraftPolicy = DraftPolicy(),
                lockstep: Lockstep | None = None, prediction: Sequence[int] = (),
                grammar: Grammar | None = None, kv: KVBits | None = None) -> Measurement:
    """specmlx's engine. A fresh Engine each time: an engine reuses its caches
    when a prompt extends its context, which would skip work the others do,
    and an automatic draft length starts from nothing measured, as in a new
    `specmlx generate`. With a `prediction`, the request's (`drafters.prediction`); with a
    `grammar`, the answer is constrained to it (`grammar.py`). With `kv`, the target's keys and values are
    quantized (`--kv-bits`)."""
    engine = Engine(model, drafter, tokenizer, peers=ALONE if lockstep is None else lockstep, kv=kv)
    warm_up_at_load(model, [drafter], replace(policy, num_draft=num_draft), lockstep is None, kv=kv)  # before the clock
    policy = replace(policy, num_draft=num_draft)
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temp=temp), seed=seed,
                              profile=profile, policy=policy, prediction=tuple(prediction), grammar=grammar)
    rounds: list[RoundEvent] = []  # a following rank sees no rounds
    if lockstep is not None and not lockstep.leads:  # this rank runs rank 0's rounds with it
        tokens, stats = follow(engine, prompt, config, lockstep)
    else:
        generation = engine.generate(list(prompt), config)
        rounds = list(generation)
        tokens = tuple(t.token for event in rounds for t in event.tokens)
        stats = generation.stats
    split = TimeSplit(stats.rounds, stats.draft_s, stats.verify_s, stats.other_s) if profile else None
    return Measurement(
        mode=SPECMLX, drafter=name, temp=temp, num_draft=num_draft, prompt_id=prompt_id,
        tokens=tokens, decode_s=stats.decode_s, rounds=stats.rounds,
        round_tokens=stats.accepted + stats.rounds, drafted=stats.drafted, accepted=stats.accepted,
        finish_reason="eos" if stats.finish_reason == "eos" else "length", split=split,
        fixed_length=policy.fixed_length and not prediction, draft_histogram=stats.draft_histogram, plain_rounds=stats.plain_rounds,
        prediction_drafted=stats.prediction_drafted if prediction else None,
        prediction_accepted=stats.prediction_accepted if prediction else None, constrained=grammar is not None,
        drafted_histogram=histogram([event.drafted for event in rounds]),
        drafter_steps=sum(event.steps for event in rounds) if rounds else None,
    )
