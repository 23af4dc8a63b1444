"""A generation: rounds until a stop rule, streamed as round events.

The loop asks the schedule for each round's plan, runs the round
(`round.py`), emits its tokens through the text stream until end of
sequence, a stop string or `max_tokens`, and yields one `RoundEvent`. Time
the consumer holds an event is not the generation's: the decode clock and
the schedule's round times leave it out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Collection, Iterator

import mlx.core as mx

from .drafters.prediction import Prediction
from .errors import SpecmlxError
from .events import RoundEvent, TokenEvent
from .peers import ALONE
from .plan import Plan, Round
from .policy import DraftPolicy
from .grammar import Grammar
from .round import Guides, run_round
from .sampling import SamplingParams
from .schedule import AutoDraft, DraftLength, Schedule
from .stats import GenerationStats, StatsRecorder
from .text import TextStream

if TYPE_CHECKING:  # the engine starts generations; a generation only reads the engine's parts
    from .engine import Engine

RANDOM_SEED = -1  # as llama.cpp's: a fresh random seed each generation, as no seed at all
MAX_SEED = 2**64 - 1  # MLX's random keys take an unsigned 64-bit seed


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: how many tokens, how to sample, and how rounds draft
    (`policy`). `stop_tokens` end it as the model's end of sequence does (committed,
    not emitted): a fill-in-the-middle answer's own end tokens. `profile` adds one host
    sync per round so that drafting and verification are timed apart; leave it off to
    measure speed. `grammar`: what the answer must match (`grammar.py`), the target's
    distribution restricted to it. `prediction`: the tokens the caller expects the output to be
    (OpenAI's predicted outputs), copied as drafts where the output agrees with them
    (`drafters.prediction`). `continues_text`: the answer continues the prompt's text (a
    completion, not a chat's answer), so its text keeps its leading space (`text.TextStream`)."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_tokens: frozenset[int] = frozenset()
    profile: bool = False
    prediction: tuple[int, ...] = ()
    grammar: Grammar | None = None
    continues_text: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise SpecmlxError(f"max tokens must be >= 1, got {self.max_tokens}")
        if self.seed is not None and not RANDOM_SEED <= self.seed <= MAX_SEED:
            raise SpecmlxError(f"the seed must be {RANDOM_SEED} (a random one) or 0..{MAX_SEED}, got {self.seed}")
        object.__setattr__(self, "stop_tokens", frozenset(self.stop_tokens))  # any collection of ids
        object.__setattr__(self, "prediction", tuple(self.prediction))
        if any(not isinstance(t, int) or t < 0 for t in self.prediction):
            raise SpecmlxError("a prediction must be token ids, whole numbers >= 0")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_tokens):
            raise SpecmlxError(f"stop tokens must be token ids, whole numbers >= 0, got {set(self.stop_tokens)}")

    def follow_prediction(self, prompt_tokens: int) -> Prediction | None:
        """A generation's own place in `prediction`, after a prompt of this length (None without one)."""
        return Prediction(self.prediction, prompt_tokens) if self.prediction else None

    def end_tokens(self, eos: frozenset[int]) -> frozenset[int]:
        """What ends the answer: the model's end of sequence `eos`, and this request's stop tokens."""
        return eos | self.stop_tokens

    def text_stream(self, tokenizer: Any) -> TextStream:
        """The answer's text, as this request's stop strings and `continues_text` want it."""
        return TextStream(tokenizer, self.stop, self.continues_text)

    def key(self) -> mx.array:
        """The generation's random key: from the seed, or a fresh random one."""
        seed = self.seed if self.seed not in (None, RANDOM_SEED) else random.SystemRandom().getrandbits(63)
        return mx.random.key(seed)


class Generation:
    """An iterator of `RoundEvent`s.

    Once iteration ends (or after `close()`), `stats` holds the
    `GenerationStats` and `tail` any text the detokenizer held back until the
    end; the full text is the events' text followed by `tail`.
    """

    def __init__(self, engine: "Engine", prompt: list[int], config: GenerationConfig) -> None:
        self.stats: GenerationStats | None = None
        self.tail = ""
        self._rounds = _decode(engine, prompt, config, self)

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> RoundEvent:
        return next(self._rounds)

    def token_events(self) -> Iterator[TokenEvent]:
        """The rounds' tokens one by one, for consumers that read tokens, not rounds.
        A consumer that stops early ends the generation (its stats, its caches)."""
        try:
            for event in self:
                yield from event.tokens
        finally:
            self.close()

    def close(self) -> None:
        """Stop early; the caches keep what was emitted."""
        self._rounds.close()


