"""One generation's state between rounds, whoever runs its rounds.

The single loop (`generation.py`), the batched round (`batch/`) and a rank
that follows rank 0 (`distributed/follower.py`) all keep a request as a
`Decoding`. Its contract: it is made before prefill (schedule, stats recorder,
key, text stream, its place in a prediction and in a grammar), then
`prefill`s; each round it `plan`s, gives the round its committed `tokens`,
`room`, a key (`next_key`, split off as a generation alone splits it), its
prediction, grammar and recorder, and `commit`s the `Round` back into one `RoundEvent` under
the stop rules (end of sequence, committed not emitted; a stop string;
`max_tokens`); `learn` shows its schedule the round's time; `close` freezes
its stats once. It runs no forward and rewinds no cache: its rounds and their
caller do. Whoever drives it, the same rounds give the same events and stats.
"""

from __future__ import annotations

from time import perf_counter
from typing import Collection, Sequence

import mlx.core as mx

from .config import GenerationConfig
from .drafters import drafts_blocks
from .events import RoundEvent, TokenEvent
from .parts import GenerationParts
from .plan import Plan, Round
from .policy import DraftPolicy
from .schedule import AutoDraft, DraftLength, Schedule
from .stats import GenerationStats, StatsRecorder
from .text import TextStream


class Decoding:
    """A generation's state: its committed `tokens`, config, key, prediction, grammar, schedule, text and stats.
    `stats` and `tail` (text the detokenizer held back until the end) are set once it `close`s."""

    def __init__(self, engine: GenerationParts, prompt: Sequence[int], config: GenerationConfig,
                 schedule: Schedule | None = None) -> None:
        """`schedule`: how its rounds draft; by default this engine's for the config's policy (`schedule_for`)."""
        self.engine, self.prompt, self.config = engine, list(prompt), config
        self.schedule = schedule_for(engine, config.policy) if schedule is None else schedule
        # A fixed length says what it drafts (0 for no drafter and no lookup, as `schedule_for` chose).
        planned = config.policy.start if self.schedule.planned is None else self.schedule.planned
        self.rec = StatsRecorder(drafter=engine.drafter.name, num_draft=planned, auto=self.auto is not None,
                                 prediction_tokens=len(config.prediction))
        self.key, self.text = config.key(), config.text_stream(engine.tokenizer)
        self.tokens: list[int] = []  # the committed sequence, the engine's context once prefilled
        self.finish = ""
        self.unproposed = 0  # rounds in a row that proposed nothing: the next likely proposes nothing too
        self.prediction = config.follow_prediction(len(self.prompt))  # its place in its prediction, if any
        self.constraint = engine.constrain(config.grammar)  # its place in its grammar, if it has one
        self.eos = config.end_tokens(engine.eos_token_ids)  # what ends it, made once rather than every round
        self.stats: GenerationStats | None = None
        self.tail = ""

    @property
    def auto(self) -> AutoDraft | None:
        """Its schedule, when that is the automatic length."""
        return self.schedule.auto

    @property
    def room(self) -> int:
        """Drafts this round may propose: one token of the budget is the target's own."""
        return self.config.max_tokens - self.rec.generation_tokens - 1

    def prefill(self, drafter: bool = True) -> None:
        """Bring the caches to hold the prompt but its last token (reusing what they share) and
        start the decode clock; without `drafter`, the target's only (`Engine.prefill`)."""
        start = perf_counter()
        self.engine.prefill(list(self.prompt), drafter, self.config.images)  # the engine keeps and grows the list
        self.rec.prefill_s, self.rec.prompt_tokens = perf_counter() - start, len(self.prompt)
        self.tokens = self.engine.context
        self.rec.resume()

    def plan(self) -> Plan:
        """The next round, as its own schedule plans it."""
        return self.schedule.plan(self.room)

    def next_key(self) -> mx.array:
        """This round's key, split off the generation's."""
        self.key, round_key = mx.random.split(self.key)
        return round_key

    def commit(self, plan: Plan, done: Round) -> RoundEvent:
        """Commit the tokens of `done`, the round run as `plan` said, up to a stop rule, and count it.
        A round after the finish (a following rank's, were rank 0 to run one) is counted alone."""
        emitted: tuple[TokenEvent, ...] = ()
        if not self.finish:
            emitted, self.finish = emit(done, self.tokens, self.text, self.eos, self.room + 1)
        self.rec.record_round(plan.num_draft, done, len(emitted))
        self.unproposed = 0 if done.drafted else self.unproposed + 1
        return RoundEvent(emitted, plan.num_draft, done.drafted, done.accepted, done.looked_up, done.probe, done.blocked)

    def learn(self, done: Round, seconds: float) -> None:
        """Show its schedule the round it planned last: `done`, in `seconds` of the engine's time."""
        self.schedule.update(done, seconds)

    def close(self) -> GenerationStats:
        """Its stats: what it committed, and why it stopped ("cancelled" if nothing stopped it)."""
        if self.stats is None:
            self.tail = self.text.finish()
            self.stats = self.rec.freeze(self.config.profile, self.finish or "cancelled", self.schedule.estimate(),
                                         self.text.matched)
        return self.stats


def schedule_for(engine: GenerationParts, policy: DraftPolicy) -> Schedule:
    """A generation's draft lengths: fixed or adaptive anew, or the drafter's automatic one."""
    if not engine.drafter.drafts:  # nothing to draft, but the context can still be looked up
        return DraftLength(policy.start if policy.lookup else 0, policy.start, adaptive=False)
    if not policy.auto:
        start, limit, blocks = policy.start, max(policy.max_draft, policy.start), drafts_blocks(engine.drafter)
        if blocks:  # within what one of its forwards proposes: a length of the set, whose verify is warmed
            start, limit = min(start, engine.drafter.proposals), min(limit, engine.drafter.proposals)
        return DraftLength(start, limit, policy.adaptive, blocks)
    auto = engine.auto_draft(policy=policy)
    auto.begin(policy.max_draft)
    return auto


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
