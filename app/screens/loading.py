"""Loading the models, step by step, on the MLX thread; the screen stays live,
and takes the first message, to be sent once the models are ready."""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, LoadingIndicator, Static

from ..loader import LoadFailure, ModelChoice, failure
from ..session import Session

Loader = Callable[[Callable[[str], None]], Session]  # takes a progress callback
WAITING = "Sent as soon as the models are ready."


@dataclass(frozen=True)
class Typed:
    """What the user typed while the models loaded; `send`: Enter was pressed."""

    text: str = ""
    send: bool = False


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
        self.sent = False  # Enter was pressed in the prompt
        self.held = Typed()  # what was typed, as loading ended

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="loading"):
            yield Static("Loading models…", id="loading-title")
            yield LoadingIndicator()
            yield Static(id="steps")
        yield Input(placeholder="Type your first message: Enter sends it once the models are ready", id="prompt")
        yield Static(id="waiting")
        yield Footer()

    @property
    def typed(self) -> Typed:
        return Typed(self.query_one("#prompt", Input).value, self.sent)

    def on_mount(self) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.cursor_blink = getattr(self.app, "cursor_blink", True)
        prompt.focus()
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

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.sent = True
            event.input.disabled = True  # what is shown is what will be sent
            self.query_one("#waiting", Static).update(WAITING)

    def on_loading_screen_done(self, message: Done) -> None:
        self.held = self.typed  # read while the prompt is still mounted: the app takes it once this is gone
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
