"""A bound on every wait for the other ranks.

When a peer dies, MLX's ring backend fails the collectives it has pending
(a RuntimeError, which `group.link_errors` turns into one line), but a
collective queued after that can wait forever. So each wait that involves
the other ranks is timed, and one that outlasts the limit ends the process
with one line, exit code 2. Waiting for a server's next request is not timed.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from time import monotonic
from typing import Iterator

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
                sys.stdout.flush()
                print(f"specmlx: error: {self.name}: no word from the other ranks for {self.timeout:.0f} s; "
                      "a rank has stopped or hangs; stopping", file=sys.stderr, flush=True)
                os._exit(2)  # the waiting thread cannot be interrupted: MLX holds it
