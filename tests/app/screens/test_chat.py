"""The chat in a pilot: streaming, per-token spans, Esc, new chat, settings, history, exits."""

from __future__ import annotations

import threading

from rich.control import strip_control_codes

from app.app import SpecApp
from app.screens.chat import ChatScreen
from app.screens.loading import LoadingScreen
from app.screens.missing import MissingModelScreen
from app.session import Session
from app.settings import ChatSettings
from specmlx.policy import DraftPolicy
from app.store import Store
from app.widgets.answer import AnswerView
from app.widgets.drafter_list import ChosenButton
from app.widgets.messages import Note, UserMessage
from app.widgets.stats import StatsPanel, accepted, speedup
from specmlx.drafters import NoDrafter, PromptLookupDrafter
from specmlx.events import Source

from ..fakes import FakeDrafter
from ..helpers import answered, chat_ready, drafter_button, reopen_newest, run, send, wait_until

SIZE = (110, 34)


def chat_app(factory, **kwargs) -> SpecApp:
    return SpecApp(engine_factory=factory, cursor_blink=False, **kwargs)


def test_an_answer_streams_in_round_by_round(fake_engine):
    engine = fake_engine()
    engine.gate = threading.Semaphore(0)

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "Write a prime test")
            view = app.screen.query_one(AnswerView)
            engine.gate.release(5)  # the first round: four accepted drafts and a bonus token
            await wait_until(pilot, lambda: len(view.events) == 5, what="the first round")
            assert app.screen.busy == "answering" and not view.finished
            assert str(view.render()) == "".join(t for t, _ in engine.tokens[:5])  # partial answer on screen
            engine.gate.release(3)  # the next round: two drafts and a correction
            await wait_until(pilot, lambda: len(view.events) == 8, what="the second round")
            engine.gate.release(len(engine.tokens))
            await answered(pilot)
            assert view.text == "".join(t for t, _ in engine.tokens)
            assert app.screen.query_one(StatsPanel).figures.tokens == len(engine.tokens)
        assert len(engine.threads) == 1 and threading.get_ident() not in engine.threads  # MLX off the event loop
    run(scenario)


def test_highlighted_spans_match_the_sources_the_engine_reported(tiny_engine):
    engines = []

    def factory():
        engines.append(tiny_engine())
        return engines[-1]

    async def scenario():
        app = chat_app(factory, settings=ChatSettings(max_tokens=40, policy=DraftPolicy(num_draft=4)))  # drafts every round
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "def add(a, b):")
            await answered(pilot)
            await send(pilot, "for i in range(10):")
            await answered(pilot, 2)
            views = list(app.screen.query(AnswerView))
            assert len(views) == len(engines[0].rounds) == 2
            for i, view in enumerate(views):
                reported = engines[0].tokens(i)
                assert view.events == reported
                styles = view.token_styles()
                text = view.styled_text()
                shown = [(strip_control_codes(e.text), styles[e.source]) for e in reported]
                assert [(text.plain[s.start:s.end], s.style) for s in text.spans] == [x for x in shown if x[0]]
            figures = app.screen.query_one(StatsPanel).figures
            assert figures.reused > 0  # the second turn reused the first turn's caches
            assert figures.acceptance is not None and figures.tokens == len(engines[0].tokens(1))
            rounds = engines[0].rounds[1]  # the sparklines are the engine's rounds, as it reported them
            assert figures.accepted_per_round == tuple(r.accepted for r in rounds)
            assert figures.draft_lengths == tuple(r.num_draft for r in rounds)
            assert figures.rounds == len(rounds)
    run(scenario)


def test_esc_stops_at_once_and_keeps_what_was_written(fake_engine, data_dir):
    engine = fake_engine(endless=True, delay=0.005)

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "Go on forever")
            view = app.screen.query_one(AnswerView)
            await wait_until(pilot, lambda: len(view.events) >= 5, what="five tokens")
            await pilot.press("escape")
            await answered(pilot)
            generation = engine.calls[0].generation
            assert generation.closed and generation.stats.finish_reason == "cancelled"
            assert view.events == generation.emitted  # exactly what the engine emitted, all shown
            assert app.screen.chat.session.history[-1].content == view.text
            assert app.screen.query(Note).filter(".stopped")
            stored = app.store.load(app.screen.chat.conversation).messages[-1]
            assert stored.content == view.text and stored.stats.finish_reason == "cancelled"
    run(scenario)


