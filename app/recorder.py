"""Writes one streaming answer to the history, round by round, on the thread that runs it.

`Chat.send` saves each update before handing it on to the screen, so
whatever is on screen is already committed.
"""

from __future__ import annotations

from .session import Finished, Started, Streamed, Update
from .store import Store


class AnswerRecorder:
    def __init__(self, store: Store, conversation: int | None) -> None:
        self.store = store
        self.conversation = conversation  # None: not saving (no history, or it failed)
        self.message: int | None = None
        self.shown: list[str] = []

    def save(self, update: Update) -> None:
        """Raises StoreError; the caller then sets `conversation` to None and goes on."""
        if isinstance(update, Streamed):
            self.shown.append(update.round.text)
        if self.conversation is None:
            return
        if isinstance(update, Started):
            self.message = self.store.begin_answer(self.conversation)
        elif isinstance(update, Streamed):
            self.store.add_round(self.message, update.round, "".join(self.shown))
        elif isinstance(update, Finished):
            self.store.finish_answer(self.message, update.text, update.stats)
