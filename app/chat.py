"""One chat: its conversation with the model, its place in the history and its settings. No Textual here.

`Chat` is what a chat is apart from how it looks: its `Session` (the
conversation and the engine), the stored conversation it is saved as, and
the settings its next answer uses. It sends a message (the user's turn saved
first), saves the answer round by round as it streams, and reopens a stored
chat.

Its methods run MLX work and write the history, so all of them run on the
app's MLX thread (`specmlx.mlx_thread`), one at a time, in the order they
were queued: that thread alone writes the store. Its attributes hold
immutable values (ids, frozen settings), which other threads may read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

from .recorder import AnswerRecorder
from .session import Baseline, ChatMessage, Session, Update, in_turn
from .settings import ChatSettings, drafter_label
from .store import Conversation, Store, StoreError


@dataclass(frozen=True)
class Unsaved:
    """Writing the history failed: the chat goes on, this message or answer unsaved."""

    error: str


@dataclass(frozen=True)
class Reopened:
    """A stored chat, continued: its messages, which of them the model sees
    (the others were never answered), and why its settings changed, if they did."""

    conversation: Conversation
    seen: tuple[bool, ...]
    note: str = ""


class Chat:
    def __init__(self, session: Session, store: Store, settings: ChatSettings) -> None:
        self.session = session
        self.store = store
        self.settings = settings  # for the next answer
        self.conversation: int | None = None  # the stored chat; None until the first message

    def send(self, text: str, stop: Callable[[], bool] = lambda: False) -> Iterator[Update | Unsaved]:
        """Answer `text` with the current settings, as `Session.stream` does.

        The user's turn is saved first, and each update is saved before it is
        handed on; a failed write is reported once as `Unsaved`, and the rest
        of that answer is not saved. A message the session refuses (it raises)
        stays in the stored chat, and never in a prompt (`in_turn`).
        """
        error = self._save_user(text)
        if error:
            yield Unsaved(error)
        record = AnswerRecorder(self.store, None if error else self.conversation)
        stream = self.session.stream(text, self.settings, stop)
        try:
            for update in stream:
                try:
                    record.save(update)
                except StoreError as err:
                    record.conversation = None  # stop writing this answer; keep answering
                    yield Unsaved(str(err))
                yield update
        finally:
            stream.close()  # a stop or a failure: the session keeps what was emitted

    def open(self, conversation: int) -> Reopened:
        """Continue the stored chat `conversation` with the settings it was using;
        its prompt is prefilled anew with the next answer. Raises StoreError."""
        stored = self.store.load(conversation)
        history = [ChatMessage(m.role, m.content) for m in stored.messages]
        self.session.reset(history)
        self.settings, note = self._restored(stored)
        self.conversation = stored.id
        return Reopened(stored, tuple(in_turn(history)), note)

    def new(self) -> None:
        """Start over; the new chat is saved with its first message. The caches
        stay: a new chat with the same system prompt still shares its prefix."""
        self.session.reset()
        self.conversation = None

    def apply_settings(self, settings: ChatSettings) -> None:
        """Settings from the next answer on, saved with the chat. Raises
        StoreError when they could not be saved; they apply all the same."""
        self.settings = settings
        if self.conversation is not None:
            self.store.set_settings(self.conversation, settings)

    def delete(self, conversation: int) -> None:
        """Delete a stored chat. If it is this one, the conversation goes on
        and its next message starts a new stored chat. Raises StoreError."""
        self.store.delete(conversation)
        if conversation == self.conversation:
            self.conversation = None

    def measure_baseline(self, stop: Callable[[], bool] = lambda: False) -> Baseline:
        """Plain decoding on the last answer's prompt (`Session.measure_baseline`)."""
        return self.session.measure_baseline(stop)

    def _save_user(self, text: str) -> str:
        """Save the user's turn, the stored chat begun with the first one; why not, if not."""
        try:
            if self.conversation is None:
                self.conversation = self.store.new_conversation(text[:60], self.settings, self.session.target_name)
            self.store.add_message(self.conversation, "user", text)
        except StoreError as err:
            return str(err)
        return ""

    def _restored(self, stored: Conversation) -> tuple[ChatSettings, str]:
        """A stored chat's settings, and a note if they had to change. A chat
        saved before chats kept settings takes the current ones with its own
        system prompt; a drafter these models do not offer, the current one."""
        settings = stored.settings or replace(self.settings, system=stored.system)
        if settings.drafter in self.session.drafters.names:
            return settings, ""
        note = (f"This chat drafted with {settings.drafter}, which these models do not offer; "
                f"it goes on with {drafter_label(self.settings.drafter)}.")
        return replace(settings, drafter=self.settings.drafter), note
