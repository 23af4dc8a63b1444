"""How the worker runs its tickets on the MLX thread: the `Runner` seam, and its one-at-a-time runner.

Two runners, one per server: `OneAtATime` here, in arrival order, for a
target whose other processes follow one generation at a time (a sharded
target's ranks: `Mirror.one_at_a_time`) or `max_batch` 1; `Batched`
(`batching.py`) otherwise. Either takes tickets from the worker's `Ledger`,
hands each round to the ticket's sink, and ends each ticket there.
"""

from __future__ import annotations

from time import perf_counter
from typing import Callable, Protocol

from ..mlx_thread import MLXThread
from .ledger import Ledger, Ticket
from .jobs import Admitted, Done
from .slots import Slots


class Runner(Protocol):
    at_once: int  # tickets run together, at most

    def enqueue(self, ticket: Ticket) -> None:
        """Run `ticket` on the MLX thread when its turn comes (it is counted waiting until then)."""


class OneAtATime:
    """Each ticket a task of the MLX thread of its own, in arrival order. The slots' mirror is told
    when a job begins, and asked whether a failure leaves the server unable to answer again (`lose`)."""

    at_once = 1

    def __init__(self, slots: Slots, mlx: MLXThread, ledger: Ledger, lose: Callable[[str], None]) -> None:
        self.slots, self.mlx, self.ledger, self.lose = slots, mlx, ledger, lose
        self._begun = False  # whether the mirror knows of the running job

    def enqueue(self, ticket: Ticket) -> None:
        self.mlx.submit(self._run, ticket)

    def _run(self, ticket: Ticket) -> None:
        self._begun = False
        self.ledger.dequeued()
        started = perf_counter()
        try:
            done = None if ticket.cancelled else self._generate(ticket, started - ticket.submitted)
        except Exception as err:  # noqa: BLE001 - a bug fails this request, not the server
            lost = self.slots.mirror.lost(err, self._begun)
            if lost is not None:  # every live ticket, this one too, is told so
                self.lose(lost)
            self.ledger.fail(ticket, started, err, told=lost is not None)
            return
        self.ledger.end(ticket, started, done)
        self.slots.keep()  # once the answer is sent

    def _generate(self, ticket: Ticket, queue_s: float) -> Done:
        claim = self.slots.admit(ticket.job)  # alone: whole, or its answer cut to what memory holds
        job = claim.job
        slot = self.slots.take(job.prompt, job.drafter, job.owner, job.shareable, claim.need,
                                   job.config.images)
        try:
            cached = slot.engine.reusable(job.prompt, job.config.images)
            ticket.sink(Admitted(cached, slot.from_disk))
            run = slot.engine.generate(job.prompt, job.config)
            self.slots.mirror.begin(self.slots.index(slot), cached, job.prompt, job.config)
            self._begun = True
            try:
                for event in run:  # a round at a time: its tokens were computed together
                    ticket.sink(event)
                    if ticket.cancelled:
                        break
            finally:
                run.close()  # the caches keep only what was committed
        finally:
            self.slots.release(slot)
            self.slots.trim(keep=slot)
        return Done(run.stats, run.tail, cached, queue_s, slot.from_disk, claim.cut)
