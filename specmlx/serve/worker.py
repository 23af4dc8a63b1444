"""One MLX thread runs every generation: together in a continuous batch
(`batching.py`), or one at a time, in arrival order, for a sharded target
or `max_batch` 1.

Requests wait in a FIFO queue of bounded length; a full queue is refused with
429 and a `Retry-After`, never a hang. A ticket's output reaches its request
through a callback (`Sink`) the request hands in, called on the MLX thread
for each round and once at the end. A cancelled ticket (its client left, or
the server is stopping) stops after the round running, and the
caches keep only committed tokens (`Generation.close`).

Other processes that hold the same slots (a sharded target's ranks) are the
slots' `Mirror`'s business: the worker tells it when a job begins, asks it
whether a failure leaves the server unable to answer again, and ends it last.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from time import perf_counter
from typing import Callable

from ..errors import SpecmlxError
from ..log import user_error
from ..mlx_thread import MLXThread
from .errors import APIError
from .batching import Batching
from .mirror import NO_MIRROR, Mirror
from .protocol import Done, Failed, Job, Sink
from .slots import Slots

LOST = APIError(503, "the sharded target cannot go on (a rank was lost, or its ranks fell out of step); "
                     "the server is stopping", "server_shutdown")


@dataclass(frozen=True)
class Record:
    """One finished ticket, kept for `/health`, tests and the load bench."""

    finish_reason: str
    generation_tokens: int
    queue_s: float
    run_s: float


class Ticket:
    """A job in the queue or running, and how to stop it."""

    def __init__(self, job: Job, sink: Sink) -> None:
        self.job, self.sink = job, sink
        self.submitted = perf_counter()
        self._stop: APIError | None = None
        self._cancelled = threading.Event()

    def cancel(self, why: APIError | None = None) -> None:
        """Stop after the round running; `why`, if given, is sent to the client (the server is stopping)."""
        self._stop = why
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def stop_reason(self) -> APIError | None:
        """What to tell the client of a cancelled ticket (the server is stopping), or None."""
        return self._stop


class Worker:
    def __init__(self, slots: Slots, max_queue: int = 32, mlx: MLXThread | None = None,
                 on_lost: Callable[[], None] = lambda: None, max_batch: int = 1) -> None:
        """`on_lost`: called when the server cannot answer again (the command line stops it).
        `max_batch`: requests decoded at once; a sharded target's (a mirror's) run one at a time,
        since its ranks follow one generation."""
        self.slots = slots
        self.lost: str | None = None  # why the server cannot answer again, once it cannot (the mirror's line)
        self._begun = False  # whether the mirror knows of the running job
        self.on_lost = on_lost
        self.max_queue = max_queue
        self.mlx = mlx or MLXThread()
        self.records: deque[Record] = deque(maxlen=1024)
        self._lock = threading.RLock()  # `stop` may run in a signal handler on a thread that holds it
        self._waiting = 0
        self._live: set[Ticket] = set()
        self._closing: APIError | None = None
        batching = max_batch > 1 and slots.mirror is NO_MIRROR
        self.batching = Batching(self, max_batch) if batching else None
        self.max_batch = self.batching.batch.max_rows if batching else 1

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(self, job: Job, sink: Sink) -> Ticket:
        """Queue `job`, or refuse: 429 when `max_queue` jobs already wait, 503 while stopping."""
        with self._lock:
            if self._closing is not None:
                raise self._closing
            if self._waiting >= self.max_queue:
                raise APIError(429, f"the server is busy: {self._waiting} requests are waiting; retry later",
                               "queue_full", headers={"Retry-After": str(self._retry_after())})
            self._waiting += 1
            ticket = Ticket(job, sink)
            self._live.add(ticket)
        if self.batching is not None:
            self.batching.enqueue(ticket)
        else:
            self.mlx.submit(self._run, ticket)
        return ticket

    def dequeued(self) -> None:
        """A ticket left the queue (to run, or cancelled before its turn)."""
        with self._lock:
            self._waiting -= 1

    def finished(self, ticket: Ticket, finish: str, tokens: int, started: float, ended: float) -> None:
        """A ticket ended: it is no longer live, and its record is kept."""
        with self._lock:
            self._live.discard(ticket)
        self.records.append(Record(finish, tokens, started - ticket.submitted, ended - started))

    def _retry_after(self) -> int:
        """Seconds a request sent now would wait: the running jobs and those waiting, at the recent
        mean run time, `max_batch` at a time, at least 1."""
        recent = [r.run_s for r in list(self.records)[-8:]]
        if not recent:
            return 1
        return max(1, math.ceil((self._waiting + 1) / self.max_batch * sum(recent) / len(recent)))

    @property
    def mirror(self) -> Mirror:
        return self.slots.mirror

    def lose(self, why: str) -> None:
        """The mirror's processes are lost or out of step (`why`, one line): every job fails with 503,
        and the server stops. Called on the MLX thread when a job fails, or by the mirror's own watch
        (a rank's process ended): the MLX thread may then be waiting in a collective that never
        returns, so nothing here waits for it."""
        with self._lock:
            if self.lost is not None:  # seen twice: by the mirror's watch and by a failed job
                return
            self.lost = why
            live = list(self._live)
        for ticket in live:
            ticket.sink(Failed(LOST))
        self.on_lost()

    def _run(self, ticket: Ticket) -> None:
        self._begun = False
        self.dequeued()
        started = perf_counter()
        finish, tokens = "cancelled", 0
        try:
            if ticket.cancelled:
                return
            done = self._generate(ticket, started - ticket.submitted)
            finish, tokens = done.stats.finish_reason, done.stats.generation_tokens
            if finish != "cancelled":  # one that finished as the server began stopping is still whole
                ticket.sink(done)
        except Exception as err:  # noqa: BLE001 - a bug fails this request, not the server
            finish = "error"
            lost = self.mirror.lost(err, self._begun)
            if lost is not None:
                self.lose(lost)
            elif isinstance(err, SpecmlxError):  # checked before queueing, so rare: still the client's input
                ticket.sink(Failed(APIError(400, str(err), "invalid_request")))
            else:
                user_error(err, "a generation failed")  # its traceback to the log file, never the terminal
                ticket.sink(Failed(APIError(500, f"generation failed ({type(err).__name__}); "
                                                 "the server's log has the details", "internal_error")))
        finally:
            if ticket.stop_reason is not None and finish == "cancelled":
                ticket.sink(Failed(ticket.stop_reason))
            self.finished(ticket, finish, tokens, started, perf_counter())

    def _generate(self, ticket: Ticket, queue_s: float) -> Done:
        job = ticket.job
        slot = self.slots.take(job.prompt, job.drafter, job.owner)
        try:
            cached = slot.engine.reusable(job.prompt)
            run = slot.engine.generate(job.prompt, job.config)
            self.mirror.begin(self.slots.index(slot), cached, job.prompt, job.config)
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
        return Done(run.stats, run.tail, cached, queue_s)

    def stop(self, why: APIError) -> None:
        """Refuse new jobs and cancel every queued and running one, telling its client `why`."""
        with self._lock:
            self._closing = why
            live = list(self._live)
        for ticket in live:
            ticket.cancel(why)

    def close(self) -> None:
        if self.lost is None:  # else the mirror's processes are gone, or wait in a collective
            self.mlx.call(self.mirror.end)
        self.mlx.close()