def test_a_new_chat_clears_the_conversation(fake_engine, wrapped):
    engine = fake_engine()

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "first question")
            await answered(pilot)
            await pilot.press("ctrl+n")
            await wait_until(pilot, lambda: not app.screen.query(AnswerView), what="the new chat")
            assert not app.screen.query(UserMessage)
            assert app.screen.chat.session.history == [] and app.screen.chat.conversation is None
            await send(pilot, "second question")
            await answered(pilot)
            prompt = wrapped.decode(engine.calls[-1].prompt)
            assert "second question" in prompt and "first question" not in prompt
            assert len(app.store.conversations()) == 2
    run(scenario)


def test_settings_change_the_next_answers_parameters(fake_engine):
    engine = fake_engine()

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "one")
            await answered(pilot)
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#temp"), what="the settings screen")
            for name, value in [("temp", "0.7"), ("top_p", "0.9"), ("num_draft", "2"), ("max_tokens", "50")]:
                app.screen.query_one(f"#{name}").value = value
            await pilot.click("#speculation")  # speculation off
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), what="back to the chat")
            await send(pilot, "two")
            await answered(pilot, 2)
            first, second = engine.calls
            assert first.config.sampling.temp == 0 and first.config.policy.num_draft is None  # the default: auto
            assert (second.config.sampling.temp, second.config.sampling.top_p) == (0.7, 0.9)
            assert (second.config.policy.num_draft, second.config.max_tokens) == (2, 50)
            assert isinstance(second.drafter, NoDrafter)

            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#drafter"), what="the settings screen")
            await pilot.click("#speculation")  # on again, with prompt lookup
            await pilot.click(drafter_button(app.screen, "ngram"))
            app.screen.query_one("#num_draft").value = "auto"
            await pilot.click("#save")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), what="back to the chat")
            await send(pilot, "three")
            await answered(pilot, 3)
            assert isinstance(engine.calls[2].drafter, PromptLookupDrafter)
            assert engine.calls[2].config.policy.auto
    run(scenario)


def test_bad_settings_are_refused_with_a_message(fake_engine):
    async def scenario():
        app = chat_app(lambda: fake_engine())
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            screen = app.screen
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#top_p"), what="the settings screen")
            app.screen.query_one("#top_p").value = "0"
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert "top-p" in str(app.screen.query_one("#settings-error").render())
            app.screen.query_one("#top_p").value = "1"
            app.screen.query_one("#num_draft").value = "lots"
            await pilot.press("ctrl+s")
            await pilot.pause()
            error = str(app.screen.query_one("#settings-error").render())
            assert 'draft tokens: draft policy "lots": unknown part lots' in error
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen, what="back to the chat")
            assert screen.chat.settings.top_p == 1.0
    run(scenario)


def test_history_survives_a_restart(fake_engine, data_dir, wrapped):
    first, second = fake_engine(), fake_engine()

    async def before():
        app = chat_app(lambda: first)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "remember me")
            await answered(pilot)

    async def after():
        app = chat_app(lambda: second)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await reopen_newest(pilot)
            assert [u.text for u in app.screen.query(UserMessage)] == ["remember me"]
            view = app.screen.query_one(AnswerView)
            assert view.events == first.calls[0].generation.emitted and view.finished
            await send(pilot, "and now?")
            await answered(pilot, 2)
            prompt = wrapped.decode(second.calls[0].prompt)
            assert "remember me" in prompt and view.text in prompt  # the chat goes on where it was
    run(before)
    run(after)
    chats = Store(data_dir / "history.db").conversations()
    assert len(chats) == 1 and chats[0].messages == 4


def test_closing_while_generating_exits_cleanly(fake_engine, data_dir):
    engine = fake_engine(endless=True, delay=0.005)

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "never ends")
            await wait_until(pilot, lambda: len(engine.calls) and len(engine.calls[0].generation.emitted) > 3)
            await pilot.press("ctrl+q")
    run(scenario)  # returns once the worker thread is done
    generation = engine.calls[0].generation
    assert generation.closed
    answer = Store(data_dir / "history.db").load(1).messages[-1]
    assert answer.finished and answer.stats.finish_reason == "cancelled"
    assert len(answer.events) >= 3


