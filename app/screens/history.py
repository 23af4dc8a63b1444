"""Earlier chats, newest first: Enter reopens one, Delete removes it."""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..store import ConversationInfo, Store, StoreError


def describe(info: ConversationInfo) -> Text:
    when = datetime.fromtimestamp(info.updated).strftime("%Y-%m-%d %H:%M")
    text = Text(info.title or "(untitled)", overflow="ellipsis", no_wrap=True)
    text.append(f"\n  {when} · {info.messages} messages", "dim")
    return text


class HistoryScreen(ModalScreen[int | None]):
    """Dismissed with the chosen conversation's id, or None.

    It reads the store; `delete` removes a chat, through the chat screen, as
    the store is written by one thread (see store.py)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("delete", "delete", "Delete chat"),
    ]

    def __init__(self, store: Store, delete: Callable[[int], None]) -> None:
        super().__init__()
        self.store = store
        self.delete = delete

    def compose(self) -> ComposeResult:
        with Vertical(id="history-dialog"):
            yield Static("History · Enter opens, Delete removes, Esc closes", id="history-title")
            yield OptionList(id="conversations")
            yield Static(id="history-empty")

    def on_mount(self) -> None:
        try:
            chats = self.store.conversations()
        except StoreError as err:
            chats = []
            self.notify(str(err), severity="error")
        options = self.query_one(OptionList)
        options.add_options([Option(describe(c), id=str(c.id)) for c in chats])
        self._show_empty()
        if options.option_count:
            options.highlighted = 0  # Enter opens the newest at once
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id))

    def action_close(self) -> None:
        self.dismiss(None)

    def action_delete(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return
        option = options.get_option_at_index(options.highlighted)
        self.delete(int(option.id))  # a failure is notified when it happens
        options.remove_option(option.id)
        self._show_empty()

    def _show_empty(self) -> None:
        empty = self.query_one(OptionList).option_count == 0
        self.query_one("#history-empty", Static).update("No saved chats yet." if empty else "")
