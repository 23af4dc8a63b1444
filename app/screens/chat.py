"""The chat on screen: transcript, prompt, stats and legend. What the chat is
(conversation, stored chat, settings) is `Chat`'s; this screen keeps what it shows.

Every call to `Chat` is queued on the app's MLX thread, in order: answers and
baselines from thread workers, the rest straight from the event loop, and
what comes back is posted here as a message. So widgets are touched on the
event loop alone, and since `Chat` saves each round before handing it on,
nothing on screen is missing from the history.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Callable, TypeVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Input
from textual.worker import get_current_worker

from specmlx.log import user_error
from specmlx.mlx_thread import MLXThread

from ..chat import Chat, Reopened, Unsaved
from ..figures import finished_figures, idle_figures, started_figures, streaming_figures
from ..session import Baseline, Started, Streamed, Update
from ..settings import ChatSettings, drafter_label
from ..store import StoreError
from ..tally import Tally
from ..widgets.answer import AnswerView
from ..widgets.legend import Legend
from ..widgets.messages import Note, UserMessage
from ..widgets.stats import StatsPanel
from .history import HistoryScreen
from .loading import Typed
from .settings import SettingsScreen

T = TypeVar("T")


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+o", "history", "History"),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+t", "toggle_highlight", "Highlight"),
        Binding("ctrl+r", "toggle_markdown", "Markdown"),
        Binding("ctrl+g", "toggle_thinking", "Thinking"),
        Binding("ctrl+b", "baseline", "Baseline"),
    ]

    busy: reactive[str] = reactive("")  # "", "answering", "measuring", "opening" or "stopping"
    highlight: reactive[bool] = reactive(True)
    markdown: reactive[bool] = reactive(False)
    show_thinking: reactive[bool] = reactive(False)  # a thinking model's reasoning unfolded (ctrl+g)

    class AnswerUpdate(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, update: Update | Unsaved) -> None:
            super().__init__()
            self.update = update

    class AnswerFailed(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class BaselineDone(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, baseline: Baseline | None, error: str = "") -> None:
            super().__init__()
            self.baseline = baseline
            self.error = error

    class Opened(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, reopened: Reopened | None, error: str = "") -> None:
            super().__init__()
            self.reopened = reopened
            self.error = error

    class ChatDone(Message):
        """Chat work queued from the event loop has ended (`_queue`)."""

        bubble = False  # handled by this screen alone

        def __init__(self, done: Future, then: Callable[[Any], None] | None) -> None:
            super().__init__()
            self.done = done
            self.then = then

    def __init__(self, chat: Chat, mlx: MLXThread, typed: Typed = Typed()) -> None:
        super().__init__()
        self.chat = chat
        self.mlx = mlx
        self.typed = typed  # from the loading screen
        self.figures = idle_figures(chat.settings)
        self._answer: AnswerView | None = None
        self._tally = Tally()
        self._stop = threading.Event()
        self._after_busy: Callable[[], None] | None = None
        self._store_warned = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield VerticalScroll(Note(self._welcome(), id="welcome"), id="transcript")
            with Vertical(id="sidebar"):
                yield StatsPanel(self.figures, id="stats")
                yield Legend(id="legend")
        yield Input(placeholder="Message (Enter sends, Esc stops)", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        self._show_drafter()
        self.query_one("#transcript").anchor()  # follow the answer as it grows
        prompt = self.query_one("#prompt", Input)
        prompt.cursor_blink = getattr(self.app, "cursor_blink", True)
        prompt.value = self.typed.text
        prompt.focus()
        if self.typed.send:
            self.send(prompt)

    # -- sending and streaming ---------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.send(event.input)

    def send(self, prompt: Input) -> None:
        """Send what the prompt holds, unless empty or an answer is under way."""
        text = prompt.value.strip()
        if not text:
            return
        if self.busy:
            self.notify("Still working on the last answer: press Esc to stop it.", severity="warning")
            return
        prompt.clear()
        self._add(UserMessage(text))
        drafter = self.chat.settings.active_drafter
        if not self.chat.session.drafters.is_loaded(drafter):
            self._add(Note(f"loading drafter {drafter_label(drafter)} for its first use…"))
        self._answer = AnswerView(highlight=self.highlight, markdown=self.markdown, show_thinking=self.show_thinking)
        self._add(self._answer)
        self._tally = Tally()
        self._stop.clear()
        self.busy = "answering"
        self.run_answer(text)

    @work(thread=True, group="mlx", exit_on_error=False)
    def run_answer(self, text: str) -> None:
        worker = get_current_worker()
        stop = lambda: self._stop.is_set() or worker.is_cancelled  # noqa: E731
        try:
            for update in self.mlx.iterate(self.chat.send(text, stop)):
                self.post_message(self.AnswerUpdate(update))  # saved by now
        except Exception as err:  # an engine or MLX failure ends this answer, not the app
            self.post_message(self.AnswerFailed(str(user_error(err, "the answer failed"))))

    def on_chat_screen_answer_update(self, message: AnswerUpdate) -> None:
        update, answer = message.update, self._answer
        if isinstance(update, Unsaved):
            self._warn_unsaved(update.error)
            return
        if isinstance(update, Started):
            answer.think(update.thinking)
            self.figures = started_figures(update)
            note = self._window_note(update)
            if note:
                self._add(Note(note), before=answer)  # about what this answer sees, so above it
        elif isinstance(update, Streamed):
            answer.append(update.round.tokens)
            self._tally.add(update.round)
            self.figures = streaming_figures(self.figures, self._tally, update.elapsed)
        else:
            answer.finish(update.tail)
            self.figures = finished_figures(self.figures, update.stats, self._tally)
            if update.stats.finish_reason == "cancelled":
                self._add(Note("stopped; the answer so far is kept", classes="stopped"))
            elif update.stats.finish_reason == "length":
                self._add(Note(f"cut at {update.stats.generation_tokens} tokens (max tokens in settings)"))
            self.busy = ""
        self.query_one(StatsPanel).show(self.figures)

    def on_chat_screen_answer_failed(self, message: AnswerFailed) -> None:
        if self._answer is not None:
            self._answer.finish("")
        self._add(Note(f"error: {message.error}", classes="error"))
        self.busy = ""

    def _warn_unsaved(self, error: str) -> None:
        if not self._store_warned:
            self._store_warned = True
            self.notify(f"{error}; the chat goes on unsaved.", severity="warning", timeout=10)

    def watch_busy(self, busy: str) -> None:
        self.refresh_bindings()
        if not busy and self._after_busy is not None:
            action, self._after_busy = self._after_busy, None
            action()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.busy in ("answering", "measuring")
        return True

    # -- actions ---------------------------------------------------------------------

    def action_stop(self) -> None:
        """Stop generating now; what was written stays."""
        if self.busy in ("answering", "measuring"):
            self._stop.set()
            self.busy = "stopping"

    def action_new_chat(self) -> None:
        if self._when_idle(self.action_new_chat):
            return
        self._queue(self.chat.new, then=self._cleared)

    def _cleared(self, _: None) -> None:
        self._show([Note(self._welcome(), id="welcome")])
        self.figures = idle_figures(self.chat.settings)
        self.query_one(StatsPanel).show(self.figures)

    def action_history(self) -> None:
        delete = lambda conversation: self._queue(self.chat.delete, conversation)  # noqa: E731
        self.app.push_screen(HistoryScreen(self.chat.store, delete), self._open)

    def action_settings(self) -> None:
        drafters = self.chat.session.drafters
        offered = [(name, drafter_label(name) + ("" if drafters.is_loaded(name) else " (loads when first used)"))
                   for name in drafters.names]
        self.app.push_screen(SettingsScreen(self.chat.settings, offered), self._apply_settings)

    def action_toggle_highlight(self) -> None:
        self.highlight = not self.highlight

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown

    def watch_highlight(self, value: bool) -> None:
        for widget in self.query(AnswerView):
            widget.highlight = value
        self.query_one(Legend).highlight = value

    def watch_markdown(self, value: bool) -> None:
        for widget in self.query(AnswerView):
            widget.markdown = value

    def action_toggle_thinking(self) -> None:
        self.show_thinking = not self.show_thinking

    def watch_show_thinking(self, value: bool) -> None:
        for widget in self.query(AnswerView):
            widget.show_thinking = value

    def action_baseline(self) -> None:
        """Measure plain decoding (no drafter) on the last answer's prompt, for that answer's speedup."""
        if self.busy:
            self.notify("Busy: measure when the answer is done.", severity="warning")
            return
        self._stop.clear()
        self.busy = "measuring"
        self.figures = replace(self.figures, measuring=True)
        self.query_one(StatsPanel).show(self.figures)
        self.measure_baseline()

    @work(thread=True, group="mlx", exit_on_error=False)
    def measure_baseline(self) -> None:
        worker = get_current_worker()
        stop = lambda: self._stop.is_set() or worker.is_cancelled  # noqa: E731
        try:
            self.post_message(self.BaselineDone(self.mlx.call(self.chat.measure_baseline, stop)))
        except Exception as err:  # a sentence for the screen; a traceback, if any, for the log
            self.post_message(self.BaselineDone(None, str(user_error(err, "measuring plain decoding failed"))))

    def on_chat_screen_baseline_done(self, message: BaselineDone) -> None:
        baseline = message.baseline
        if baseline is not None:  # for the answer on screen: the next one starts without it
            self.figures = replace(self.figures, baseline_tps=baseline.tps)
            self.notify(f"Plain decoding: {baseline.tps:.1f} tok/s over {baseline.tokens} tokens.")
        else:
            self.notify(message.error, severity="warning")
        self.figures = replace(self.figures, measuring=False)
        self.query_one(StatsPanel).show(self.figures)
        self.busy = ""

    # -- history and settings ----------------------------------------------------

    def _open(self, conversation: int | None) -> None:
        if conversation is None:
            return
        if self._when_idle(lambda: self._open(conversation)):
            return
        self.busy = "opening"  # until it is on screen: a message sent now would be wiped
        self.reopen(conversation)

    @work(thread=True, group="mlx", exit_on_error=False)
    def reopen(self, conversation: int) -> None:
        try:
            self.post_message(self.Opened(self.mlx.call(self.chat.open, conversation)))
        except Exception as err:  # a sentence for the screen; a traceback, if any, for the log
            self.post_message(self.Opened(None, said(err, "reopening the chat failed")))

    def on_chat_screen_opened(self, message: Opened) -> None:
        self.busy = ""
        if message.reopened is None:
            self.notify(message.error, severity="error")
        else:
            self.show_conversation(message.reopened)

    def show_conversation(self, reopened: Reopened) -> None:
        """Put a reopened chat on screen, with the figures of its last answer."""
        if reopened.note:
            self.notify(reopened.note, severity="warning")
        self._show_drafter()
        widgets: list[Widget] = []
        last = None
        for message, seen in zip(reopened.conversation.messages, reopened.seen):
            if message.role == "user":
                widgets.append(UserMessage(message.content))
                if not seen:
                    widgets.append(Note("not answered: the model does not see this message"))
                continue
            widgets.append(AnswerView(message.events, message.tail, finished=True, highlight=self.highlight,
                                      markdown=self.markdown, thinking=self.chat.session.thinking,
                                      show_thinking=self.show_thinking))
            if not message.finished:
                widgets.append(Note("interrupted: the answer up to here was saved"))
            elif message.stats is not None and message.stats.finish_reason == "cancelled":
                widgets.append(Note("stopped; the answer so far is kept", classes="stopped"))
            last = message
        self._show(widgets or [Note(self._welcome(), id="welcome")])
        self._tally = Tally.of(last.rounds if last else ())  # none for answers saved before rounds were kept
        stats = last.stats if last else None
        idle = idle_figures(self.chat.settings)
        self.figures = finished_figures(idle, stats, self._tally) if stats else idle
        self.query_one(StatsPanel).show(self.figures)

    def _apply_settings(self, settings: ChatSettings | None) -> None:
        if settings is None:
            return
        self._queue(self.chat.apply_settings, settings)
        self._show_drafter(settings)
        self.notify("Settings apply from the next answer.")

    # -- helpers -------------------------------------------------------------------

    def _queue(self, work: Callable[..., T], *args: object, then: Callable[[T], None] | None = None) -> None:
        """Run Chat work on the MLX thread after all queued before it (an answer
        under way included), so the chat changes in the order the user asked;
        `then` shows its result here, and a failure is shown instead."""
        done = self.mlx.submit(work, *args)
        done.add_done_callback(lambda _: self.post_message(self.ChatDone(done, then)))

    def on_chat_screen_chat_done(self, message: ChatDone) -> None:
        try:
            result = message.done.result()
        except Exception as err:  # a sentence for the screen; a traceback, if any, for the log
            self.notify(said(err, "changing the chat failed"), severity="error")
            return
        if message.then is not None:
            message.then(result)

    def _when_idle(self, action: Callable[[], None]) -> bool:
        """If busy, stop and run `action` once idle; True when deferred."""
        if not self.busy:
            return False
        self._after_busy = action
        self.action_stop()
        return True

    def _add(self, widget: Widget, before: Widget | None = None) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        if not transcript.is_attached:  # the app is closing; a last update came in
            return
        for welcome in transcript.query("#welcome"):
            welcome.remove()
        transcript.mount(widget, before=before if before is not None and before.parent is transcript else None)

    def _show(self, widgets: list[Widget]) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.remove_children()
        transcript.mount_all(widgets)
        self._answer = None

    def _window_note(self, started: Started) -> str:
        """What fitting the context window changed for this answer, if anything."""
        window = self.chat.session.engine.context_window
        limit = started.config.max_tokens
        short = f"at most {limit} tokens long" if limit < self.chat.settings.max_tokens else ""
        if not started.dropped:
            return f"in the model's context window of {window} tokens, the answer below can be {short}" if short else ""
        oldest = "the oldest message" if started.dropped == 1 else f"the {started.dropped} oldest messages"
        return (f"to fit the model's context window of {window} tokens, the answer below does not see {oldest}"
                + (f" and can be {short}" if short else ""))

    def _show_drafter(self, settings: ChatSettings | None = None) -> None:
        """The target and drafter in the title: of `settings` when just chosen, else the chat's."""
        choice = (settings or self.chat.settings).active_drafter
        self.sub_title = f"{self.chat.session.target_name} · drafter {drafter_label(choice)}"

    def _welcome(self) -> str:
        template = "" if self.chat.session.has_chat_template else (
            "\nThis model has no chat template: the chat is sent as a plain 'User:/Assistant:' transcript.")
        return (
            f"Chatting with {self.chat.session.target_name}; drafter: "
            f"{drafter_label(self.chat.settings.active_drafter)}.{template}\n"
            "Type a message and press Enter; Esc stops an answer and keeps what was written.\n"
            "ctrl+s settings · ctrl+o history · ctrl+b measure plain decoding · ctrl+p all commands"
        )


def said(err: BaseException, doing: str) -> str:
    """What the screen says of a failure: a history error as it is, anything else as `user_error` puts it."""
    return str(err) if isinstance(err, StoreError) else str(user_error(err, doing))
