"""A running batch: members join and leave between rounds; each round serves all.

`add` prefills a member in its slot's own caches (reusing what they hold),
then moves its target rows into the batch's cache; `step` plans every
row's draft length, runs one batched round and commits each row's tokens;
a member that finished, or is `remove`d, takes its rows back to its slot's
cache, where its conversation's next turn finds them.

Draft lengths: a member alone plans as a generation alone does (its own
schedule: `AutoDraft`, or a fixed or adaptive length). With others, the
members on the automatic length are chosen together for the batch
(`schedule.load`), with costs the batch learns by size from its own rounds
(`schedule.load_costs`): a fuller batch drafts less. Rows whose drafter is the
same small model draft together, one forward a step (`drafting.py`); other
drafters (MTP heads, Gemma 4 assistants, a p-min) run on their own row.

A shared drafter's prompt is fed when its row first drafts (or, alone, probes),
not at admission, for a row on the automatic length that joins others: under a load
that compute binds no row drafts, and its prefill would only delay the row's
first token. The row waits outside its drafter's group (`deferred`), though
the plans count it in it; before the round that first has it draft or probe,
its drafter is fed what it skipped, on its own, and joins the group
(`_catch_up`), and only at a batch size where drafting was measured, never to
try a guess. A row that leaves before then keeps a drafter holding a prefix
of its context, which its next turn's prefill completes.
"""

from __future__ import annotations

from dataclasses import replace
from time import perf_counter

import mlx.nn as nn

from ..drafters import drafts_blocks
from ..events import RoundEvent
from ..plan import Plan
from ..schedule.auto import TIMED_EVERY
from ..schedule.costs import CostEstimate
from ..schedule.load import Lane, choose
from ..schedule.load_costs import LoadCosts
from ..caches.batch import BatchCache
from .drafting import SharedDrafter, shares
from .member import Member
from .round import BatchRound, RowFailure, run_batch


