"""History in SQLite: round trips, crash safety, corrupt files, where it lives."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from app.settings import ChatSettings
from specmlx.policy import DraftPolicy
from app.store import SCHEMA, Store
from specmlx.events import RoundEvent, Source, TokenEvent
from specmlx.stats import GenerationStats

EVENTS = [TokenEvent(5, "def", Source.DRAFT), TokenEvent(6, " add", Source.CORRECTED),
          TokenEvent(7, "", Source.DRAFT), TokenEvent(8, "(a", Source.BONUS), TokenEvent(9, ")", Source.TARGET)]
ROUNDS = [RoundEvent(tuple(EVENTS[:2]), num_draft=4, drafted=4, accepted=1),
          RoundEvent(tuple(EVENTS[2:4]), num_draft=1, drafted=1, accepted=1, looked_up=True),
          RoundEvent(tuple(EVENTS[4:]), num_draft=0, drafted=0, accepted=0, probe=0.25),
          RoundEvent((), num_draft=2, drafted=2, accepted=0)]  # end of sequence first: a round that emitted nothing
STATS = GenerationStats(
    drafter="noisy", num_draft=4, prompt_tokens=30, generation_tokens=5, rounds=3, drafted=12, accepted=2,
    accepted_histogram=(1, 2, 0, 0, 0), target_forwards=3, host_syncs=3, prefill_s=0.1, decode_s=0.5,
    draft_s=0.0, verify_s=0.4, profiled=False, finish_reason="eos",
)


def test_a_conversation_round_trips_with_sources_and_stats(tmp_path):
    store = Store(tmp_path / "h.db")
    chat = store.new_conversation("add two numbers", ChatSettings(system="Be brief."), target="tiny")
    store.add_message(chat, "user", "def add")
    answer = store.begin_answer(chat)
    shown = ""
    for event in ROUNDS:
        shown += event.text
        store.add_round(answer, event, shown)
    store.finish_answer(answer, "def add(a)\n", STATS)
    store.close()

    loaded = Store(tmp_path / "h.db").load(chat)
    assert (loaded.title, loaded.system) == ("add two numbers", "Be brief.")
    user, assistant = loaded.messages
    assert (user.role, user.content) == ("user", "def add")
    assert list(assistant.events) == EVENTS
    assert list(assistant.rounds) == ROUNDS  # each round as the engine reported it
    assert assistant.tail == "\n" and assistant.finished
    assert assistant.stats == STATS


def test_conversations_are_listed_newest_first_and_deleted_whole(tmp_path):
    store = Store(tmp_path / "h.db")
    old, new = store.new_conversation("old"), store.new_conversation("new")
    store.add_message(old, "user", "x")  # touching a chat makes it the newest
    assert [c.title for c in store.conversations()] == ["old", "new"]
    answer = store.begin_answer(old)
    store.add_round(answer, ROUNDS[0], "...")
    store.delete(old)
    assert [c.id for c in store.conversations()] == [new]
    for table in ("tokens", "rounds"):
        assert store._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0


KILLED_WRITER = """
import os, signal, sys
from app.settings import ChatSettings
from app.store import Store
from specmlx.events import RoundEvent, Source, TokenEvent
store = Store(sys.argv[1])
chat = store.new_conversation("crash")
store.add_message(chat, "user", "hello")
answer = store.begin_answer(chat)
store.add_round(answer, RoundEvent((TokenEvent(1, "Hel", Source.DRAFT), TokenEvent(2, "lo", Source.CORRECTED)),
                                   num_draft=4, drafted=4, accepted=1), "Hello")
store.add_round(answer, RoundEvent((TokenEvent(3, "!", Source.TARGET),), num_draft=0, drafted=0, accepted=0),
                "Hello!")
os.kill(os.getpid(), signal.SIGKILL)  # no close, no finish: a kill mid-answer
"""


def test_a_kill_mid_answer_loses_nothing_already_committed(tmp_path):
    path = tmp_path / "h.db"
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], cwd=root, check=False)
    store, warning = Store.open(path)
    assert warning is None
    user, answer = store.load(store.conversations()[0].id).messages
    assert user.content == "hello"
    assert answer.content == "Hello!" and not answer.finished and answer.stats is None
    assert [(e.text, e.source) for e in answer.events] == [("Hel", Source.DRAFT), ("lo", Source.CORRECTED),
                                                          ("!", Source.TARGET)]
    assert [(len(r.tokens), r.accepted) for r in answer.rounds] == [(2, 1), (1, 0)]


def test_a_corrupt_history_is_kept_aside_with_a_warning(tmp_path):
    path = tmp_path / "h.db"
    path.write_bytes(b"this is not a database" * 100)
    store, warning = Store.open(path)
    assert "unreadable" in warning
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("h.db.unreadable-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")
    store.new_conversation("works again")
    assert [c.title for c in store.conversations()] == ["works again"]


def test_an_unusable_location_falls_back_to_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    store, warning = Store.open(blocker / "h.db")
    assert "will not be saved" in warning
    store.new_conversation("in memory")
    assert len(store.conversations()) == 1


def test_a_chat_keeps_its_settings_and_a_file_from_before_gains_the_column(tmp_path):
    path = tmp_path / "h.db"
    old = sqlite3.connect(path)  # the first version's file: no settings column
    old.executescript(SCHEMA.replace("    settings TEXT,\n", "") + "PRAGMA user_version=1;")
    old.execute("INSERT INTO conversations (title, system, created, updated) VALUES ('old', 'Be brief.', 0, 0)")
    old.commit()
    old.close()
    store = Store(path)
    before = store.load(1)
    assert before.settings is None and before.system == "Be brief."
    chosen = ChatSettings(temp=0.7, policy=DraftPolicy(num_draft=None), drafter="mtp", speculation=False, system="Be kind.")
    store.set_settings(1, chosen)
    chat = store.new_conversation("new", chosen)
    assert store.load(1).settings == chosen and store.load(chat).settings == chosen
    store._db.execute("UPDATE conversations SET settings = '{\"temp\": -1}' WHERE id = ?", (chat,))
    assert store.load(chat).settings is None  # unreadable: the chat still opens


def test_an_answer_saved_before_rounds_were_kept_opens_with_its_tokens_and_no_rounds(tmp_path):
    path = tmp_path / "h.db"
    old = sqlite3.connect(path)  # as the version before rounds wrote an answer: tokens only
    old.executescript(SCHEMA + "PRAGMA user_version=1;")
    old.execute("INSERT INTO conversations (title, system, created, updated) VALUES ('old', '', 0, 0)")
    old.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'assistant', 'def add', 0)")
    old.executemany("INSERT INTO tokens VALUES (1, ?, ?, ?, ?)",
                    [(i, e.token, e.text, e.source.value) for i, e in enumerate(EVENTS[:2])])
    old.commit()
    old.close()
    (answer,) = Store(path).load(1).messages
    assert list(answer.events) == EVENTS[:2] and answer.rounds == ()


def test_the_store_is_written_from_one_thread_and_read_from_any(tmp_path):
    store = Store(tmp_path / "h.db")
    chat = store.new_conversation("mine")  # the first write names the writer
    outcome = {}

    def elsewhere():
        outcome["read"] = [c.title for c in store.conversations()]
        try:
            store.add_message(chat, "user", "from another thread")
        except RuntimeError as err:
            outcome["write"] = str(err)
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert outcome == {"read": ["mine"], "write": "the history is written from one thread only (in the app, "
                                                  "the MLX thread)"}
    store.add_message(chat, "user", "from the writer")
    assert [m.content for m in store.load(chat).messages] == ["from the writer"]