def schedule_for(engine: "Engine", policy: DraftPolicy) -> Schedule:
    """This generation's draft lengths: fixed or adaptive anew, or the drafter's automatic one."""
    if not engine.drafter.drafts:  # nothing to draft, but the context can still be looked up
        return DraftLength(policy.start if policy.lookup else 0, policy.start, adaptive=False)
    if not policy.auto:
        return DraftLength(policy.start, max(policy.max_draft, policy.start), policy.adaptive)
    auto = engine.auto_draft(policy=policy)
    auto.begin(policy.max_draft)
    return auto


def overlaps(engine: "Engine", config: GenerationConfig, schedule: Schedule, plan: Plan, budget: int) -> bool:
    """Whether a plain round starts the next one's forward (`round.start_ahead`): when that one
    likely drafts nothing too (a wrong guess costs a drafting round one more forward) and this one
    leaves it a token. One process only, and not when profiling: its split times each round's
    forward in that round."""
    return (engine.peers is ALONE and not config.profile and plan.num_draft == 0 and budget > 1
            and schedule.likely_plain(budget - 2))


def emit(done: Round, tokens: list[int], text: TextStream, eos: Collection[int],
         left: int) -> tuple[tuple[TokenEvent, ...], str]:
    """Commit `done`'s tokens to `tokens` and stream their text, up to a stop
    rule: end of sequence (committed, not emitted), a stop string, or `left`
    tokens. Returns the emitted tokens and the finish reason ("" for none)."""
    events: list[TokenEvent] = []
    for i, token in enumerate(done.tokens):
        tokens.append(token)
        if token in eos:
            return tuple(events), "eos"
        events.append(TokenEvent(token, text.add(token), done.source(i)))
        if text.stopped:
            return tuple(events), "stop"
        if len(events) >= left:
            return tuple(events), "length"
    return tuple(events), ""


def _decode(engine: "Engine", prompt: list[int], config: GenerationConfig, out: Generation) -> Iterator[RoundEvent]:
    policy = config.policy
    schedule = schedule_for(engine, policy)
    # A fixed length says what it drafts (0 for no drafter and no lookup, as `schedule_for` chose).
    planned = schedule.start if isinstance(schedule, DraftLength) else policy.start
    rec = StatsRecorder(drafter=engine.drafter.name, num_draft=planned, auto=isinstance(schedule, AutoDraft),
                        prediction_tokens=len(config.prediction))
    key, text = config.key(), config.text_stream(engine.tokenizer)
    start = perf_counter()
    engine.prefill(prompt)
    rec.prefill_s, rec.prompt_tokens = perf_counter() - start, len(prompt)
    tokens, finish = engine.context, ""  # tokens grows as rounds commit
    ahead = None  # the next position's forward, started by a plain round (`run_round`)
    guides = Guides(config.follow_prediction(len(prompt)), engine.constrain(config.grammar))
    rec.resume()
    try:
        while not finish:
            began = perf_counter()
            budget = config.max_tokens - rec.generation_tokens
            key, round_key = mx.random.split(key)
            plan = schedule.plan(budget - 1)
            done, ahead = run_round(engine, tokens, plan, budget - 1, config, round_key, rec, guides, ahead,
                                    overlaps(engine, config, schedule, plan, budget))
            emitted, finish = emit(done, tokens, text, config.end_tokens(engine.eos_token_ids), budget)
            rec.record_round(plan.num_draft, done, len(emitted))
            running = ahead is not None  # the next forward runs meanwhile: the consumer's time is the round's
            if not running:
                rec.pause()
            handed = perf_counter()
            yield RoundEvent(emitted, plan.num_draft, done.drafted, done.accepted, done.looked_up, done.probe)
            away = 0.0 if running else perf_counter() - handed
            if not running:
                rec.resume()
            schedule.update(done, perf_counter() - began - away)
    finally:
        engine.peers.stop()  # rank 0's word that the generation is over (other ranks run `follow`, not this)
        engine.rewind(len(tokens))  # whatever stopped us, the caches keep only committed tokens
        out.tail = text.finish()
        out.stats = rec.freeze(config.profile, finish or "cancelled", schedule.estimate(), text.matched)