class Batch:
    """The members decoding together, at most `max_rows` of them."""

    def __init__(self, target: nn.Module, layers: int, max_rows: int = 8) -> None:
        self.target, self.max_rows = target, max_rows
        self.cache = BatchCache(layers)
        self.members: list[Member] = []
        self.shared: dict[int, SharedDrafter] = {}  # by id of the drafter model its rows share
        self.deferred: list[Member] = []  # rows of a shared drafter not yet fed their context
        self.rounds = 0  # batched rounds run with more than one member
        self.widest = 0  # the most members one round served
        self._drafting = 0  # load-aware rounds that drafted, for the timed-apart cadence
        self.costs = LoadCosts()  # what rounds cost at each batch size, learned from its own rounds

    @property
    def full(self) -> bool:
        return len(self.members) >= self.max_rows

    def add(self, member: Member) -> None:
        """Prefill `member` in its slot's caches and move its target rows into the batch. Under
        others' load, an automatic length's shared drafter is prefilled once it drafts (`_catch_up`)."""
        defer = bool(self.members) and member.auto is not None and shares(member)
        member.prefill(drafter=not defer)
        engine = member.engine
        self.cache.move_in(engine.cache, engine.cache_length())
        member.row.index = len(self.members)
        self.members.append(member)
        if defer:
            self.deferred.append(member)
        elif shares(member):
            self._share(member)
        if engine.drafter.reads_target_cache:
            engine.drafter.attach(self.target, self.cache.view(member.row))

    def remove(self, member: Member) -> None:
        """Take `member` out (finished or cancelled): its rows go back to its slot's cache."""
        engine = member.engine
        self.cache.move_out(member.row.index, engine.cache)
        self.members.remove(member)
        if member in self.deferred:  # its drafter holds a prefix of its context: a next turn feeds the rest
            self.deferred.remove(member)
        group = self._group(member)
        if group is not None:
            group.leave(member)
            if not group.rows:
                del self.shared[id(group.model)]
        for i, m in enumerate(self.members):
            m.row.index = i
        if engine.drafter.reads_target_cache:
            engine.drafter.attach(self.target, engine.cache)
        engine.rewind(len(member.tokens))
        member.rec.pause()
        member.close()

    def clear(self) -> list[Member]:
        """Drop every member, their rows unrecoverable (a shared forward failed): the members
        are closed, their slots' caches must be emptied. Returns them."""
        members, self.members = self.members, []
        self.cache, self.shared, self.deferred = BatchCache(len(self.cache.layers)), {}, []
        for member in members:
            member.rec.pause()
            member.close()
        return members

    def step(self) -> list[tuple[Member, RoundEvent]]:
        """One round for every member; members that finished leave the batch after it."""
        members = list(self.members)
        self.widest = max(self.widest, len(members))
        estimate = _alone(members)  # one row's costs, read once for the round's plans and what it teaches
        plans = self._plans(members, estimate)
        self._catch_up(members, plans)
        timed = any(p.timed for p in plans) or any(m.config.profile for m in members)
        for group in self.shared.values():
            group.fed = 0
        began = perf_counter()
        done = run_batch(self.target, self.cache, members, plans, timed, list(self.shared.values()))
        seconds = perf_counter() - began
        alone = len(members) == 1
        events = [(m, m.commit(plan, r)) for m, plan, r in zip(members, plans, done.rounds)]
        if alone:  # a batch of one feeds its own schedule, as a generation alone does
            members[0].learn(done.rounds[0], seconds)
        else:
            self._learn(members, done, seconds, estimate)
        for m in members:
            if m.finish:
                self.remove(m)
        return events

    def _share(self, member: Member) -> None:
        """Move `member`'s drafter cache into its drafter model's group."""
        drafter = member.engine.drafter
        self.shared.setdefault(id(drafter.draft_model), SharedDrafter(drafter)).join(member)

    def _catch_up(self, members: list[Member], plans: list[Plan]) -> None:
        """Deferred rows this round has draft or probe: each drafter is fed the context it skipped
        on its own (in the group's forward every row would be padded to its length), outside the
        round's timing, and the row joins its group. A drafter that fails fails its row alone."""
        for m, plan in zip(members, plans):
            if m not in self.deferred or not (plan.num_draft or plan.probe):
                continue
            start = perf_counter()
            try:
                m.engine.drafter.prefill(m.tokens)
            except Exception as err:  # noqa: BLE001 - as a drafter failing in a round
                raise RowFailure(m, err) from err
            m.rec.draft_s += perf_counter() - start
            self.deferred.remove(m)
            self._share(m)

    def _group(self, member: Member) -> SharedDrafter | None:
        return next((g for g in self.shared.values() if member in g.rows), None)

    def _plans(self, members: list[Member], alone: CostEstimate | None) -> list[Plan]:
        """Alone: the member's own schedule. Together: the automatic lengths chosen for the batch."""
        if len(members) == 1 or not any(m.auto for m in members):
            return [m.plan() for m in members]
        fixed = [None if m.auto else m.plan() for m in members]
        lanes = [self._lane(m, plan, len(members), alone) for m, plan in zip(members, fixed)]
        if len(members) not in self.costs.step:
            # Drafting at this size is a guess until a round measures it: a deferred row would feed its
            # drafter the whole prompt to try it. Rows already fed try it (and measure it) first.
            lanes = [replace(lane, cap=0) if m in self.deferred else lane for m, lane in zip(members, lanes)]
        verify = lambda n: self.costs.verify_s(n, alone)  # noqa: E731
        ks = choose(lanes, verify)
        # A row probes only if drafting could pay at all, were every draft accepted: under a load
        # that compute binds, no acceptance would, and a model drafter's probe costs a forward over
        # every token it skipped.
        hopeful = choose([replace(lane, rates=(1.0,) * len(lane.rates)) for lane in lanes], verify)
        drafts = any(ks) or any(plan.num_draft for plan in fixed if plan is not None)
        timed = drafts and (len(members) not in self.costs.step or self._drafting % TIMED_EVERY == 0)
        self._drafting += drafts
        # A deferred row does not probe: its probe would first feed its drafter the whole prompt.
        return [plan if plan is not None else
                Plan(k, timed, k == 0 and lane.cap > 0 and hope > 0 and m not in self.deferred
                     and (m.hit or m.idle + 1 >= m.auto.probe_every))
                for m, plan, lane, k, hope in zip(members, fixed, lanes, ks, hopeful)]

    def _lane(self, member: Member, fixed: Plan | None, rows: int, alone: CostEstimate | None) -> Lane:
        """A row as the load-aware choice sees it, in seconds; rows of one shared drafter pay its
        steps once, at this batch's size."""
        group_id = id(member.engine.drafter.draft_model) if shares(member) else None  # a deferred row's too
        auto = member.auto
        own = None if auto is None else auto.costs.estimate()
        step = self.costs.step_s(rows, alone) if group_id is not None else (0.0 if own is None else own.step_s)
        if fixed is not None:  # its steps count: in a shared drafter's group they are the group's too
            return Lane((), 0, step, fixed=fixed.num_draft, group=group_id, blocks=drafts_blocks(member.engine.drafter))
        rates = auto.acceptance.rates()
        if auto.acceptance.gave_up:  # weighed as never right, as `AutoDraft` weighs it; its probes go on
            rates = [0.0] * len(rates)
        return Lane(tuple(rates), max(min(auto.limit, member.room), 0), step, group=group_id,
                    blocks=drafts_blocks(member.engine.drafter))

    def _learn(self, members: list[Member], done: BatchRound, seconds: float, alone: CostEstimate | None) -> None:
        """What a batched round teaches: each row's acceptance, and the batch's costs."""
        self.rounds += 1
        for m, r in zip(members, done.rounds):
            if not m.auto:
                m.learn(r, seconds)
                continue
            if r.probe is not None:
                m.auto.acceptance.observe_first(r.probe)
                m.hit = r.probe >= 0.5
            elif not r.looked_up:
                m.auto.acceptance.update(r.drafted, r.accepted)
                m.hit = m.hit or r.drafted > 0
            m.idle = 0 if r.steps else m.idle + 1
        if not any(group.fed > 2 for group in self.shared.values()):  # a drafter catching up is no step
            self.costs.update(len(members) * done.width, len(members), seconds, done.steps, done.draft_s, alone)


def _alone(members: list[Member]) -> CostEstimate | None:
    """One row's costs as the first automatic member's drafter measured them alone, if it has."""
    estimates = (m.auto.costs.estimate() for m in members if m.auto)
    return next((e for e in estimates if e is not None), None)
