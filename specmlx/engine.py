"""The speculative decoding loop.

The engine speaks token ids and MLX arrays; text only enters through the
tokenizer's streaming detokenizer for stop strings and event text. Each round
drafts, scores the draft with one target forward, verifies, syncs with the
host once, and rewinds both caches to what was accepted. With `NoDrafter` the
same loop is plain autoregressive decoding.
"""

from __future__ import annotations

import random
import weakref
from contextlib import nullcontext
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, ContextManager, Iterable, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.utils import common_prefix_len

from .cache import PREFILL_STEP, cache_length, make_cache, rewind
from .drafters import Draft, Drafter, HiddenDrafter, NoDrafter
from .drafters.ngram import lookup
from .distributed.lockstep import Control, Lockstep
from .errors import SpecmlxError
from .events import Source, TokenEvent
from .hidden import check_exposes_hidden, decoder, head
from .policy import LOOKUP_NGRAM, DraftPolicy
from .rounds import Plan, Round
from .sampling import SamplingParams, warp
from .schedule import AutoDraft, DraftLength, Schedule
from .stats import GenerationStats, StatsRecorder
from .text import TextStream
from .verify import acceptance_chance, verify_greedy, verify_sampled
from .vocab import context_window

RANDOM_SEED = -1  # as llama.cpp's: a fresh random seed each generation, as no seed at all
MAX_SEED = 2**64 - 1  # MLX's random keys take an unsigned 64-bit seed


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: how many tokens, how to sample, and how rounds draft
    (`policy`). `profile` adds one host sync per round so that drafting and
    verification are timed apart; leave it off to measure speed."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    profile: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise SpecmlxError(f"max tokens must be >= 1, got {self.max_tokens}")
        if self.seed is not None and not RANDOM_SEED <= self.seed <= MAX_SEED:
            raise SpecmlxError(f"the seed must be {RANDOM_SEED} (a random one) or 0..{MAX_SEED}, got {self.seed}")


