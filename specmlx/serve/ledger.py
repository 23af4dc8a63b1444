"""The worker's ledger: the tickets waiting and running, and how each one ended.

Whatever runs the jobs (`runner.py`: one at a time, or in a continuous batch),
a ticket is queued here (429 with a `Retry-After` when `max_queue` wait, 503
while the server stops), leaves the queue here, and ends here: its client is
told how (`end`, `fail`), and its `Record` is kept. So what a failure tells a
client, and what a cancelled ticket's client hears, is written once.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from time import perf_counter

from ..errors import SpecmlxError
from ..log import user_error
from .errors import APIError
from .jobs import Done, Failed, Job, Sink


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


def failure(err: BaseException) -> APIError:
    """What a client is told of a generation that raised `err`: a bad input is its own (400), anything
    else a bug (500), whose traceback goes to the log file, never the terminal."""
    if isinstance(err, APIError):  # refused as it was admitted (`admission.py`): told as it is
        return err
    if isinstance(err, SpecmlxError):  # checked before queueing, so rare: still the client's input
        return APIError(400, str(err), "invalid_request")
    user_error(err, "a generation failed")
    return APIError(500, f"generation failed ({type(err).__name__}); the server's log has the details",
                    "internal_error")


class Ledger:
    """The queue's count, the live tickets and the records, for a runner that runs `at_once` jobs together."""

    def __init__(self, max_queue: int = 32, at_once: int = 1) -> None:
        self.max_queue, self.at_once = max_queue, at_once
        self.records: deque[Record] = deque(maxlen=1024)
        self._lock = threading.RLock()  # `close` may run in a signal handler on a thread that holds it
        self._waiting = 0
        self._live: set[Ticket] = set()
        self._closing: APIError | None = None

    @property
    def waiting(self) -> int:
        return self._waiting

    def admit(self, job: Job, sink: Sink) -> Ticket:
        """A ticket for `job`, counted as waiting; or a refusal: 429 when `max_queue` wait, 503 while stopping."""
        with self._lock:
            if self._closing is not None:
                raise self._closing
            if self._waiting >= self.max_queue:
                raise APIError(429, f"the server is busy: {self._waiting} requests are waiting; retry later",
                               "queue_full", headers={"Retry-After": str(self.retry_after())})
            self._waiting += 1
            ticket = Ticket(job, sink)
            self._live.add(ticket)
        return ticket

    def dequeued(self) -> None:
        """A ticket left the queue (to run, or cancelled before its turn)."""
        with self._lock:
            self._waiting -= 1

    def end(self, ticket: Ticket, started: float, done: Done | None = None) -> None:
        """`ticket` ended (`done`; None: cancelled before it ran). Its client gets `done`, unless the
        ticket was cancelled: then the reason it was stopped for, if any. Its record is kept."""
        finish = done.stats.finish_reason if done is not None else "cancelled"
        if finish != "cancelled":  # one that finished as the server began stopping is still whole
            ticket.sink(done)
        elif ticket.stop_reason is not None:
            ticket.sink(Failed(ticket.stop_reason))
        self._keep(ticket, finish, done.stats.generation_tokens if done is not None else 0, started)

    def fail(self, ticket: Ticket, started: float, err: BaseException, told: bool = False) -> None:
        """`ticket` failed with `err`: its client is told (`failure`) unless `told` already, and its record kept."""
        if not told:
            ticket.sink(Failed(failure(err)))
        self._keep(ticket, "error", 0, started)

    def _keep(self, ticket: Ticket, finish: str, tokens: int, started: float) -> None:
        with self._lock:
            self._live.discard(ticket)
        self.records.append(Record(finish, tokens, started - ticket.submitted, perf_counter() - started))

    def retry_after(self) -> int:
        """Seconds a request sent now would wait: the running jobs and those waiting, at the recent
        mean run time, `at_once` at a time, at least 1."""
        recent = [r.run_s for r in list(self.records)[-8:]]
        if not recent:
            return 1
        return max(1, math.ceil((self._waiting + 1) / self.at_once * sum(recent) / len(recent)))

    def live(self) -> list[Ticket]:
        """The tickets queued or running."""
        with self._lock:
            return list(self._live)

    def close(self, why: APIError) -> list[Ticket]:
        """Refuse new tickets with `why` from now on; the live ones, to cancel."""
        with self._lock:
            self._closing = why
            return list(self._live)
