"""The user's messages and short notes (stopped, errors, new chat) in the transcript."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class UserMessage(Static):
    def __init__(self, text: str, **kwargs) -> None:
        super().__init__(Text(text), **kwargs)  # Text: no markup parsing of what the user typed
        self.text = text


class Note(Static):
    """A dim line about the chat itself, not part of any message."""

    def __init__(self, text: str, **kwargs) -> None:
        super().__init__(Text(text), **kwargs)
