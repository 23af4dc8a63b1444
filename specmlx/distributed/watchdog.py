"""A bound on every wait for the other ranks.

A peer whose process ends is noticed at once (`liveness.py`); one that is alive
but stuck, or out of reach, is not. So each wait that involves the other ranks
is timed, and one that outlasts the limit ends the process with one line, exit
code 2. Waiting for a server's next request is not timed.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from time import monotonic
from typing import Iterator

from .output import end

PEER_TIMEOUT = 120.0  # seconds: longer than any one round or prefill chunk here, far shorter than forever


class Watchdog:
    def __init__(self, name: str, timeout: float = PEER_TIMEOUT) -> None:
        self.name, self.timeout = name, timeout
        self._since: float | None = None
        threading.Thread(target=self._watch, daemon=True, name="specmlx-watchdog").start()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time what is inside: a wait on the other ranks."""
        outer = self._since
        self._since = monotonic() if outer is None else outer
        try:
            yield
        finally:
            self._since = outer

    def _watch(self) -> None:
        while True:
            threading.Event().wait(min(1.0, self.timeout / 4))
            since = self._since
            if since is not None and monotonic() - since > self.timeout:
                end(f"{self.name}: no word from the other ranks for {self.timeout:.0f} s; a rank has stopped "
                    "or hangs; stopping")
