"""Conversations' KV caches, kept between requests: a few engines sharing one set of weights.

Each slot is an `Engine` (the target's cache and context) with its own
instance of every loaded drafter (`Drafter.fresh`: same weights, own state).
What the automatic draft length measures (costs, acceptance) is the machine's
and the drafter's, not the conversation's: every slot's engine, a slot made
anew included, shares one `AutoDrafts`, so no slot calibrates again.
A request goes to the slot whose context it continues, so a chat's next turn
is prefilled only past what that slot already holds; two clients taking turns
each keep their own slot. Only the MLX thread touches slots.

A request continues a slot when it shares all of the slot's last prompt (a
next turn may differ in the answer, re-rendered, and in the last few tokens of
the prompt: `RENDERED_AGAIN`). One that diverges inside it
(a subagent with the same system prompt and tools, another chat with the same
system prompt, an edited message) is another conversation: it leaves that one
whole and takes a slot by the rules below, copying the shared start's caches
(`Engine.adopt`) rather than prefilling it; the slot it diverges from is
rewound only when those rules pick it.

A request that continues nothing (a web UI's title, tags and follow-up
requests after each turn) takes an empty slot, else the least recently used
that is neither a live conversation (continued at least once and used within
the last `LIVE_FOR` × `count` requests: room for its next turn and a few
one-offs between turns) nor holds over `LONGER` times the request's prompt;
failing that, the least recently used that is not live; failing that, the
least recently used. So one-off requests take turns in the other slots, a
short one does not push out a longer chat, and a conversation gone quiet
makes room.

With the prompt cache on disk (`disk`), a slot's caches are kept there block by block once it has
answered, and a request whose prompt continues a prefix its owner kept (this process or an
earlier one) has it restored into its slot rather than prefilled: any such request, not only one
that continues a slot (`diskcache.keeper`).

Slots belong to an owner (an API key): a request only continues, and so only
reuses the cache of, what its own owner sent. What a cache holds shows in
`cached_tokens` and in how fast a prompt is prefilled, so sharing one would let
a client read another's prompt a token at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.utils import common_prefix_len

from ..caches.kinds import KVBits
from ..caches.stream import kv_bytes_per_token, recurrent_bytes
from ..drafters import Drafter, tell_finished, tell_owner
from .. import keeping
from ..diskcache.keeper import Keeper
from ..engine import Engine
from ..caches.stream import resumes_at
from ..schedule import AutoDrafts
from ..vision.images import Images, agreement
from .admission import LOOKAHEAD, Ask, Claim, Footprint, admit, too_long
from .jobs import Job
from .mirror import NO_MIRROR, Mirror

# A shared start at least this long is copied into the slot a diverging request takes, not prefilled.
COPY_MIN = 16
LIVE_FOR = 4  # a conversation stays live for this many requests a slot since its last turn
LONGER = 2  # a request that continues nothing leaves alone a slot holding this many times its prompt
# The default slot count keeps this many tokens of context per slot within --cache-gb.
TOKENS_PER_SLOT = 4096
MIN_SLOTS, MAX_SLOTS = 2, 16


@dataclass
class Slot:
    engine: Engine
    drafters: dict[str, Drafter]  # name -> this slot's own instance
    used: int = 0  # when it last served a request (a counter, for LRU)
    turns: int = 0  # requests it served in one conversation: 1 is a one-off, more a conversation
    owner: Hashable = None  # whose requests it serves (an API key's id; None without keys)
    asked: int = 0  # the length of the last prompt it served: a request that shares it all is its next turn
    shareable: int | None = None  # of that prompt, what a later request may share, if not all (`Job.shareable`)
    busy: bool = False  # a request runs in it (taken, not yet released)
    from_disk: int = 0  # of what its request's prompt found held, how many tokens came from disk
    unkept: bool = False  # it answered since the disk last kept its caches

    def held_bytes(self) -> int:
        """The target's KV cache and what each drafter's state holds: its own KV cache, the target's
        hidden states that one reading them (MTP-style) keeps, a row a position."""
        return self.engine.cache.held_bytes() + sum(d.held_bytes() for d in self.drafters.values())


@dataclass
class Slots:
    """Up to `count` conversations, their caches holding at most `max_bytes` between requests."""

    target: nn.Module
    tokenizer: Any
    drafters: dict[str, Drafter]  # the loaded drafters by name; the first is the default
    count: int = 2
    max_bytes: int = 4 << 30
    mirror: Mirror = NO_MIRROR  # who else holds these slots (a sharded target's other ranks)
    autos: AutoDrafts = field(default_factory=AutoDrafts)  # the automatic draft lengths, shared by every slot
    disk: Keeper | None = None  # the prompt cache on disk (None: off)
    memory_limit: int | None = None  # the most MLX may hold in all, weights included (None: unchecked)
    kv: KVBits | None = None  # the target's keys and values kept quantized (`--kv-bits`; None: as the weights)
    _slots: list[Slot] = field(default_factory=list)
    _footprints: dict[str, Footprint] = field(default_factory=dict)
    baseline: int = field(default=0, init=False)  # what MLX held when the slots were made: the weights
    _clock: int = 0

    def __post_init__(self) -> None:
        self._slots = [self._new() for _ in range(self.count)]
        # From shapes, once, on the MLX thread: read on the request threads too (`refuse_past_memory`).
        kv, recurrent = kv_bytes_per_token(self.target, self.kv), 2 * recurrent_bytes(self.target)
        self._footprints = {name: Footprint(kv + d.bytes_per_token(self.target), recurrent)
                            for name, d in self.drafters.items()}
        self.baseline = mx.get_active_memory()

    @property
    def context_window(self) -> int | None:
        return self._slots[0].engine.context_window

    def room(self, prompt_tokens: int) -> int | None:
        return self._slots[0].engine.room(prompt_tokens)

    def _new(self) -> Slot:
        # Every slot gets fresh instances: the loaded ones stay empty templates, so emptying a slot frees its caches.
        own = {name: d.fresh() for name, d in self.drafters.items()}
        return Slot(Engine(self.target, next(iter(own.values())), self.tokenizer, peers=self.mirror.peers,
                           autos=self.autos, kv=self.kv), own)

    def free(self) -> bool:
        """Whether a slot is free for another request (requests run at once in a batch)."""
        return any(not s.busy for s in self._slots)

    def footprint(self, drafter: str) -> Footprint:
        """What a row of context costs beside the weights when `drafter` drafts it."""
        return self._footprints[drafter]

    def refuse_past_memory(self, job: Job) -> None:
        """Refuse (400), before it queues, a prompt that cannot fit even alone beside the weights (what MLX
        held when the slots were made): a streamed request then gets its status, not an error event."""
        if self.memory_limit is not None:
            footprint = self.footprint(job.drafter)
            if footprint.rows([len(job.prompt) + 1 + LOOKAHEAD]) > self.memory_limit - self.baseline:
                raise too_long(len(job.prompt), footprint, self.baseline, self.memory_limit)

    def admit(self, job: Job, running: Sequence[int] = (), batch_bytes: int = 0) -> Claim | None:
        """`job` as it may run beside rows reaching `running` positions, whose batch cache holds
        `batch_bytes` (`admission.admit`): whole or its answer cut; None to wait for the running ones.
        Raises `APIError` for a prompt that cannot fit. Everything is admitted whole without a `memory_limit`.
        What every slot holds is counted free: an idle one is emptied when its room is needed, and a busy
        one holds a running row's drafter state, which `running`'s rows count again."""
        if self.memory_limit is None:
            return Claim(job)
        footprint = self.footprint(job.drafter)
        slots = sum(s.held_bytes() for s in self._slots)
        free = self.memory_limit - (mx.get_active_memory() - batch_bytes - slots)
        ask = Ask(len(job.prompt), job.config.max_tokens)
        max_tokens = admit(ask, running, footprint, free, self.memory_limit - free, self.memory_limit)
        if max_tokens is None:
            return None
        cut = max_tokens < job.config.max_tokens
        if cut:
            job = replace(job, config=replace(job.config, max_tokens=max_tokens))
        rows = footprint.rows([*running, Ask(ask.prompt, max_tokens).reach])
        return Claim(job, rows - batch_bytes, cut)

    def take(self, prompt: Sequence[int], drafter: str, owner: Hashable = None, shareable: int | None = None,
             need: int = 0, images: Images | None = None) -> Slot:
        """The slot for `owner`'s `prompt` (its images `images`), drafting with `drafter`, among the free
        ones, busy until `release`d. In this order, each step needing the one before:
        1. chosen: the one of its own whose conversation it continues, else an empty one, else the one
           cheapest to lose (see above), emptied if another owner's;
        2. occupied: marked used and busy, its drafters told their owner, `drafter` in use;
        3. room made: idle slots emptied, least recently used first, until `need` more bytes than it
           holds fit the memory limit (`admit`), before a copy or a restore takes memory;
        4. the start it shares with another conversation of its owner's copied into it;
        5. the rest its owner kept on disk restored, where longer than what it holds by now (the disk
           keeps no image's prompt)."""
        slot, source, shared = self._choose(prompt, owner)
        self._occupy(slot, prompt, drafter, owner, shareable)
        self._make_room(need - slot.held_bytes(), keep=(slot, source))
        if source is not None and source is not slot:
            self._copy_start(slot, source, agreement(source.engine.images, images, shared), prompt, images)
        slot.from_disk = 0 if self.disk is None or images is not None else \
            keeping.restore(self.disk, slot.engine, owner, prompt, shareable)
        return slot

    def _choose(self, prompt: Sequence[int], owner: Hashable) -> tuple[Slot, Slot | None, int]:
        """The slot `take` fills, and the other of its owner's conversations (with how many tokens they
        share) whose start it may copy."""
        own = [(common_prefix_len(s.engine.context, prompt), s) for s in self._slots
               if s.owner == owner and s.engine.context and not s.busy]
        shared, best = max(own, key=lambda o: (_continues(o[1], o[0]), o[0], o[1].used), default=(0, None))
        if best is not None and _continues(best, shared):
            best.turns += 1
            return best, None, shared
        source = best if shared >= COPY_MIN else None
        slot = self._cheapest(prompt)
        if slot.owner != owner and slot.engine.context:  # another owner's: not even a shared start is reused
            slot = self._empty(slot)
        slot.turns, slot.owner = 1, owner
        return slot, source, shared

    def _occupy(self, slot: Slot, prompt: Sequence[int], drafter: str, owner: Hashable,
                shareable: int | None) -> None:
        slot.engine.use(slot.drafters[drafter])  # first: a drafter it refuses leaves the slot free
        self._clock += 1
        slot.used, slot.busy, slot.asked, slot.shareable = self._clock, True, len(prompt), shareable
        for instance in slot.drafters.values():  # one that remembers requests (`suffix`) learns from its owner's alone
            tell_owner(instance, owner)

    def _copy_start(self, slot: Slot, source: Slot, shared: int, prompt: Sequence[int],
                    images: Images | None) -> None:
        """`source`'s first `shared` positions (as far as its images let it serve) copied into `slot`,
        where that is more than `slot` already holds of `prompt`."""
        if shared > slot.engine.reusable(prompt, images):
            copied = slot.engine.adopt(source.engine, shared, images)
            if copied:
                self.mirror.copied(self.index(source), self.index(slot), copied)

    def _cheapest(self, prompt: Sequence[int]) -> Slot:
        """An empty free slot, else the free one cheapest to lose (issue 25's rules, above)."""
        free = [s for s in self._slots if not s.busy]
        empty = [s for s in free if not s.engine.context]
        loose = [s for s in free if not self._live(s)]
        small = [s for s in loose if len(s.engine.context) <= LONGER * len(prompt)]
        return empty[0] if empty else min(small or loose or free, key=lambda s: s.used)

    def release(self, slot: Slot, broken: bool = False) -> None:
        """The request in `slot` ended: its drafters that remember requests learn its context; a `broken`
        one (its request failed midway) is emptied instead."""
        slot.busy = False
        slot.unkept = self.disk is not None and not broken and slot.engine.images is None
        if broken:
            if slot in self._slots:
                self._empty(slot)
            return
        for instance in slot.drafters.values():  # `suffix` learns its owner's every request, whatever drafted it
            tell_finished(instance, slot.engine.context)

    def keep(self) -> None:
        """Hand what each free slot answered since it was last kept to the disk (`Keeper.keep`): called
        once its answer is sent, and before a slot is emptied."""
        for slot in self._slots:
            if slot.unkept and not slot.busy:
                slot.unkept = False
                keeping.keep(self.disk, slot.engine, slot.owner, slot.asked, slot.shareable)

    def _make_room(self, need: int, keep: Sequence[Slot | None]) -> None:
        """Empty idle slots but `keep` until `need` more bytes than MLX holds fit the memory limit."""
        if self.memory_limit is not None:
            self._empty_idle(lambda: mx.get_active_memory() + need > self.memory_limit, keep)

    def _empty_idle(self, over: Callable[[], bool], keep: Sequence[Slot | None]) -> None:
        """Empty idle slots but `keep`, what is not live first, oldest first, while `over()`."""
        while over():
            idle = [s for s in self._slots if s not in keep and not s.busy and s.held_bytes()]
            if not idle:
                return
            self._empty(min(idle, key=lambda s: (self._live(s), s.used)))
            mx.clear_cache()

    def _live(self, slot: Slot) -> bool:
        """A conversation (continued at least once) used within the last `LIVE_FOR` × `count` requests."""
        return slot.turns > 1 and self._clock - slot.used < LIVE_FOR * len(self._slots)

    def _empty(self, slot: Slot) -> Slot:
        """Replace `slot` by a new, empty one (its caches are freed), as the mirror's too."""
        self.keep()
        index = self._slots.index(slot)
        self._slots[index] = self._new()
        self.mirror.emptied(index)
        return self._slots[index]

    def trim(self, keep: Slot | None = None, extra_bytes: int = 0) -> None:
        """Empty the least recently used free slots until the caches, and `extra_bytes` (a running
        batch's cache, which holds its requests' target rows), fit `max_bytes`."""
        self._empty_idle(lambda: sum(s.held_bytes() for s in self._slots) + extra_bytes > self.max_bytes, (keep,))

    def index(self, slot: Slot) -> int:
        return self._slots.index(slot)

    def owners(self) -> list[Hashable]:
        return [s.owner for s in self._slots]

    def contexts(self) -> list[int]:
        """How many tokens each slot holds (for tests and the health route)."""
        return [len(s.engine.context) for s in self._slots]


def _continues(slot: Slot, shared: int) -> bool:
    """Whether a prompt sharing `shared` tokens with `slot`'s context is its next turn (or the same again):
    it shares all of its last prompt but at most its last `RENDERED_AGAIN` tokens."""
    asked = min(slot.asked, len(slot.engine.context))
    return shared > 0 and shared >= resumes_at(asked)


def default_count(models: Sequence[nn.Module], max_bytes: int, drafters: Sequence[Drafter] = (),
                  kv: KVBits | None = None) -> int:
    """How many slots fit `max_bytes` at `TOKENS_PER_SLOT` tokens each: every slot holds a KV cache
    for each of `models` (the target, first) and its own instance of each of `drafters`, whose
    state grows by `Drafter.bytes_per_token` beside the target. A model's recurrent layers hold a
    state of fixed size, twice over: the state and the checkpoint a next turn rewinds to. `kv`: the
    target's keys and values quantized (`--kv-bits`)."""
    per_token = sum(kv_bytes_per_token(m, kv if i == 0 else None) for i, m in enumerate(models))
    per_token += sum(d.bytes_per_token(models[0]) for d in drafters)
    per_slot = per_token * TOKENS_PER_SLOT + 2 * sum(recurrent_bytes(m) for m in models)
    return max(MIN_SLOTS, min(MAX_SLOTS, max_bytes // max(1, per_slot)))


def slots_for(target: nn.Module, drafters: Iterable[Drafter], max_bytes: int, kv: KVBits | None = None) -> int:
    """`default_count` for a target and the drafters every slot gets its own instance of:
    a KV cache for each model drafter, the hidden states (and an MTP head's KV cache) for
    each drafter that reads them; prompt lookup and none keep nothing."""
    return default_count([target], max_bytes, list(drafters), kv)
