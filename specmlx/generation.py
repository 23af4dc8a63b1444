"""A generation: rounds until a stop rule, streamed as round events.

The loop asks its state (`decoding.Decoding`) for each round's plan, runs
the round (`round.py`), commits its tokens through the state's stop rules
and text stream, and yields one `RoundEvent`. Time the consumer holds an
event is not the generation's: the decode clock and the schedule's round
times leave it out. It reads the engine through `parts.GenerationParts` alone.
"""

from __future__ import annotations

from time import perf_counter
from typing import Iterator

from .config import GenerationConfig
from .decoding import Decoding
from .events import RoundEvent, TokenEvent
from .parts import GenerationParts
from .plan import Plan
from .round import proposes_nothing_next, run_round
from .stats import GenerationStats


class Generation:
    """An iterator of `RoundEvent`s.

    Once iteration ends (or after `close()`), `stats` holds the
    `GenerationStats` and `tail` any text the detokenizer held back until the
    end; the full text is the events' text followed by `tail`.
    """

    def __init__(self, engine: GenerationParts, prompt: list[int], config: GenerationConfig) -> None:
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


# Rounds in a row that proposed nothing after which the next is guessed empty too: a wrong guess
# costs that round one more forward, a right one saves the host's work of a round, a fifth of a
# step or so where a step takes milliseconds, so the guess must be right about nine times in ten.
GUESS_AFTER = 8


def overlaps(state: Decoding, plan: Plan) -> bool:
    """Whether a round that proposes nothing starts the next one's forward (`round.start_ahead`):
    when that one is sure to propose nothing too (`proposes_nothing_next`), or likely to (the
    schedule's guess before a plain round, or a long run of empty rounds, as a lookup with nothing
    to copy gives), and this one leaves it a token. One process only, and not when profiling:
    its split times each round's forward in that round."""
    if not (state.engine.peers.one_process and not state.config.profile and state.room > 0):
        return False
    return (plan.num_draft == 0 and state.schedule.likely_plain(state.room - 1)
            or state.unproposed >= GUESS_AFTER or proposes_nothing_next(state))


def _decode(engine: GenerationParts, prompt: list[int], config: GenerationConfig,
            out: Generation) -> Iterator[RoundEvent]:
    state = Decoding(engine, prompt, config)
    state.prefill()
    ahead = None  # the next position's forward, started by a plain round (`run_round`)
    try:
        while not state.finish:
            began = perf_counter()
            plan = state.plan()
            done, ahead = run_round(state, plan, ahead, overlaps(state, plan))
            event = state.commit(plan, done)
            running = ahead is not None  # the next forward runs meanwhile: the consumer's time is the round's
            if not running:
                state.rec.pause()
            handed = perf_counter()
            yield event
            away = 0.0 if running else perf_counter() - handed
            if not running:
                state.rec.resume()
            state.learn(done, perf_counter() - began - away)
    finally:
        engine.peers.stop()  # rank 0's word that the generation is over (other ranks run `follow`, not this)
        engine.rewind(len(state.tokens))  # whatever stopped us, the caches keep only committed tokens
        out.stats, out.tail = state.close(), state.tail
