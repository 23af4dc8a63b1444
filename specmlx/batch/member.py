"""One generation inside a batch: its decoding state (`decoding.Decoding`) and its row.

A batch drives its members: it asks each for its plan, runs one round for
all of them, and hands each its `Round` to commit. A member commits exactly
as a generation alone does (the same state: the stop rules, the text
stream, the stats), so what it streams is what the same request alone
streams.
"""

from __future__ import annotations

from typing import Sequence

from ..config import GenerationConfig
from ..decoding import Decoding
from ..parts import GenerationParts
from ..caches.batch import RowRef


class Member(Decoding):
    """A request's generation in a batch: where its row sits, and what the load-aware
    choice keeps of it between rounds. `stats` and `tail` are set once it `close`s."""

    def __init__(self, engine: GenerationParts, prompt: Sequence[int], config: GenerationConfig) -> None:
        engine.check(prompt, config)
        super().__init__(engine, prompt, config)
        self.row = RowRef(-1)  # where it sits in the batch
        self.idle = 0  # load-aware rounds since it last drafted or probed
        self.hit = False  # its last probe would have been accepted
