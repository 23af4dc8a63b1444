"""The chat in a pilot: streaming, per-token spans, Esc, new chat, settings, history, exits."""

from __future__ import annotations

import threading

from rich.control import strip_control_codes

from app.app import SpecApp
from app.screens.chat import ChatScreen
from app.screens.loading import LoadingScreen
from app.screens.missing import MissingModelScreen
from app.settings import ChatSettings
from app.store import Store
from app.widgets.answer import AnswerView
from app.widgets.messages import Note, UserMessage
from app.widgets.stats import StatsPanel
from specmlx.drafters import NoDrafter, PromptLookupDrafter

from ..helpers import answered, chat_ready, run, send, wait_until

SIZE = (110, 34)


def chat_app(factory, **kwargs) -> SpecApp:
    return SpecApp(engine_factory=factory, cursor_blink=False, **kwargs)


def test_an_answer_streams_in_token_by_token(fake_engine):
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
        app = chat_app(factory, settings=ChatSettings(max_tokens=40, num_draft=4))  # drafts every round
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "def add(a, b):")
            await answered(pilot)
            await send(pilot, "for i in range(10):")
            await answered(pilot, 2)
            for view, reported in zip(app.screen.query(AnswerView), engines[0].reported):
                assert view.events == reported
                styles = view.token_styles()
                text = view.styled_text()
                shown = [(strip_control_codes(e.text), styles[e.source]) for e in reported]
                assert [(text.plain[s.start:s.end], s.style) for s in text.spans] == [x for x in shown if x[0]]
            figures = app.screen.query_one(StatsPanel).figures
            assert figures.reused > 0  # the second turn reused the first turn's caches
            assert figures.acceptance is not None and figures.tokens == len(engines[0].reported[1])
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
            assert app.screen.session.history[-1].content == view.text
            assert app.screen.query(Note).filter(".stopped")
            stored = app.store.load(app.screen.conversation).messages[-1]
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
            await pilot.pause()
            assert not app.screen.query(AnswerView) and not app.screen.query(UserMessage)
            assert app.screen.session.history == [] and app.screen.conversation is None
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
            assert first.config.sampling.temp == 0 and first.config.policy.num_draft == 4  # the default
            assert (second.config.sampling.temp, second.config.sampling.top_p) == (0.7, 0.9)
            assert (second.config.policy.num_draft, second.config.max_tokens) == (2, 50)
            assert isinstance(second.drafter, NoDrafter)

            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#ngram"), what="the settings screen")
            await pilot.click("#speculation")  # on again, with prompt lookup
            await pilot.click("#ngram")
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
            chat = app.screen
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
            assert "draft tokens (a whole number or auto): 'lots' is not a valid int" in error
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is chat, what="back to the chat")
            assert chat.settings.top_p == 1.0
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
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: app.screen.query("#conversations"), what="the history")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.screen.query(AnswerView), what="the reopened chat")
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


def test_plain_decoding_is_measured_for_the_speedup(fake_engine):
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
    from app.widgets.stats import speedup

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
            assert app.screen.session.engine.drafter.name == "none"  # the baseline's; the next answer swaps back
    run(scenario)
    assert not [n for n in notes if n[1] in ("warning", "error")], notes


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
            assert any("the 2 oldest messages no longer fit the model's context window" in n for n in notes), notes
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
            assert f"the context window of 60 tokens leaves room for an answer at most {room} tokens long" in notes
    run(scenario)