def test_plain_decoding_is_measured_for_the_speedup_of_the_answer_on_the_same_prompt(fake_engine):
    engine = fake_engine(tps=42.0)

    async def scenario():
        app = chat_app(lambda: engine)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            panel = app.screen.query_one(StatsPanel)
            await pilot.press("ctrl+b")  # nothing to compare with yet
            await wait_until(pilot, lambda: not app.screen.busy)
            assert panel.figures.baseline_tps is None
            await send(pilot, "hi")
            await answered(pilot)
            await pilot.press("ctrl+b")
            await wait_until(pilot, lambda: panel.figures.baseline_tps is not None, what="the baseline")
            baseline = engine.calls[-1]
            assert isinstance(baseline.drafter, NoDrafter) and baseline.config.policy.num_draft == 0
            assert baseline.prompt == engine.calls[0].prompt
            assert panel.figures.baseline_tps == 42.0
            assert speedup(panel.figures).endswith("vs plain 42.0 tok/s\non the same prompt")
            await send(pilot, "a longer conversation now")
            await answered(pilot, 2)
            assert panel.figures.baseline_tps is None  # the first prompt's speed says nothing of this one
            assert speedup(panel.figures) == "n/a — press ctrl+b\nto measure"
    run(scenario)


def test_a_missing_model_says_how_to_get_one(tmp_path):
    async def scenario():
        app = SpecApp(target=str(tmp_path / "no-such-model"))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, MissingModelScreen), what="the missing-model screen")
            await wait_until(pilot, lambda: app.screen.query("#missing-commands"), what="its text")
            await pilot.pause()
            shown = "\n".join(str(w.render()) for w in app.screen.query("Static"))
            assert "no such model directory" in shown
            assert "specmlx convert" in shown and "--target DIR" in shown
            await pilot.press("q")
        assert app.return_code == 2
    run(scenario)


def test_a_corrupt_history_warns_and_the_app_still_starts(fake_engine, data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "history.db").write_bytes(b"garbage" * 500)
    notes = []

    async def scenario():
        app = chat_app(lambda: fake_engine())
        app.notify = lambda message, **kwargs: notes.append(message)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "still works")
            await answered(pilot)
    run(scenario)
    assert any("unreadable" in n for n in notes)
    assert Store(data_dir / "history.db").conversations()[0].title == "still works"


def test_startup_loads_model_directories_showing_each_step(model_dirs):
    progress = {}

    def hook(message):  # may see a message more than once, as it is dispatched
        if isinstance(message, LoadingScreen.Progress):
            progress[id(message)] = message  # kept alive, so ids are not reused

    async def scenario():
        app = SpecApp(target=str(model_dirs["target"]), drafter=str(model_dirs["drafter"]),
                      settings=ChatSettings(max_tokens=16), cursor_blink=False)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            await chat_ready(pilot)
            assert app.screen.sub_title == "target · drafter drafter"
            await send(pilot, "hi")
            await answered(pilot)
    run(scenario)
    steps = [m.step.split()[:2] for m in progress.values()]
    assert steps == [["checking", "target"], ["loading", "target"], ["loading", "drafter"], ["ready"]]


def test_an_mtp_drafted_answer_then_plain_decoding_shows_a_measured_speedup(target, target_args, vocab, wrapped):
    """A drafter that reads the target's hidden states, swapped out for the
    baseline and back: no error, and a speedup on screen."""
    from specmlx.drafters.mtp import MTPDrafter
    from specmlx.engine import Engine

    from ... import tiny

    notes = []

    async def scenario():
        app = chat_app(lambda: Engine(target, MTPDrafter(tiny.mtp(target_args, seed=3), vocab), wrapped),
                       settings=ChatSettings(max_tokens=24))
        app.notify = lambda message, **kwargs: notes.append((message, kwargs.get("severity")))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            panel = app.screen.query_one(StatsPanel)
            for _ in range(2):  # the second answer runs the MTP head again after the swap back
                await send(pilot, "def add(a, b):")
                await answered(pilot)
                await pilot.press("ctrl+b")
                await wait_until(pilot, lambda: not app.screen.busy, what="the baseline")
                assert panel.figures.baseline_tps is not None, notes
            assert "×" in speedup(panel.figures) and "vs plain" in speedup(panel.figures)
            assert not app.screen.query(".error")  # no error note in the transcript
            assert app.screen.chat.session.engine.drafter.name == "none"  # the baseline's; the next answer swaps back
    run(scenario)
    assert not [n for n in notes if n[1] in ("warning", "error")], notes


def assert_note_just_above_the_last_answer(chat: ChatScreen) -> None:
    """The context-window note is about what the answer sees: it comes before it."""
    shown = list(chat.query_one("#transcript").children)
    note = next(w for w in shown if isinstance(w, Note) and "context window" in str(w.render()))
    assert shown[shown.index(note) + 1] is list(chat.query(AnswerView))[-1], shown


