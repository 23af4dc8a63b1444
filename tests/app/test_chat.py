"""One chat without any UI, on the scripted engine: send, save, record, reopen, stop, refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.chat import Chat, Unsaved
from app.session import Finished, Session, Started, Streamed
from app.settings import ChatSettings
from app.store import Store
from specmlx.drafters import PromptLookupDrafter
from specmlx.errors import SpecmlxError

from .fakes import FakeDrafter

SETTINGS = ChatSettings(max_tokens=40, drafter="fake-0.5b")


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "history.db")
    yield store
    store.close()


def chat_on(engine, store: Store, settings: ChatSettings = SETTINGS) -> Chat:
    return Chat(Session(engine, target_name="fake"), store, settings)


def test_send_saves_the_users_turn_first_then_each_round_before_handing_it_on(fake_engine, store):
    engine = fake_engine()
    chat = chat_on(engine, store)
    updates = chat.send("is 7 prime?")
    started = next(updates)
    assert isinstance(started, Started)
    saved = store.load(chat.conversation)  # before any round: the question is in
    assert (saved.title, saved.settings) == ("is 7 prime?", SETTINGS)
    assert [(m.role, m.content, m.finished) for m in saved.messages] == [("user", "is 7 prime?", True),
                                                                         ("assistant", "", False)]
    rounds = []
    for update in updates:
        if isinstance(update, Streamed):
            rounds.append(update.round)
            answer = store.load(chat.conversation).messages[-1]
            assert answer.rounds == tuple(rounds) and not answer.finished  # saved as it is handed on
    finished = update
    assert isinstance(finished, Finished) and rounds == engine.calls[0].generation.rounds
    answer = store.load(chat.conversation).messages[-1]
    assert answer.finished and answer.content == finished.text and answer.stats == finished.stats


def test_a_reopened_chat_goes_on_where_it_was_with_its_settings(fake_engine, store, wrapped):
    first = chat_on(fake_engine(), store, ChatSettings(temp=0.7, max_tokens=30, drafter="ngram", system="Be brief."))
    list(first.send("remember me"))
    answered = first.session.history[-1].content
    engine = fake_engine()
    later = chat_on(engine, store)  # the app started again
    reopened = later.open(first.conversation)
    assert later.conversation == first.conversation and reopened.seen == (True, True)
    assert later.settings == first.settings and reopened.note == ""
    assert [m.content for m in reopened.conversation.messages] == ["remember me", answered]
    list(later.send("and now?"))
    prompt = wrapped.decode(engine.calls[0].prompt)
    assert "remember me" in prompt and answered in prompt and "Be brief." in prompt
    assert isinstance(engine.calls[0].drafter, PromptLookupDrafter) and engine.calls[0].config.sampling.temp == 0.7
    assert [c.messages for c in store.conversations()] == [4]  # the same stored chat, not a new one


def test_a_chat_reopened_with_a_drafter_these_models_lack_goes_on_with_the_current_one(fake_engine, store):
    first = chat_on(fake_engine(drafter=FakeDrafter("mtp")), store, ChatSettings(drafter="mtp"))
    list(first.send("hi"))
    later = chat_on(fake_engine(), store)
    reopened = later.open(first.conversation)
    assert later.settings.drafter == "fake-0.5b"
    assert reopened.note.startswith("This chat drafted with mtp, which these models do not offer")


def test_stop_mid_answer_keeps_what_was_emitted_in_the_chat_and_the_history(fake_engine, store):
    engine = fake_engine(endless=True)
    chat = chat_on(engine, store, ChatSettings(max_tokens=1000, drafter="fake-0.5b"))
    rounds = []
    for update in chat.send("go on forever", stop=lambda: len(rounds) >= 3):
        if isinstance(update, Streamed):
            rounds.append(update.round)
    generation = engine.calls[0].generation
    assert generation.closed and update.stats.finish_reason == "cancelled"
    assert generation.rounds == rounds  # the stop came between rounds: nothing emitted is lost
    text = "".join(r.text for r in rounds)
    assert chat.session.history[-1].content == text
    answer = store.load(chat.conversation).messages[-1]
    assert (answer.content, answer.rounds, answer.finished) == (text, tuple(rounds), True)
    assert answer.stats.finish_reason == "cancelled"


def test_a_refused_message_stays_in_the_history_and_out_of_the_prompt(fake_engine, store, turn_checking):
    """The existing rule for unanswered messages: kept in the stored chat,
    marked, and left out of every prompt, so turns still alternate (Gemma's check)."""
    engine = fake_engine()
    engine.tokenizer = turn_checking
    chat = chat_on(engine, store)
    engine.context_window = 20
    with pytest.raises(SpecmlxError, match="this message is too long"):
        list(chat.send("word " * 50))
    assert chat.session.history == [] and not engine.calls
    engine.context_window = None
    list(chat.send("short"))
    prompt = turn_checking.decode(engine.calls[0].prompt)
    assert "short" in prompt and "word" not in prompt
    stored = store.load(chat.conversation)
    assert [m.role for m in stored.messages] == ["user", "user", "assistant"]  # nothing typed is lost
    assert chat_on(fake_engine(), store).open(chat.conversation).seen == (False, True, True)


def test_a_new_chat_is_stored_apart_and_the_old_one_keeps_its_settings(fake_engine, store, wrapped):
    engine = fake_engine()
    chat = chat_on(engine, store)
    list(chat.send("first question"))
    old = chat.conversation
    chat.apply_settings(ChatSettings(temp=0.5, drafter="fake-0.5b"))
    chat.new()
    assert chat.conversation is None and chat.session.history == []
    chat.apply_settings(ChatSettings(temp=0.9, drafter="fake-0.5b"))  # nothing stored to save them with yet
    list(chat.send("second question"))
    assert "first question" not in wrapped.decode(engine.calls[-1].prompt)
    assert chat.conversation != old and len(store.conversations()) == 2
    assert store.load(old).settings.temp == 0.5 and store.load(chat.conversation).settings.temp == 0.9


def test_deleting_the_open_chat_starts_a_new_stored_one_with_the_next_message(fake_engine, store):
    chat = chat_on(fake_engine(), store)
    list(chat.send("one"))
    other = store.conversations()[0].id
    chat.new()
    list(chat.send("two"))
    chat.delete(other)  # another chat: this one is untouched
    assert chat.conversation is not None and [c.id for c in store.conversations()] == [chat.conversation]
    chat.delete(chat.conversation)
    assert chat.conversation is None and store.conversations() == []
    list(chat.send("three"))
    (stored,) = store.conversations()
    assert stored.title == "three" and stored.messages == 2
    assert [m.content for m in chat.session.history if m.role == "user"] == ["two", "three"]  # the talk goes on


def test_a_history_that_fails_says_so_once_and_the_answer_goes_on(fake_engine, store):
    chat = chat_on(fake_engine(), store)
    updates = chat.send("hello")
    assert isinstance(next(updates), Started)
    store._db.close()  # the disk went away mid-answer
    rest = list(updates)
    unsaved = [u for u in rest if isinstance(u, Unsaved)]
    assert len(unsaved) == 1 and "cannot save history" in unsaved[0].error
    assert isinstance(rest[-1], Finished) and rest[-1].text == chat.session.history[-1].content
    again = list(chat.send("again"))
    assert isinstance(again[0], Unsaved) and isinstance(again[-1], Finished)  # its question unsaved, answered


def test_chat_knows_nothing_of_textual():
    code = "import sys, app.chat; print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
