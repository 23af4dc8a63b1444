"""The App: opens the history, loads the models, then hands over to the chat screen."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from textual.app import App, SystemCommand
from textual.screen import Screen

from specmlx.caches.kinds import KVBits
from specmlx.engine import Engine
from specmlx.mlx_thread import MLXThread
from specmlx.paths import data_dir

from .chat import Chat
from .loader import LoadFailure, ModelChoice, load_session
from .screens.chat import ChatScreen
from .screens.loading import LoadingScreen, Typed
from .screens.missing import MissingModelScreen
from .session import Session
from .settings import ChatSettings
from .store import Store

EngineFactory = Callable[[], "Engine | Session"]


class SpecApp(App[int]):
    """The chat app.

    Models come from `target`/`drafter` (as on the command line; no target
    means the default preset), or from `engine_factory`, which is
    called on the MLX thread and returns an Engine or a ready Session: tests
    and scripts inject models that way. `data_dir` holds the history
    (default: $SPECMLX_DATA_DIR or the user data directory).
    """

    CSS_PATH = "app.tcss"
    TITLE = "specmlx"
    COMMAND_PALETTE_BINDING = "ctrl+p"

    def __init__(
        self, *, target: str | None = None, drafter: str | None = None,
        engine_factory: EngineFactory | None = None, settings: ChatSettings | None = None,
        system: str = "", data_dir: Path | None = None, cursor_blink: bool = True, disk_cache: bool = True,
        kv: KVBits | None = None,
    ) -> None:
        super().__init__()
        self.choice = ModelChoice(target, drafter, disk_cache, kv)
        self.engine_factory = engine_factory
        self.initial_settings = settings
        self.system = system
        self.data_dir = data_dir
        self.cursor_blink = cursor_blink  # off in snapshot tests
        self.mlx = MLXThread()
        self.store: Store | None = None
        self.chat: Chat | None = None

    def on_mount(self) -> None:
        self.store, warning = Store.open((self.data_dir or data_dir()) / "history.db")
        if warning:
            self.notify(warning, severity="warning", timeout=15)
        loading = LoadingScreen(self._load, self.choice)
        self.push_screen(loading, lambda result: self._loaded(result, loading.held))

    def _load(self, progress: Callable[[str], None]) -> Session:
        if self.engine_factory is None:
            return load_session(self.choice, progress)
        made = self.engine_factory()
        return made if isinstance(made, Session) else Session(made)

    def _loaded(self, result: Session | LoadFailure, typed: Typed) -> None:
        if isinstance(result, LoadFailure):
            self.push_screen(MissingModelScreen(result, typed.text))
            return
        settings = self.initial_settings or ChatSettings()
        if settings.drafter not in result.drafters.names:  # None: the one loaded, by its name
            if settings.drafter is not None:
                self.notify(f"No drafter {settings.drafter!r} with these models; drafting with "
                            f"{result.default_drafter}.", severity="warning", timeout=10)
            settings = replace(settings, drafter=result.default_drafter)
        if self.system:
            settings = replace(settings, system=self.system)
        self.chat = Chat(result, self.store, settings)
        self.push_screen(ChatScreen(self.chat, self.mlx, typed))

    def action_quit_missing(self) -> None:
        self.exit(return_code=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, ChatScreen):
            for title, help, action in [
                ("New chat", "Clear the conversation (ctrl+n)", screen.action_new_chat),
                ("History", "Reopen an earlier chat (ctrl+o)", screen.action_history),
                ("Settings", "Temperature, top-p, draft tokens, drafter (ctrl+s)", screen.action_settings),
                ("Toggle token highlighting", "Accepted drafts vs target tokens (ctrl+t)", screen.action_toggle_highlight),
                ("Toggle Markdown", "Render finished answers as Markdown (ctrl+r)", screen.action_toggle_markdown),
                ("Toggle thinking", "Show a thinking model's reasoning, or fold it to a line (ctrl+g)",
                 screen.action_toggle_thinking),
                ("Measure plain decoding", "The last answer's prompt with no drafter, for its speedup (ctrl+b)",
                 screen.action_baseline),
            ]:
                yield SystemCommand(title, help, action)

    def on_unmount(self) -> None:
        # Workers are done by now. Ending the MLX thread here, not only when
        # the caller remembers to, lets the models go with the app.
        self.close_resources()

    def close_resources(self) -> None:
        """End the MLX thread and close the history; safe to call twice."""
        self.mlx.close()
        if self.chat is not None:
            self.chat.session.close()
        if self.store is not None:
            self.store.close()
            self.store = None
        self.chat = None
