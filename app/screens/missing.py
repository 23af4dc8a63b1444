"""No model could be loaded: say why, and exactly how to fetch or convert one."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from ..loader import LoadFailure


class MissingModelScreen(Screen):
    BINDINGS = [Binding("q,escape", "app.quit_missing", "Quit")]

    def __init__(self, problem: LoadFailure, unsent: str = "") -> None:
        super().__init__()
        self.problem = problem
        self.unsent = unsent  # a message typed while loading: shown, so it is not lost

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="missing"):
            yield Static("No model to chat with", id="missing-title")
            yield Static(Text(self.problem.message), id="missing-error")
            yield Static("To get one, run:", classes="missing-label")
            yield Static(Text("\n".join(self.problem.commands)), id="missing-commands")
            yield Static("then start the app again. Press q to quit.", classes="missing-label")
            if self.unsent:
                yield Static(Text(f"Your message was not sent:\n{self.unsent}"), id="missing-unsent")
        yield Footer()
