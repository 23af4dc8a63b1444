"""One MLX thread runs every generation: together in a continuous batch
(`batching.py`), or one at a time, in arrival order (`runner.py`), for a
target whose other processes follow one generation at a time (a sharded
target's ranks) or `max_batch` 1.

Requests wait in a FIFO queue of bounded length (`ledger.py`); a full queue is
refused with 429 and a `Retry-After`, never a hang. A ticket's output reaches
its request through a callback (`Sink`) the request hands in, called on the
MLX thread for each round and once at the end. A cancelled ticket (its client
left, or the server is stopping) stops after the round running, and the
caches keep only committed tokens (`Generation.close`).

Other processes that hold the same slots (a sharded target's ranks) are the
slots' `Mirror`'s business: the runner tells it when a job begins and asks it
whether a failure leaves the server unable to answer again; the worker ends it last.
"""

from __future__ import annotations

import threading
from typing import Callable

from ..mlx_thread import MLXThread
from .batching import Batched
from .errors import APIError
from .ledger import Ledger, Ticket
from .mirror import Mirror
from .jobs import Failed, Job, Sink
from .runner import OneAtATime, Runner
from .slots import Slots

LOST = APIError(503, "the sharded target cannot go on (a rank was lost, or its ranks fell out of step); "
                     "the server is stopping", "server_shutdown")


class Worker:
    def __init__(self, slots: Slots, max_queue: int = 32, mlx: MLXThread | None = None,
                 on_lost: Callable[[], None] = lambda: None, max_batch: int = 1) -> None:
        """`on_lost`: called when the server cannot answer again (the command line stops it).
        `max_batch`: requests decoded at once; a mirror's that follows one generation at a
        time (a sharded target's) run one at a time."""
        self.slots = slots
        self.lost: str | None = None  # why the server cannot answer again, once it cannot (the mirror's line)
        self.on_lost = on_lost
        self.mlx = mlx or MLXThread()
        self._lock = threading.Lock()
        batched = max_batch > 1 and not slots.mirror.one_at_a_time
        at_once = min(max_batch, slots.count) if batched else 1
        self.ledger = Ledger(max_queue, at_once)
        self.runner: Runner = (Batched(slots, self.mlx, self.ledger, at_once) if batched
                               else OneAtATime(slots, self.mlx, self.ledger, self.lose))

    @property
    def waiting(self) -> int:
        return self.ledger.waiting

    @property
    def mirror(self) -> Mirror:
        return self.slots.mirror

    def submit(self, job: Job, sink: Sink) -> Ticket:
        """Queue `job`, or refuse: 429 when `max_queue` jobs already wait, 503 while stopping."""
        ticket = self.ledger.admit(job, sink)
        self.runner.enqueue(ticket)
        return ticket

    def lose(self, why: str) -> None:
        """The mirror's processes are lost or out of step (`why`, one line): every job fails with 503,
        and the server stops. Called on the MLX thread when a job fails, or by the mirror's own watch
        (a rank's process ended): the MLX thread may then be waiting in a collective that never
        returns, so nothing here waits for it."""
        with self._lock:
            if self.lost is not None:  # seen twice: by the mirror's watch and by a failed job
                return
            self.lost = why
        for ticket in self.ledger.live():
            ticket.sink(Failed(LOST))
        self.on_lost()

    def stop(self, why: APIError) -> None:
        """Refuse new jobs and cancel every queued and running one, telling its client `why`."""
        for ticket in self.ledger.close(why):
            ticket.cancel(why)

    def close(self) -> None:
        if self.lost is None:  # else the mirror's processes are gone, or wait in a collective
            self.mlx.call(self.mirror.end)
        self.mlx.close()
        if self.slots.disk is not None:  # what is queued is written before the process ends
            self.slots.disk.close()
