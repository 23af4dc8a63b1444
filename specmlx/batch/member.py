"""One generation inside a batch: what `generation._decode` keeps, split at the round.

A batch drives its members: it asks each for its plan, runs one round for
all of them, and hands each its `Round` to commit. A member commits exactly
as a generation alone does (`generation.emit`: the stop rules, the text
stream, the stats), so what it streams is what the same request alone
streams.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Sequence

import mlx.core as mx

from ..events import RoundEvent
from ..generation import GenerationConfig, emit, schedule_for
from ..plan import Plan, Round
from ..schedule import AutoDraft, DraftLength
from ..stats import GenerationStats, StatsRecorder
from .cache import RowRef

if TYPE_CHECKING:  # a slot's engine brings the member's context, drafter and tokenizer
    from ..engine import Engine


class Member:
    """A request's generation in a batch. `stats` and `tail` are set once it `close`s."""

    def __init__(self, engine: "Engine", prompt: Sequence[int], config: GenerationConfig) -> None:
        engine.check(prompt, config)
        self.engine, self.prompt, self.config = engine, list(prompt), config
        self.schedule = schedule_for(engine, config.policy)
        planned = self.schedule.start if isinstance(self.schedule, DraftLength) else config.policy.start
        self.rec = StatsRecorder(drafter=engine.drafter.name, num_draft=planned,
                                 auto=isinstance(self.schedule, AutoDraft), prediction_tokens=len(config.prediction))
        self.key, self.text = config.key(), config.text_stream(engine.tokenizer)
        self.tokens: list[int] = []  # the committed sequence, grown by each round
        self.finish = ""
        self.row = RowRef(-1)  # where it sits in the batch
        self.prediction = config.follow_prediction(len(self.prompt))
        self.constraint = engine.constrain(config.grammar)  # its place in its grammar, if it has one
        self.idle = 0  # load-aware rounds since it last drafted or probed
        self.hit = False  # its last probe would have been accepted
        self.stats: GenerationStats | None = None
        self.tail = ""

    @property
    def auto(self) -> AutoDraft | None:
        return self.schedule if isinstance(self.schedule, AutoDraft) else None

    @property
    def room(self) -> int:
        """Drafts this round may propose: one token of the budget is the target's own."""
        return self.config.max_tokens - self.rec.generation_tokens - 1

    def prefill(self, drafter: bool = True) -> None:
        """Bring the slot's caches to hold the prompt but its last token (reusing what they share);
        without `drafter`, the target's only (`Engine.prefill`)."""
        start = perf_counter()
        self.engine.prefill(list(self.prompt), drafter)  # the engine keeps and grows the list it is given
        self.rec.prefill_s, self.rec.prompt_tokens = perf_counter() - start, len(self.prompt)
        self.tokens = self.engine.context
        self.rec.resume()

    def next_key(self) -> mx.array:
        """This round's key, split off the generation's as a generation alone splits it."""
        self.key, round_key = mx.random.split(self.key)
        return round_key

    def commit(self, plan: Plan, done: Round, seconds: float | None) -> RoundEvent:
        """Commit a round's tokens up to a stop rule; `seconds` (a batch of one) feeds its own schedule."""
        emitted, self.finish = emit(done, self.tokens, self.text, self.config.end_tokens(self.engine.eos_token_ids),
                                    self.room + 1)
        self.rec.record_round(plan.num_draft, done, len(emitted))
        if seconds is not None:
            self.schedule.update(done, seconds)
        return RoundEvent(emitted, plan.num_draft, done.drafted, done.accepted, done.looked_up, done.probe)

    def close(self) -> GenerationStats:
        """The member's stats: what it committed, and why it stopped ("cancelled" if nothing stopped it)."""
        if self.stats is None:
            self.tail = self.text.finish()
            estimate = self.schedule.estimate()
            self.stats = self.rec.freeze(self.config.profile, self.finish or "cancelled", estimate, self.text.matched)
        return self.stats
