"""Model names: the server serves one target, and answers any model name a request gives with it.

Clients send their own ids: Claude Code its Claude models' (and a haiku id for background requests),
an editor the last model it was set up with. Ollama and LM Studio answer whatever a client names;
so does this server, and it says once in the log, for each name, which model answers it.
"""

from __future__ import annotations

import threading

from ..log import note

# Names said in the log; past these, a client that makes up names writes nothing more.
MAX_NOTED = 64
SHOWN = 120  # characters of a name the log shows: a name may be as long as a body


class Aliases:
    """The served model's id, for any name a request gives it."""

    def __init__(self, served: str) -> None:
        self.served = served
        self._noted: set[str] = set()
        self._lock = threading.Lock()

    def answering(self, asked: str) -> str:
        """The id of the model that answers a request naming `asked`; a name other than the served id
        is said in the log the first time it comes."""
        if asked == self.served:
            return self.served
        with self._lock:
            first = asked not in self._noted and len(self._noted) < MAX_NOTED
            if first:
                self._noted.add(asked)
        if first:
            shown = asked if len(asked) <= SHOWN else asked[:SHOWN] + "..."
            note(f"requests for the model {shown!r} are answered by {self.served!r}, the model this server serves")
        return self.served