class Engine:
    """A target model, a drafter and their caches, reused across generations.

    A new prompt that extends the previous context (a chat's next turn) is
    prefilled only past the longest prefix both caches already hold.
    """

    def __init__(
        self,
        target: nn.Module,
        drafter: Drafter,
        tokenizer: Any | None = None,
        eos_token_ids: Iterable[int] | None = None,
        lockstep: Lockstep | None = None,
    ) -> None:
        """`lockstep`: the target is sharded across ranks (`specmlx.distributed`);
        rank 0 drafts and decides every round, the other ranks follow it."""
        self.target = target
        self.lockstep = lockstep
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos_token_ids = tokenizer.eos_token_ids if tokenizer is not None else ()
        self.eos_token_ids = frozenset(eos_token_ids)
        self.cache = make_cache(target, name="target")
        self.context: list[int] = []  # committed tokens; the caches hold a prefix
        self.context_window = context_window(target)  # None: the config does not say
        check_exposes_hidden(target)
        # For each drafter swapped out, the context its state is a prefix of.
        self._covered: weakref.WeakKeyDictionary[Drafter, list[int]] = weakref.WeakKeyDictionary()
        # Each drafter's automatic draft length, kept across generations: what it measured still holds.
        self._autos: weakref.WeakKeyDictionary[Drafter, AutoDraft] = weakref.WeakKeyDictionary()
        self._start_using(drafter, covered=[])

    @property
    def reads_hidden(self) -> bool:
        """Whether the drafter reads the target's hidden states (MTP-style)."""
        return self._reads_hidden

    def use(self, drafter: Drafter) -> None:
        """Draft with `drafter` from now on, keeping the target's cache.

        The outgoing drafter's state is remembered as a prefix of the context,
        so taking it back later only recomputes what changed since. The
        incoming one is rewound to what it shares with the context; one that
        reads hidden states is attached, and the target's cache is cut back to
        that shared prefix so the next prefill shows it every hidden state it
        missed.
        """
        if drafter is self.drafter:
            return
        outgoing, held = self.drafter, self.context[: cache_length(self.cache)]
        self._start_using(drafter, covered=self._covered.get(drafter, []))
        self._covered.pop(drafter, None)
        self._covered[outgoing] = held

    def _start_using(self, drafter: Drafter, covered: list[int]) -> None:
        """Attach first: a drafter that cannot read this target changes nothing."""
        reads_hidden = isinstance(drafter, HiddenDrafter)  # once per swap: too slow for every round
        if reads_hidden:
            drafter.attach(self.target, self.cache)
        keep = min(common_prefix_len(covered, self.context), cache_length(self.cache))
        drafter.rewind(keep)
        if reads_hidden:
            rewind(self.cache, keep)
        self.drafter: Drafter = drafter
        self._reads_hidden = reads_hidden

    def forget(self, keep: int) -> None:
        """Keep only the first `keep` tokens of the context and caches (a rank
        that follows rank 0's server mirrors what its slot kept)."""
        self.context = self.context[:keep]
        rewind(self.cache, keep)
        self.drafter.rewind(keep)

    def reusable(self, prompt: Sequence[int]) -> int:
        """How many of `prompt`'s tokens the target's cache already holds: what
        prefill skips. A swap to a drafter that reads hidden states may have cut it."""
        return min(common_prefix_len(self.context, prompt), len(prompt) - 1, cache_length(self.cache))

    def room(self, prompt_tokens: int) -> int | None:
        """How many new tokens fit after a prompt of this length, or None without a known window.
        The last new token is never fed back, so n + m - 1 positions hold m new tokens."""
        return None if self.context_window is None else self.context_window - prompt_tokens + 1

    def generate(self, prompt: Sequence[int], config: GenerationConfig = GenerationConfig()) -> "Generation":
        """Start generating from `prompt` (token ids). Iterate the result for events.

        A prompt and `max_tokens` that do not fit the target's context window
        are refused: past it a model's positions mean nothing and it writes
        garbage. Callers that can shorten (the chat) check `room` first."""
        if len(prompt) == 0:
            raise SpecmlxError("the prompt is empty")
        room = self.room(len(prompt))
        if room is not None and config.max_tokens > room:
            fits = f"at most {room} new tokens fit" if room > 0 else "no new token fits"
            raise SpecmlxError(
                f"the prompt ({len(prompt)} tokens) and max tokens ({config.max_tokens}) do not fit the "
                f"target's context window of {self.context_window} tokens; {fits}")
        return Generation(self, list(prompt), config)

    # -- phases ---------------------------------------------------------------

    def _prefill(self, prompt: list[int]) -> None:
        """Bring both caches to hold prompt[:-1], reusing what they share with it."""
        keep = self.reusable(prompt)
        rewind(self.cache, keep)
        self.drafter.rewind(keep)
        # The decoder alone: prefill reads no logits, so the vocabulary projection is skipped.
        for start in range(cache_length(self.cache), len(prompt) - 1, PREFILL_STEP):
            chunk = mx.array(prompt[start : min(start + PREFILL_STEP, len(prompt) - 1)], dtype=mx.uint32)
            hidden = decoder(self.target, chunk[None], self.cache)
            if self.reads_hidden:
                self.drafter.observe(start, hidden[0])
            with self._waiting():
                mx.eval(hidden, [c.state for c in self.cache])
        self.drafter.prefill(prompt)
        self.context = prompt

    def _propose(self, tokens: list[int], num_draft: int, room: int, config: GenerationConfig,
                 key: mx.array) -> tuple[Draft, bool]:
        """The round's draft, and whether it was looked up rather than drafted.

        Whether to look up depends only on the committed tokens, and a copied
        draft is deterministic (q one-hot), so every round still proposes from
        a known q and verification stays exact at every temperature.
        """
        policy = config.policy
        if num_draft == 0:
            return Draft.empty(), False
        if policy.lookup:
            found = lookup(tokens, min(policy.lookup_draft, room), LOOKUP_NGRAM, policy.lookup)
            if found:
                return Draft(mx.array(found, dtype=mx.uint32)), True
        return self.drafter.draft(tokens, num_draft, config.sampling, key, policy.p_min), False

    def _round(
        self, tokens: list[int], plan: Plan, room: int, config: GenerationConfig,
        key: mx.array, rec: StatsRecorder,
    ) -> Round:
        """One round as `plan` says: drafting at most `plan.num_draft` tokens
        (`room` if looked up), timing drafting apart with one more sync, and
        in a round that drafts nothing, probing the drafter (`_probe`)."""
        sampling, timed = config.sampling, plan.timed or config.profile
        draft_key, verify_key = mx.random.split(key)
        start = perf_counter()
        # 1. propose: lazy for model drafters (step by step with a p-min), host-side for prompt lookup
        draft, looked_up = self._propose(tokens, plan.num_draft, room, config, draft_key)
        probe = self.drafter.draft(tokens, 1, sampling, draft_key) if plan.probe and not draft.size else None
        if timed:
            self._sync(rec, draft.tokens, *([draft.probs] if draft.probs is not None else []))
            rec.timed_rounds += 1
        if self.lockstep is not None:  # the other ranks score rank 0's proposal with it
            self.lockstep.announce(Control(draft.size, looked_up))
            draft = Draft(self.lockstep.share(draft.tokens), draft.probs)
        draft_done = perf_counter()
        # 2. score [last, d1..dk] in one target forward (still lazy)
        scored = cache_length(self.cache)
        pending = mx.array(tokens[scored:], dtype=mx.uint32)
        hidden = decoder(self.target, mx.concatenate([pending, draft.tokens])[None], self.cache)[0]
        logits = head(self.target, hidden[-(draft.size + 1) :])  # only the rows verification reads
        if self.reads_hidden:
            self.drafter.observe(scored, hidden)  # rejected rows are cut by the rewind below
        # 3. verify (still lazy)
        p = None if sampling.greedy else mx.exp(warp(logits, sampling))
        if p is None:
            n_accepted, following = verify_greedy(logits, draft.tokens)
        else:
            n_accepted, following = verify_sampled(p, draft.probs, draft.tokens, verify_key)
        chance = self._probe(probe, logits, p)
        if self.lockstep is not None:
            n_accepted, following = self.lockstep.decide(n_accepted, following, after=hidden)
        # 4. the round's one blocking host sync
        proposal, accepted, following, *probed = self._sync(
            rec, draft.tokens, n_accepted, following, *([chance] if chance is not None else []),
            keep=(hidden,) if self.reads_hidden else ())
        if self.lockstep is not None:
            self.lockstep.end_round()
        # 5. rewind both caches to the accepted prefix: O(1) offset moves
        committed = len(tokens) + accepted
        rewind(self.cache, committed)
        self.drafter.rewind(committed)
        rec.draft_s += draft_done - start
        rec.verify_s += perf_counter() - draft_done
        return Round(tuple(proposal[:accepted]) + (following,), draft.size, looked_up,
                     draft_done - start if timed else None, probed[0] if probed else None)

    def _follow(self, tokens: list[int], control: Control, rec: StatsRecorder) -> Round:
        """A round on a rank that does not lead: score rank 0's proposal with
        this rank's shard, then commit and rewind by rank 0's verdict."""
        start = perf_counter()
        draft = self.lockstep.share(mx.zeros((control.size,), dtype=mx.uint32))
        scored = cache_length(self.cache)
        pending = mx.array(tokens[scored:], dtype=mx.uint32)
        scored_rows = decoder(self.target, mx.concatenate([pending, draft])[None], self.cache)[0]
        if self.lockstep.vocab:  # this rank holds part of the head: it computes its logits when rank 0 does
            scored_rows = head(self.target, scored_rows[-(control.size + 1) :])
        accepted, following = self.lockstep.decide(mx.array(0), mx.array(0), after=scored_rows)
        proposal, accepted, following = self._sync(rec, draft, accepted, following, keep=(scored_rows,))
        rewind(self.cache, len(tokens) + accepted)
        rec.verify_s += perf_counter() - start
        return Round(tuple(proposal[:accepted]) + (following,), control.size, control.looked_up)

    @staticmethod
    def _probe(probe: Draft | None, logits: mx.array, p: mx.array | None) -> mx.array | None:
        """The chance the target would have accepted the probe's one token, had
        it been proposed (lazy). A probe costs a drafter step and no verify
        width; it is never proposed, so output cannot depend on it."""
        if probe is None or not probe.size:
            return None
        q = None if probe.probs is None else probe.probs[0]
        return acceptance_chance(None if p is None else p[0], logits[0], q, probe.tokens[0])

    def _waiting(self) -> ContextManager[None]:
        """A wait on the device, and with a sharded target on the other ranks too: bounded (`distributed.watchdog`)."""
        return nullcontext() if self.lockstep is None else self.lockstep.waiting()

    def _sync(self, rec: StatsRecorder, *arrays: mx.array, keep: tuple[mx.array, ...] = ()) -> list:
        """Evaluate and bring `arrays` to the host; every blocking wait goes
        through here. `keep` is evaluated in the same pass but stays on device."""
        with self._waiting():
            mx.eval(*arrays, *keep)
        rec.host_syncs += 1
        return [a.tolist() for a in arrays]

    def auto_draft(self, drafter: Drafter | None = None, policy: DraftPolicy = DraftPolicy()) -> AutoDraft:
        """The automatic draft length of `drafter` (the current one by default) on
        this engine, with what it has measured; made on first use."""
        drafter = self.drafter if drafter is None else drafter
        auto = self._autos.get(drafter)
        if auto is None:
            auto = self._autos[drafter] = AutoDraft(policy.max_draft, policy.start)
        return auto

    def _schedule(self, policy: DraftPolicy) -> Schedule:
        """This generation's draft lengths: fixed or adaptive anew, or the drafter's automatic one."""
        if isinstance(self.drafter, NoDrafter):  # nothing to draft, but the context can still be looked up
            return DraftLength(policy.start if policy.lookup else 0, policy.start, adaptive=False)
        if not policy.auto:
            return DraftLength(policy.start, max(policy.max_draft, policy.start), policy.adaptive)
        auto = self.auto_draft(policy=policy)
        auto.begin(policy.max_draft)
        return auto

    def _decode(self, prompt: list[int], config: GenerationConfig, out: "Generation") -> Iterator[TokenEvent]:
        policy = config.policy
        schedule = self._schedule(policy)
        # A fixed length says what it drafts (0 for no drafter and no lookup, as `_schedule` chose).
        planned = schedule.start if isinstance(schedule, DraftLength) else policy.start
        rec = StatsRecorder(drafter=self.drafter.name, num_draft=planned, auto=isinstance(schedule, AutoDraft))
        seed = config.seed if config.seed not in (None, RANDOM_SEED) else random.SystemRandom().getrandbits(63)
        key = mx.random.key(seed)
        text = TextStream(self.tokenizer, config.stop)
        start = perf_counter()
        self._prefill(prompt)
        rec.prefill_s = perf_counter() - start
        rec.prompt_tokens = len(prompt)
        tokens = self.context  # grows as tokens are committed
        finish = ""
        # A rank that follows rank 0 stops when rank 0 says so, and not before: rank 0 may be cancelled.
        follows = self.lockstep is not None and not self.lockstep.leads
        rec.resume()
        try:
            while follows or not finish:
                began, away = perf_counter(), 0.0  # away: time the consumer held each token
                budget = config.max_tokens - rec.generation_tokens
                key, round_key = mx.random.split(key)
                if follows:
                    control = self.lockstep.follow()
                    if control is None:
                        break
                    plan = Plan(control.size)
                    done = self._follow(tokens, control, rec)
                else:
                    plan = schedule.plan(budget - 1)
                    done = self._round(tokens, plan, budget - 1, config, round_key, rec)
                rec.record_round(plan.num_draft, done)
                out.draft_lengths.append(plan.num_draft)
                for i, token in enumerate(done.tokens):
                    tokens.append(token)
                    if token in self.eos_token_ids:
                        finish = "eos"
                        break
                    event = TokenEvent(token, text.add(token), done.source(i))
                    rec.generation_tokens += 1
                    rec.pause()
                    handed = perf_counter()
                    yield event
                    away += perf_counter() - handed
                    rec.resume()
                    if text.stopped:
                        finish = "stop"
                    elif rec.generation_tokens >= config.max_tokens:
                        finish = "length"
                    if finish:
                        break
                if not follows:
                    schedule.update(done, perf_counter() - began - away)
        finally:
            if self.lockstep is not None and self.lockstep.leads:
                self.lockstep.stop()
            # Whatever stopped us, the caches keep only committed tokens.
            rewind(self.cache, len(tokens))
            self.drafter.rewind(len(tokens))
            out.tail = text.finish()
            out.stats = rec.freeze(config.profile, finish or "cancelled", schedule.estimate())


class Generation:
    """An iterator of `TokenEvent`s.

    Once iteration ends (or after `close()`), `stats` holds the
    `GenerationStats` and `tail` any text the detokenizer held back until the
    end; the full text is the events' text followed by `tail`.
    """

    def __init__(self, engine: Engine, prompt: list[int], config: GenerationConfig) -> None:
        self.stats: GenerationStats | None = None
        self.tail = ""
        self.draft_lengths: list[int] = []  # each round's chosen draft length, as rounds finish
        self._events = engine._decode(prompt, config, self)

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> TokenEvent:
        return next(self._events)

    def close(self) -> None:
        """Stop early; the caches keep what was emitted."""
        self._events.close()
