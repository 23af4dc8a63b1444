"""The chat: transcript, prompt, stats and legend; answers stream in from a worker.

Workers hand MLX work to the app's MLX thread, commit each round to the
history, and only then post it here as a message: widgets are touched on
the event loop alone, and nothing on screen is missing from the history.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable

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

from specmlx.drafters import NONE
from specmlx.log import user_error
from specmlx.stats import GenerationStats

from specmlx.mlx_thread import MLXThread
from ..recorder import AnswerRecorder
from ..session import Baseline, ChatMessage, Session, Started, Streamed, Update, in_turn
from ..settings import ChatSettings, drafter_label
from ..store import Conversation, Store, StoreError
from ..tally import Tally
from ..widgets.answer import AnswerView
from ..widgets.legend import Legend
from ..widgets.messages import Note, UserMessage
from ..widgets.stats import Figures, StatsPanel
from .history import HistoryScreen
from .loading import Typed
from .settings import SettingsScreen


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+o", "history", "History"),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+t", "toggle_highlight", "Highlight"),
        Binding("ctrl+r", "toggle_markdown", "Markdown"),
        Binding("ctrl+b", "baseline", "Baseline"),
    ]

    busy: reactive[str] = reactive("")  # "", "answering", "measuring" or "stopping"
    highlight: reactive[bool] = reactive(True)
    markdown: reactive[bool] = reactive(False)

    class AnswerUpdate(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, update: Update) -> None:
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

    class StoreFailed(Message):
        bubble = False  # handled by this screen alone

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, session: Session, store: Store, mlx: MLXThread, settings: ChatSettings,
                 typed: Typed = Typed()) -> None:
        super().__init__()
        self.session = session
        self.store = store
        self.mlx = mlx
        self.settings = settings
        self.typed = typed  # from the loading screen
        self.conversation: int | None = None  # created with the first message
        self.baseline_tps: float | None = None  # plain decoding on the last answer's prompt; None: not measured
        self.figures = self._idle_figures()
        self._answer: AnswerView | None = None
        self._tally = Tally()
        self._first_round = 0  # tokens of the answer's first round, left out of the live tokens/s
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
        self._save_user(text)
        self._add(UserMessage(text))
        drafter = self.settings.active_drafter
        if not self.session.drafters.is_loaded(drafter):
            self._add(Note(f"loading drafter {drafter_label(drafter)} for its first use…"))
        self._answer = AnswerView(highlight=self.highlight, markdown=self.markdown)
        self._add(self._answer)
        self._tally = Tally()
        self._stop.clear()
        self.baseline_tps = None  # measured on the last answer's prompt: not this one's
        self.busy = "answering"
        self.run_answer(text, self.settings, self.conversation)

    @work(thread=True, group="mlx", exit_on_error=False)
    def run_answer(self, text: str, settings: ChatSettings, conversation: int | None) -> None:
        worker = get_current_worker()
        stop = lambda: self._stop.is_set() or worker.is_cancelled  # noqa: E731
        record = AnswerRecorder(self.store, conversation)
        try:
            for update in self.mlx.iterate(self.session.stream(text, settings, stop)):
                try:
                    record.save(update)
                except StoreError as err:
                    record.conversation = None  # stop writing this answer; keep chatting
                    self.post_message(self.StoreFailed(str(err)))
                self.post_message(self.AnswerUpdate(update))  # after the commit
        except Exception as err:  # an engine or MLX failure ends this answer, not the app
            self.post_message(self.AnswerFailed(str(user_error(err, "the answer failed"))))

    def _saving(self, write: Callable, *args) -> object | None:
        """A history write from the event loop; on failure, a warning and None."""
        try:
            return write(*args)
        except StoreError as err:
            self.post_message(self.StoreFailed(str(err)))
            return None

    def on_chat_screen_answer_update(self, message: AnswerUpdate) -> None:
        update, answer = message.update, self._answer
        if isinstance(update, Started):
            self.figures = replace(
                self._idle_figures(), prompt_tokens=update.prompt_tokens, reused=update.reused,
                drafter=drafter_label(update.drafter),
                draft="off" if update.drafter == NONE else
                "auto" if update.config.policy.auto else str(update.config.policy.num_draft),
            )
            note = self._window_note(update)
            if note:
                self._add(Note(note), before=answer)  # about what this answer sees, so above it
        elif isinstance(update, Streamed):
            answer.append(update.round.tokens)
            if not self._tally.rounds:  # the first round also paid for the prefill: not counted
                self._first_round = len(update.round.tokens)
            self._tally.add(update.round)
            decoded = self._tally.tokens - self._first_round
            tps = decoded / update.elapsed if decoded and update.elapsed > 0 else None
            self.figures = replace(
                self.figures, tokens=self._tally.tokens, tps=tps, mean_accepted=self._tally.mean_accepted,
                rounds=self._tally.rounds, accepted_per_round=tuple(self._tally.accepted_per_round),
                draft_lengths=tuple(self._tally.draft_lengths),
            )
        else:
            answer.finish(update.tail)
            self.figures = self._final_figures(update.stats, self._tally)
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

    def on_chat_screen_store_failed(self, message: StoreFailed) -> None:
        if not self._store_warned:
            self._store_warned = True
            self.notify(f"{message.error}; the chat goes on unsaved.", severity="warning", timeout=10)

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
        self.session.reset()
        self.conversation = None
        self._show([Note(self._welcome(), id="welcome")])
        self.figures = self._idle_figures()
        self.query_one(StatsPanel).show(self.figures)

    def action_history(self) -> None:
        self.app.push_screen(HistoryScreen(self.store), self._open)

    def action_settings(self) -> None:
        drafters = self.session.drafters
        offered = [(name, drafter_label(name) + ("" if drafters.is_loaded(name) else " (loads when first used)"))
                   for name in drafters.names]
        self.app.push_screen(SettingsScreen(self.settings, offered), self._apply_settings)

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
            self.post_message(self.BaselineDone(self.mlx.call(self.session.measure_baseline, stop)))
        except Exception as err:  # a sentence for the screen; a traceback, if any, for the log
            self.post_message(self.BaselineDone(None, str(user_error(err, "measuring plain decoding failed"))))

    def on_chat_screen_baseline_done(self, message: BaselineDone) -> None:
        if message.baseline is not None:
            self.baseline_tps = message.baseline.tps
            self.notify(f"Plain decoding: {message.baseline.tps:.1f} tok/s over {message.baseline.tokens} tokens.")
        else:
            self.notify(message.error, severity="warning")
        self.figures = replace(self.figures, measuring=False, baseline_tps=self.baseline_tps)
        self.query_one(StatsPanel).show(self.figures)
        self.busy = ""

    # -- history and settings ----------------------------------------------------

    def _open(self, conversation: int | None) -> None:
        if conversation is None:
            self._forget_if_deleted()
            return
        if self._when_idle(lambda: self._open(conversation)):
            return
        try:
            stored = self.store.load(conversation)
        except StoreError as err:
            self.notify(str(err), severity="error")
            return
        self.show_conversation(stored)

    def _forget_if_deleted(self) -> None:
        """The open chat was deleted in the history: the next message starts a new one."""
        try:
            if self.conversation is not None and self.conversation not in {c.id for c in self.store.conversations()}:
                self.conversation = None
        except StoreError:
            pass

    def show_conversation(self, stored: Conversation) -> None:
        """Put a stored chat on screen and continue it (its prompt is prefilled anew)
        with the settings it was using."""
        history = [ChatMessage(m.role, m.content) for m in stored.messages]
        self.session.reset(history)
        self._restore_settings(stored)
        self.conversation = stored.id
        self.baseline_tps = None
        widgets: list[Widget] = []
        self._tally, stats = Tally(), None
        for message, kept in zip(stored.messages, in_turn(history)):
            if message.role == "user":
                widgets.append(UserMessage(message.content))
                if not kept:
                    widgets.append(Note("not answered: the model does not see this message"))
                continue
            widgets.append(AnswerView(message.events, message.tail, finished=True,
                                      highlight=self.highlight, markdown=self.markdown))
            if not message.finished:
                widgets.append(Note("interrupted: the answer up to here was saved"))
            elif message.stats is not None and message.stats.finish_reason == "cancelled":
                widgets.append(Note("stopped; the answer so far is kept", classes="stopped"))
            self._tally = Tally.of(message.rounds)  # none for answers saved before rounds were kept
            stats = message.stats
        self._show(widgets or [Note(self._welcome(), id="welcome")])
        self.figures = self._final_figures(stats, self._tally) if stats else self._idle_figures()
        self.query_one(StatsPanel).show(self.figures)

    def _restore_settings(self, stored: Conversation) -> None:
        """The stored chat's settings; a chat saved before chats kept them takes
        the current ones, with its own system prompt."""
        settings = stored.settings or replace(self.settings, system=stored.system)
        if settings.drafter not in self.session.drafters.names:
            self.notify(f"This chat drafted with {settings.drafter}, which these models do not offer; "
                        f"it goes on with {drafter_label(self.settings.drafter)}.", severity="warning")
            settings = replace(settings, drafter=self.settings.drafter)
        self.settings = settings
        self._show_drafter()

    def _apply_settings(self, settings: ChatSettings | None) -> None:
        if settings is None:
            return
        if self.conversation is not None:
            self._saving(self.store.set_settings, self.conversation, settings)
        self.settings = settings
        self._show_drafter()
        self.notify("Settings apply from the next answer.")

    def _save_user(self, text: str) -> None:
        """The user's message is committed before anything else happens."""
        if self.conversation is None:
            self.conversation = self._saving(
                self.store.new_conversation, text[:60], self.settings, self.session.target_name)
        if self.conversation is not None:
            self._saving(self.store.add_message, self.conversation, "user", text)

    # -- helpers -------------------------------------------------------------------

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
        window = self.session.engine.context_window
        limit = started.config.max_tokens
        short = f"at most {limit} tokens long" if limit < self.settings.max_tokens else ""
        if not started.dropped:
            return f"in the model's context window of {window} tokens, the answer below can be {short}" if short else ""
        oldest = "the oldest message" if started.dropped == 1 else f"the {started.dropped} oldest messages"
        return (f"to fit the model's context window of {window} tokens, the answer below does not see {oldest}"
                + (f" and can be {short}" if short else ""))

    def _show_drafter(self) -> None:
        self.sub_title = f"{self.session.target_name} · drafter {drafter_label(self.settings.active_drafter)}"

    def _idle_figures(self) -> Figures:
        choice = self.settings.active_drafter
        return Figures(
            drafter=drafter_label(choice), draft="off" if choice == NONE else self.settings.draft_label,
            baseline_tps=self.baseline_tps,
        )

    def _final_figures(self, stats: GenerationStats, tally: Tally) -> Figures:
        """The engine's own numbers; the per-round sparklines come from the rounds."""
        drafted = stats.drafter != NONE
        draft = ("auto" if stats.auto else str(stats.num_draft)) if drafted else "off"  # as this answer ran
        return replace(
            self.figures, drafter=drafter_label(stats.drafter), tokens=stats.generation_tokens,
            tps=stats.generation_tps, acceptance=stats.acceptance_rate if stats.drafted else None,
            mean_accepted=stats.mean_accepted, draft=draft, rounds=stats.rounds,
            accepted_per_round=tuple(tally.accepted_per_round), draft_lengths=tuple(tally.draft_lengths),
            baseline_tps=self.baseline_tps, measuring=False, finished=True,
        )

    def _welcome(self) -> str:
        template = "" if self.session.has_chat_template else (
            "\nThis model has no chat template: the chat is sent as a plain 'User:/Assistant:' transcript.")
        return (
            f"Chatting with {self.session.target_name}; drafter: "
            f"{drafter_label(self.settings.active_drafter)}.{template}\n"
            "Type a message and press Enter; Esc stops an answer and keeps what was written.\n"
            "ctrl+s settings · ctrl+o history · ctrl+b measure plain decoding · ctrl+p all commands"
        )
