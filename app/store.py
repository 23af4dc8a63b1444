"""Chat history in SQLite: conversations and their settings, messages, answers' rounds and tokens, stats.

Writes are committed as they happen (the user's message at once, an answer
round by round, each before it is shown), so a crash or kill loses nothing
that was on screen. WAL with synchronous=NORMAL makes a commit cheap and
survives a killed process.

One thread writes: in the app, the MLX thread, where `Chat` runs, so writes
happen in the order the chat asked for them. The first write names the
writer; a write from another thread is a bug and raises RuntimeError. Reads
(the history list) may come from the event loop too: the one connection is
shared behind a lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Iterator

from specmlx.errors import SpecmlxError
from specmlx.events import RoundEvent, Source, TokenEvent
from specmlx.policy import DraftPolicy
from specmlx.stats import GenerationStats

from .settings import ChatSettings

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system TEXT NOT NULL DEFAULT '',
    settings TEXT,
    target TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    stats TEXT,
    finished INTEGER NOT NULL DEFAULT 1,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    token INTEGER NOT NULL,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    PRIMARY KEY (message_id, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rounds (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    num_draft INTEGER NOT NULL,
    drafted INTEGER NOT NULL,
    accepted INTEGER NOT NULL,
    looked_up INTEGER NOT NULL,
    probe REAL,
    PRIMARY KEY (message_id, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""
# `rounds` came after version 1 and is ignored by it, so older apps still open the file:
# `tokens` holds each round's tokens in order, `rounds.tokens` how many of them a round emitted.


class StoreError(Exception):
    """History could not be read or written; the chat goes on without it."""


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    updated: float
    messages: int


@dataclass(frozen=True)
class StoredMessage:
    """`events` are an answer's tokens; `rounds` hold the same tokens by round,
    and are empty for an answer saved before rounds were kept."""

    role: str
    content: str
    events: tuple[TokenEvent, ...] = ()
    tail: str = ""
    stats: GenerationStats | None = None
    finished: bool = True
    rounds: tuple[RoundEvent, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """`settings` is None for a chat saved before chats kept them, or unreadable ones."""

    id: int
    title: str
    system: str
    messages: tuple[StoredMessage, ...]
    settings: ChatSettings | None = None


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = path
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=5)
        self._lock = threading.Lock()
        self._writer: int | None = None  # the one thread that writes (see above)
        self._positions: dict[int, tuple[int, int]] = {}  # answer id -> next token and round positions
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open(cls, path: Path) -> tuple["Store", str | None]:
        """Open the history, or say why not and carry on: a corrupt file is moved
        aside and a new one started; if even that fails, history lives in memory."""
        try:
            return cls(path), None
        except (sqlite3.Error, OSError) as err:
            problem = err
        try:
            aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
            if path.exists():
                path.rename(aside)
            return cls(path), f"History {path} was unreadable ({problem}); kept it as {aside.name} and started a new one."
        except (sqlite3.Error, OSError) as err:
            return cls(":memory:"), f"History is unavailable ({err}); chats will not be saved this session."

    def _setup(self) -> None:
        db = self._db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"written by a newer specmlx (schema {version})")
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(check)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        with db:
            db.executescript(SCHEMA)
            # Added since version 1, and ignored by it: no new version, so older apps still open the file.
            if "settings" not in {row[1] for row in db.execute("PRAGMA table_info(conversations)")}:
                db.execute("ALTER TABLE conversations ADD COLUMN settings TEXT")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed on exit; SQLite errors become StoreError."""
        writer = threading.get_ident()
        if self._writer is None:
            self._writer = writer
        elif writer != self._writer:
            raise RuntimeError("the history is written from one thread only (in the app, the MLX thread)")
        with self._lock:
            try:
                with self._db:
                    yield self._db
            except sqlite3.Error as err:
                raise StoreError(f"cannot save history: {err}") from None

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as err:
                raise StoreError(f"cannot read history: {err}") from None

    # -- writing -----------------------------------------------------------------

    def new_conversation(self, title: str, settings: ChatSettings = ChatSettings(), target: str = "") -> int:
        now = time.time()
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, system, settings, target, created, updated) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (title, settings.system, _settings_json(settings), target, now, now),
            )
            return cursor.lastrowid

    def set_settings(self, conversation: int, settings: ChatSettings) -> None:
        with self._write() as db:
            db.execute("UPDATE conversations SET system = ?, settings = ? WHERE id = ?",
                       (settings.system, _settings_json(settings), conversation))

    def add_message(self, conversation: int, role: str, content: str) -> int:
        """A complete message (the user's), committed now."""
        return self._insert_message(conversation, role, content, finished=True)

    def begin_answer(self, conversation: int) -> int:
        """An empty assistant message that tokens are appended to as they stream."""
        message = self._insert_message(conversation, "assistant", "", finished=False)
        self._positions[message] = (0, 0)
        return message

    def add_round(self, message: int, event: RoundEvent, content: str) -> None:
        """Append one streamed round with its tokens; `content` is the answer's text so far."""
        token, position = self._positions.get(message, (0, 0))
        rows = [(message, token + i, t.token, t.text, t.source.value) for i, t in enumerate(event.tokens)]
        with self._write() as db:
            db.executemany("INSERT INTO tokens VALUES (?, ?, ?, ?, ?)", rows)
            db.execute(
                "INSERT INTO rounds (message_id, position, tokens, num_draft, drafted, accepted, looked_up, probe) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (message, position, len(rows), event.num_draft, event.drafted, event.accepted,
                 int(event.looked_up), event.probe),
            )
            db.execute("UPDATE messages SET content = ? WHERE id = ?", (content, message))
        self._positions[message] = (token + len(rows), position + 1)

    def finish_answer(self, message: int, content: str, stats: GenerationStats) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE messages SET content = ?, stats = ?, finished = 1 WHERE id = ?",
                (content, json.dumps(stats.to_dict()), message),
            )
        self._positions.pop(message, None)

    def delete(self, conversation: int) -> None:
        with self._write() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation,))

    def _insert_message(self, conversation: int, role: str, content: str, finished: bool) -> int:
        now = time.time()
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, content, finished, created) VALUES (?, ?, ?, ?, ?)",
                (conversation, role, content, int(finished), now),
            )
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation))
            return cursor.lastrowid

    # -- reading -----------------------------------------------------------------

    def conversations(self) -> list[ConversationInfo]:
        """Newest first."""
        with self._read() as db:
            rows = db.execute(
                "SELECT c.id, c.title, c.updated, COUNT(m.id) FROM conversations c "
                "LEFT JOIN messages m ON m.conversation_id = c.id GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
            ).fetchall()
        return [ConversationInfo(*row) for row in rows]

    def load(self, conversation: int) -> Conversation:
        with self._read() as db:
            head = db.execute("SELECT title, system, settings FROM conversations WHERE id = ?",
                              (conversation,)).fetchone()
            if head is None:
                raise StoreError(f"no conversation {conversation} in the history")
            rows = db.execute(
                "SELECT id, role, content, stats, finished FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation,),
            ).fetchall()
            answers = [message for message, role, *_ in rows if role == "assistant"]
            tokens = {message: db.execute("SELECT token, text, source FROM tokens WHERE message_id = ? "
                                          "ORDER BY position", (message,)).fetchall() for message in answers}
            rounds = {message: db.execute("SELECT tokens, num_draft, drafted, accepted, looked_up, probe "
                                          "FROM rounds WHERE message_id = ? ORDER BY position", (message,)).fetchall()
                      for message in answers}
        try:
            messages = tuple(_message(role, content, tokens.get(i, []), rounds.get(i, []), stats, finished)
                             for i, role, content, stats, finished in rows)
        except ValueError as err:  # a token source this version does not know
            raise StoreError(f"cannot read conversation {conversation}: {err}") from None
        return Conversation(conversation, head[0], head[1], messages, _settings(head[2], head[1]))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _message(role: str, content: str, tokens: list[tuple], rounds: list[tuple], stats: str | None,
             finished: int) -> StoredMessage:
    events = tuple(TokenEvent(token, text, Source(source)) for token, text, source in tokens)
    shown = "".join(e.text for e in events)
    tail = content[len(shown):] if content.startswith(shown) else ""
    return StoredMessage(role, content, events, tail, _stats(stats), bool(finished), _rounds(events, rounds))


