"""Many requests at once: the worker's continuous batch (the `Runner` for one process).

Tickets wait in arrival order; between rounds, as many as the batch has
room for (`max_batch`, a free slot each, and the memory their whole context needs:
`admission.py`) are admitted: each takes the
slot whose conversation it continues (so its prefill starts from that
slot's cached prefix), is prefilled there, and joins the running batch.
Each round then serves every member (`specmlx.batch`); a member leaves when
it finishes, when its client goes, or when the server stops, within one
round. The MLX thread runs one tick (admit, one round) per task, so other
MLX work queued meanwhile is not held up by a long batch.

A failure of one member's own work (its prompt, its drafter) fails that
request alone; one in the shared forward fails the members of that round.
Each ticket leaves the queue and ends in the worker's `Ledger`.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from time import perf_counter

from ..batch import Batch, Member
from ..batch.round import RowFailure
from ..caches.stream import make_cache
from ..mlx_thread import MLXThread
from .admission import Ask, Claim
from .ledger import Ledger, Ticket
from .jobs import Admitted, Done
from .slots import Slot, Slots


WAIT = object()  # a ticket's claim on memory that the running requests hold: it waits for them


@dataclass
class Running:
    """An admitted ticket: its member in the batch, its slot, and when it began."""

    ticket: Ticket
    member: Member
    slot: Slot
    cached: int
    queue_s: float
    started: float
    reach: int  # the positions its context may reach (`admission.Ask`)
    memory_bound: bool  # its max_tokens was cut to what memory holds


class Batched:
    """Up to `at_once` tickets (and a free slot each) decoding together, round by round."""

    def __init__(self, slots: Slots, mlx: MLXThread, ledger: Ledger, at_once: int) -> None:
        self.slots, self.mlx, self.ledger, self.at_once = slots, mlx, ledger, at_once
        self.batch = Batch(slots.target, len(make_cache(slots.target)), at_once)
        self.pending: deque[Ticket] = deque()
        self.running: dict[int, Running] = {}  # by id(member)
        self._scheduled = False
        self._lock = threading.Lock()

    def enqueue(self, ticket: Ticket) -> None:
        with self._lock:
            self.pending.append(ticket)
            schedule, self._scheduled = not self._scheduled, True
        if schedule:
            self.mlx.submit(self._tick)

    def _tick(self) -> None:
        """Admit what fits, run one round, and queue the next tick while anything is left."""
        self._admit()
        if self.batch.members:
            self._round()
        with self._lock:
            more = bool(self.pending) or bool(self.batch.members)
            self._scheduled = more
        if more:
            self.mlx.submit(self._tick)

    def _admit(self) -> None:
        while self.pending and not self.batch.full and self.slots.free():
            ticket = self.pending[0]
            claim = None if ticket.cancelled else self._claim(ticket)
            if claim is WAIT:  # the running requests hold the memory its context needs: it waits, first in line
                return
            with self._lock:
                self.pending.popleft()
            self.ledger.dequeued()
            if ticket.cancelled:  # its client left, or the server is stopping: then it is told so
                self.ledger.end(ticket, perf_counter())
            elif isinstance(claim, Claim):
                self._join(ticket, claim)
            else:  # refused (a prompt too long), or admission itself failed: this request alone
                self.ledger.fail(ticket, perf_counter(), claim)

    def _claim(self, ticket: Ticket) -> Claim | Exception | object:
        """The ticket's job as memory admits it beside the running rows (`Slots.admit`), `WAIT` while
        they hold what it needs, or why it cannot run."""
        try:
            claim = self.slots.admit(ticket.job, [r.reach for r in self.running.values()], self.batch.cache.nbytes)
        except Exception as err:  # noqa: BLE001 - this request fails, not the batch
            return err
        return WAIT if claim is None else claim

    def _join(self, ticket: Ticket, claim: Claim) -> None:
        job, started = claim.job, perf_counter()
        slot = None
        try:
            slot = self.slots.take(job.prompt, job.drafter, job.owner, job.shareable, claim.need,
                                   job.config.images)
            cached = slot.engine.reusable(job.prompt, job.config.images)
            member = Member(slot.engine, job.prompt, job.config)
            self.batch.add(member)
            ticket.sink(Admitted(cached, slot.from_disk))
        except Exception as err:  # noqa: BLE001 - this request fails, not the batch
            if slot is not None:
                self.slots.release(slot, broken=True)
            self.ledger.fail(ticket, started, err)
            return
        self.running[id(member)] = Running(ticket, member, slot, cached, started - ticket.submitted, started,
                                           Ask(len(job.prompt), job.config.max_tokens).reach, claim.cut)

    def _round(self) -> None:
        try:
            events = self.batch.step()
        except RowFailure as failure:  # one member's own work failed before the shared forward
            run = self.running[id(failure.member)]
            self.batch.remove(failure.member)
            self._end(run, failed=failure.error)
            return
        except Exception as err:  # noqa: BLE001 - the shared forward failed: every member of it fails
            for member in self.batch.clear():
                self._end(self.running[id(member)], failed=err)
            return
        for member, event in events:
            self.running[id(member)].ticket.sink(event)
        for member in [m for m in (e[0] for e in events) if m not in self.batch.members]:
            self._end(self.running[id(member)])
        for run in [r for r in self.running.values() if r.ticket.cancelled]:
            self.batch.remove(run.member)
            self._end(run)

    def _end(self, run: Running, failed: BaseException | None = None) -> None:
        """A member left the batch: answer its client, free its slot, keep the record."""
        del self.running[id(run.member)]
        self.slots.release(run.slot, broken=failed is not None)
        if failed is not None:
            self.ledger.fail(run.ticket, run.started, failed)
            return
        self.ledger.end(run.ticket, run.started, Done(run.member.stats, run.member.tail, run.cached, run.queue_s,
                                                      run.slot.from_disk, run.memory_bound))
        self.slots.keep()  # once the answer is sent
        self.slots.trim(extra_bytes=self.batch.cache.nbytes)
