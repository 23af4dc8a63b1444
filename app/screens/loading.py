"""Loading the models, step by step, on the MLX thread; the screen stays live."""

from __future__ import annotations

from time import monotonic
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, LoadingIndicator, Static

from ..loader import LoadFailure, ModelChoice, failure
from ..session import Session

Loader = Callable[[Callable[[str], None]], Session]  # takes a progress callback


class LoadingScreen(Screen[Session | LoadFailure]):
    """Dismissed with the loaded Session, or with a LoadFailure to show."""

    class Progress(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, step: str) -> None:
            super().__init__()
            self.step = step

    class Done(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, result: Session | LoadFailure) -> None:
            super().__init__()
            self.result = result

    def __init__(self, loader: Loader, choice: ModelChoice) -> None:
        super().__init__()
        self.loader = loader
        self.choice = choice
        self.steps: list[tuple[str, float]] = []  # (step, started at)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="loading"):
            yield Static("Loading models…", id="loading-title")
            yield LoadingIndicator()
            yield Static(id="steps")
        yield Footer()

    def on_mount(self) -> None:
        self.started = monotonic()
        self.set_interval(0.25, self._show_steps)  # a ticking clock: the screen is not frozen
        self.load()

    @work(thread=True, exit_on_error=False)
    def load(self) -> None:
        progress = lambda step: self.post_message(self.Progress(step))  # noqa: E731
        try:
            result = self.app.mlx.call(self.loader, progress)
        except Exception as err:  # every failure becomes the missing-model screen
            result = failure(err, self.choice)
        self.post_message(self.Done(result))  # never call_from_thread: it would hang a closing app

    def on_loading_screen_done(self, message: Done) -> None:
        self.dismiss(message.result)

    def on_loading_screen_progress(self, message: Progress) -> None:
        self.steps.append((message.step, monotonic()))
        self._show_steps()

    def _show_steps(self) -> None:
        now, text = monotonic(), Text()
        for i, (step, started) in enumerate(self.steps):
            done = i + 1 < len(self.steps)
            ended = self.steps[i + 1][1] if done else now
            text.append("✓ " if done else "… ", "green" if done else "yellow")
            text.append(f"{step}  ")
            text.append(f"{ended - started:.1f} s\n", "dim")
        text.append(f"elapsed {now - self.started:.1f} s", "dim")
        self.query_one("#steps", Static).update(text)