def _rounds(events: tuple[TokenEvent, ...], rows: list[tuple]) -> tuple[RoundEvent, ...]:
    """The answer's rounds, its tokens dealt out to them in order; none when
    their counts do not cover the tokens (an answer saved before rounds were kept)."""
    if sum(row[0] for row in rows) != len(events):
        return ()
    out, start = [], 0
    for count, num_draft, drafted, accepted, looked_up, probe in rows:
        out.append(RoundEvent(events[start:start + count], num_draft, drafted, accepted, bool(looked_up), probe))
        start += count
    return tuple(out)


def _settings_json(settings: ChatSettings) -> str:
    """All but the system prompt, which has its own column; of the draft policy, the length that
    a chat sets (`num_draft`), as files have held it from the first version."""
    saved = {k: v for k, v in asdict(settings).items() if k not in ("system", "policy")}
    return json.dumps(saved | {"num_draft": settings.policy.num_draft})


def _settings(text: str | None, system: str) -> ChatSettings | None:
    """Settings from their JSON; None when absent or unreadable. Fields this
    version does not know are ignored; fields added since they were saved keep their defaults."""
    if not text:
        return None
    try:
        data = json.loads(text)
        known = {f.name for f in fields(ChatSettings)} - {"system", "policy"}
        policy = {"policy": DraftPolicy(num_draft=data["num_draft"])} if "num_draft" in data else {}
        return ChatSettings(**{k: v for k, v in data.items() if k in known}, **policy, system=system)
    except (ValueError, TypeError, AttributeError, SpecmlxError):
        return None


def _stats(text: str | None) -> GenerationStats | None:
    """Stats from their JSON; None when absent or written by another version.
    Fields added since keep their defaults; the automatic length's estimate is
    not shown for a stored answer, so it is not read back."""
    if not text:
        return None
    try:
        data = json.loads(text)
        values = {f.name: data[f.name] for f in fields(GenerationStats)
                  if f.name in data or f.default is MISSING}
        values["accepted_histogram"] = tuple(values["accepted_histogram"])
        values["draft_histogram"] = tuple(values.get("draft_histogram", ()))
        values["estimate"] = None
        return GenerationStats(**values)
    except (ValueError, KeyError, TypeError):
        return None