def test_old_turns_that_no_longer_fit_the_context_window_are_dropped_with_a_note(fake_engine):
    engine = fake_engine()

    async def scenario():
        app = chat_app(lambda: engine, settings=ChatSettings(max_tokens=40))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "first question " * 4)
            await answered(pilot)
            first = engine.calls[-1].prompt
            engine.context_window = len(first) + 45  # the next prompt, with the first exchange, is longer
            await send(pilot, "second")
            await answered(pilot)
            notes = [str(n.render()) for n in app.screen.query(Note)]
            assert any("the answer below does not see the 2 oldest messages" in n for n in notes), notes
            assert_note_just_above_the_last_answer(app.screen)
            call = engine.calls[-1]
            assert len(call.prompt) + call.config.max_tokens - 1 <= engine.context_window
            assert "first question" not in engine.tokenizer.decode(call.prompt)
    run(scenario)


def test_an_answer_shortened_to_fit_the_context_window_says_so(fake_engine):
    engine = fake_engine()

    async def scenario():
        app = chat_app(lambda: engine, settings=ChatSettings(max_tokens=40))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            engine.context_window = 60  # the first prompt plus 40 tokens do not fit
            await send(pilot, "one question")
            await answered(pilot)
            room = engine.calls[-1].config.max_tokens
            assert room < 40
            notes = [str(n.render()) for n in app.screen.query(Note)]
            expected = f"in the model's context window of 60 tokens, the answer below can be at most {room} tokens long"
            assert expected in notes
            assert_note_just_above_the_last_answer(app.screen)
    run(scenario)


def test_a_chat_with_unanswered_messages_goes_on_once_reopened(fake_engine, turn_checking, data_dir):
    """On a template that checks turn order (Gemma's), a refused message and one
    left by closing the app before its answer began must not break the chat.
    The history's rows are those any earlier version wrote, so old chats open too."""
    first, second = fake_engine(), fake_engine()
    first.tokenizer = second.tokenizer = turn_checking

    async def before():
        app = chat_app(lambda: first)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            first.context_window = 30
            await send(pilot, "word " * 40)
            await wait_until(pilot, lambda: app.screen.query(".error"), what="the refusal")
            first.context_window = None
            await send(pilot, "short")
            await answered(pilot)
            assert "too long" in str(app.screen.query_one(".error").render())
            # As the app leaves it when closed before an answer began; on the thread that writes the history.
            app.mlx.call(app.store.add_message, app.screen.chat.conversation, "user", "closed before its answer began")

    async def after():
        app = chat_app(lambda: second)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await reopen_newest(pilot)
            assert len(app.screen.query(UserMessage)) == 3  # nothing typed is lost
            notes = [str(n.render()) for n in app.screen.query(Note)]
            assert notes.count("not answered: the model does not see this message") == 2
            await send(pilot, "next")
            await answered(pilot, 2)
            assert not app.screen.query(".error")
            prompt = turn_checking.decode(second.calls[0].prompt)
            assert "short" in prompt and "word" not in prompt and "closed before" not in prompt
    run(before)
    run(after)


def app_loading_until(engine) -> tuple[SpecApp, threading.Event]:
    """An app whose models are ready once the returned event is set."""
    loaded = threading.Event()

    def factory():
        loaded.wait(timeout=30)
        return engine
    return chat_app(factory), loaded


def test_a_message_typed_while_loading_is_sent_once_the_models_are_ready(fake_engine, wrapped):
    engine = fake_engine()
    app, loaded = app_loading_until(engine)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, LoadingScreen), what="the loading screen")
            await pilot.press(*"is 7 prime?", "enter")
            assert "sent as soon as the models are ready" in str(app.screen.query_one("#waiting").render()).lower()
            loaded.set()
            await chat_ready(pilot)
            await answered(pilot)
            assert [u.text for u in app.screen.query(UserMessage)] == ["is 7 prime?"]
            assert "is 7 prime?" in wrapped.decode(engine.calls[0].prompt)
            assert app.screen.query_one("#prompt").value == ""
    run(scenario)


def test_a_message_typed_while_loading_but_not_sent_stays_in_the_prompt(fake_engine):
    engine = fake_engine()
    app, loaded = app_loading_until(engine)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, LoadingScreen), what="the loading screen")
            await pilot.press(*"half a thou")
            loaded.set()
            await chat_ready(pilot)
            assert app.screen.query_one("#prompt").value == "half a thou" and not engine.calls
    run(scenario)


def test_the_drafter_list_starts_on_the_chosen_drafter_and_marks_it_without_colour(fake_engine):
    async def scenario():
        app = chat_app(lambda: fake_engine(), settings=ChatSettings(drafter="ngram"))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            screen = app.screen
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#drafter"), what="the settings screen")
            marks = {b.name: b.render().plain[:3] for b in app.screen.query(ChosenButton)}
            assert marks == {"fake-0.5b": "▐ ▌", "ngram": "▐●▌", "none": "▐ ▌"}  # the choice, in plain text
            app.screen.query_one("#drafter").focus()
            await pilot.press("space")  # on the chosen entry: the choice stays
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen is screen, what="back to the chat")
            assert screen.chat.settings.drafter == "ngram"
    run(scenario)


def test_every_drafter_of_the_preset_is_offered_and_loads_on_first_use(fake_engine):
    engine, loads = fake_engine(drafter=FakeDrafter("qwen-0.5b")), []

    def load_mtp():
        loads.append("mtp")
        return FakeDrafter("mtp")

    async def scenario():
        app = chat_app(lambda: Session(engine, later={"mtp": load_mtp}))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#drafter"), what="the settings screen")
            labels = [str(b.label) for b in app.screen.query(ChosenButton)]
            assert labels == ["qwen-0.5b", "mtp (loads when first used)", "prompt lookup", "none (plain decoding)"]
            await pilot.click(drafter_button(app.screen, "mtp"))
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), what="back to the chat")
            assert not loads
            for question in ("one", "two"):
                await send(pilot, question)
                await answered(pilot, 1 + (question == "two"))
            assert loads == ["mtp"] and [c.drafter.name for c in engine.calls] == ["mtp", "mtp"]
            notes = [str(n.render()) for n in app.screen.query(Note)]
            assert notes.count("loading drafter mtp for its first use…") == 1
            assert app.screen.query_one(StatsPanel).figures.drafter == "mtp"
    run(scenario)


def test_an_answer_without_drafts_says_so_instead_of_an_ellipsis(fake_engine):
    async def scenario():
        plain = [(word, Source.TARGET) for word in ("Hello", " there", ".")]  # no token was drafted
        app = chat_app(lambda: fake_engine(plain), settings=ChatSettings(speculation=False))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "hi")
            await answered(pilot)
            assert accepted(app.screen.query_one(StatsPanel).figures) == "no drafts"
    run(scenario)


def test_a_reopened_chat_keeps_its_settings(fake_engine, data_dir):
    first, second = fake_engine(), fake_engine()
    chosen = ChatSettings(temp=0.7, top_p=0.9, policy=DraftPolicy(num_draft=None), max_tokens=50, drafter="ngram", system="Be brief.")

    async def before():
        app = chat_app(lambda: first)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "one")
            await answered(pilot)
            app.screen._apply_settings(chosen)  # as the settings screen dismisses with them
            await send(pilot, "two")
            await answered(pilot, 2)

    async def after():
        app = chat_app(lambda: second)
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            assert app.screen.chat.settings == ChatSettings(drafter="fake-0.5b")  # a new chat: the defaults
            await reopen_newest(pilot)
            assert app.screen.chat.settings == chosen
            assert app.screen.sub_title.endswith("drafter prompt lookup")
            await send(pilot, "three")
            await answered(pilot, 3)
            call = second.calls[-1]
            assert (call.config.sampling.temp, call.config.max_tokens, call.config.policy.auto) == (0.7, 50, True)
            assert isinstance(call.drafter, PromptLookupDrafter)
    run(before)
    run(after)


def test_the_history_is_written_from_the_mlx_thread_alone(fake_engine, data_dir):
    """Every write (question, rounds, settings, deletion) goes through Chat on
    the MLX thread; deleting the open chat from the history makes the next
    message start a new stored chat."""
    engine, notes = fake_engine(), []

    async def scenario():
        app = chat_app(lambda: engine)
        app.notify = lambda message, **kwargs: notes.append((message, kwargs.get("severity")))
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "one")
            await answered(pilot)
            app.screen._apply_settings(ChatSettings(temp=0.5, drafter="fake-0.5b"))
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: app.screen.query("#conversations"), what="the history")
            await pilot.press("delete")  # the newest: the open chat
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.chat.conversation is None,
                             what="the open chat deleted")
            await send(pilot, "two")
            await answered(pilot, 2)
            assert app.store._writer == app.mlx._ident and engine.threads == {app.mlx._ident}
            assert [c.title for c in app.store.conversations()] == ["two"]
            assert app.store.load(app.screen.chat.conversation).settings.temp == 0.5
    run(scenario)
    assert not [n for n in notes if n[1] in ("warning", "error")], notes
