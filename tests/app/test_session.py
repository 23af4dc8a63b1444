"""The model side of the chat, without any UI: prompts, streaming, stops, cache reuse, drafter swaps."""

from __future__ import annotations

import pytest
from mlx_lm.utils import common_prefix_len

from app.session import ChatMessage, Finished, Session, Started, Streamed, in_turn, plain_transcript
from app.settings import ChatSettings
from specmlx.policy import DraftPolicy
from specmlx.diskcache.blocks import BLOCK
from specmlx.diskcache.fingerprint import Fingerprint
from specmlx.diskcache.keeper import Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.drafters import NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError

GREEDY = ChatSettings(max_tokens=24)  # with the drafter the engine came with: "noisy"


def answer(session: Session, text: str, settings: ChatSettings = GREEDY, **kwargs) -> list:
    return list(session.stream(text, settings, **kwargs))


def test_prompt_is_the_chat_template_over_the_whole_conversation(tiny_engine, wrapped):
    session = Session(tiny_engine())
    answer(session, "def add(a, b):")
    session.history.append(session.history[-1])  # any history: the prompt must cover all of it
    expected = wrapped.apply_chat_template(
        [{"role": "system", "content": "Be brief."}] + [{"role": m.role, "content": m.content} for m in session.history],
        add_generation_prompt=True,
    )
    assert session.prompt_ids("Be brief.") == list(expected)


def test_stream_reports_start_each_round_and_the_full_answer(tiny_engine):
    session = Session(tiny_engine())
    updates = answer(session, "for i in range(10):")
    started, *rounds, finished = updates
    assert isinstance(started, Started) and started.drafter == "noisy"
    assert all(isinstance(r, Streamed) for r in rounds) and isinstance(finished, Finished)
    assert [r.round for r in rounds] == session.engine.rounds[0]  # the engine's rounds, none lost or reordered
    assert finished.text == "".join(r.round.text for r in rounds) + finished.tail
    assert [m.role for m in session.history] == ["user", "assistant"]
    assert session.history[-1].content == finished.text


def test_next_turn_reuses_the_caches_of_the_previous_one(tiny_engine):
    session = Session(tiny_engine())
    first = answer(session, "The quick brown fox")[0]
    context = list(session.engine.context)  # first prompt + first answer
    second = answer(session, "jumps over the lazy dog")[0]
    prompt = session._last[0]
    assert first.reused == 0
    # The whole first prompt, at least, is not prefilled again.
    assert second.reused >= first.prompt_tokens
    assert second.reused == min(common_prefix_len(context, prompt), len(prompt) - 1)


def test_stop_keeps_what_was_emitted(tiny_engine):
    session = Session(tiny_engine())
    rounds, updates = [], []
    for update in session.stream("hello", ChatSettings(max_tokens=200), stop=lambda: len(rounds) > 0):
        updates.append(update)
        if isinstance(update, Streamed):
            rounds.append(update.round)
    finished = updates[-1]
    assert finished.stats.finish_reason == "cancelled"
    # One round went out, then the generation was closed: nothing pulled was held back.
    seen = [t for r in rounds for t in r.tokens]
    assert rounds == session.engine.rounds[0] and len(seen) == finished.stats.generation_tokens
    assert session.history[-1].content == finished.text
    # The caches hold the prompt and exactly what was emitted.
    assert session.engine.context[-len(seen):] == [e.token for e in seen]


def test_settings_choose_the_drafter_and_sampling(tiny_engine):
    session = Session(tiny_engine())
    lookup = ChatSettings(max_tokens=8, drafter="ngram", temp=0.7, top_p=0.9, policy=DraftPolicy(num_draft=2))
    started = answer(session, "hi", lookup)[0]
    assert isinstance(session.engine.drafter, PromptLookupDrafter)
    assert (started.config.sampling.temp, started.config.sampling.top_p, started.config.policy.num_draft) == (0.7, 0.9, 2)
    answer(session, "again", ChatSettings(max_tokens=8, speculation=False))
    assert isinstance(session.engine.drafter, NoDrafter)


def test_a_drafter_swapped_back_in_is_rewound_to_the_shared_context(tiny_engine):
    session = Session(tiny_engine())
    model = session.drafters.drafter("noisy")
    answer(session, "def add(a, b):")
    seen = list(session.engine.context)
    answer(session, "again", ChatSettings(max_tokens=16, drafter="none"))
    held = model.cache.length  # what "noisy" computed before it was swapped out
    # A new chat answered without "noisy": the engine's context now diverges
    # from what "noisy" holds early, right after the chat template's opening.
    session.reset()
    answer(session, "for i in range(10):", ChatSettings(max_tokens=16, drafter="none"))
    shared = common_prefix_len(seen, session.engine.context)
    assert 0 < shared < held  # the premise: "noisy" holds more than the context shares with it
    assert model.cache.length == held  # swapped out, it was left alone
    session._select("noisy")  # the engine's swap-back
    assert session.engine.drafter is model
    assert model.cache.length <= common_prefix_len(seen, session.engine.context)
    # Rewound to the shared prefix, no further: what it still holds is reused.
    assert model.cache.length == min(shared, held)
    # And it drafts on from there: the next answer is the target's own greedy one.
    updates = answer(session, "and then?", ChatSettings(max_tokens=16, policy=DraftPolicy(num_draft=4)))  # drafts every round
    prompt, last = session._last[0], updates[-1]
    plain = Engine(session.engine.target, NoDrafter(), session.engine.tokenizer)
    expected = [e.token for e in plain.generate(prompt, GenerationConfig(max_tokens=16)).token_events()]
    assert [e.token for u in updates if isinstance(u, Streamed) for e in u.round.tokens] == expected
    assert last.stats.drafter == "noisy" and last.stats.drafted > 0


def test_baseline_needs_an_answer_then_decodes_the_same_prompt_plainly(tiny_engine):
    session = Session(tiny_engine())
    with pytest.raises(SpecmlxError, match="send a message first"):
        session.measure_baseline()
    finished = answer(session, "def add(a, b):")[-1]
    baseline = session.measure_baseline()
    assert baseline.tps > 0
    assert baseline.tokens == max(finished.stats.generation_tokens, 8)
    assert isinstance(session.engine.drafter, NoDrafter)
    answer(session, "more")
    assert session.engine.drafter is session.drafters.drafter("noisy")  # the next answer speculates again


def test_speculative_turns_after_swaps_still_equal_plain_greedy_decoding(tiny_engine, target, wrapped):
    session = Session(tiny_engine())
    answer(session, "The quick brown fox")
    session.measure_baseline()
    answer(session, "jumps over", ChatSettings(max_tokens=24, drafter="ngram"))
    last = answer(session, "the lazy dog")
    plain = Engine(target, NoDrafter(), wrapped)
    expected = [e.token for e in plain.generate(session._last[0], GenerationConfig(max_tokens=24)).token_events()]
    assert [e.token for e in session.engine.tokens()] == expected
    assert isinstance(last[-1], Finished)


def test_each_update_is_one_round_and_a_stop_ends_the_answer_after_its_round(fake_engine):
    engine = fake_engine()
    session = Session(engine)
    rounds = [u.round for u in answer(session, "hi") if isinstance(u, Streamed)]
    yielded = engine.calls[0].generation.rounds
    assert len(rounds) == len(yielded) > 1
    assert all(mine is theirs for mine, theirs in zip(rounds, yielded))  # the very events, not copies
    updates = answer(session, "again", stop=lambda: True)  # asked after each round
    generation = engine.calls[1].generation
    assert [u.round for u in updates if isinstance(u, Streamed)] == generation.rounds[:1] == generation.rounds
    assert generation.closed and updates[-1].stats.finish_reason == "cancelled"


def test_without_a_chat_template_the_chat_is_a_plain_transcript(fake_engine):
    class NoTemplate:
        has_chat_template = False

        def encode(self, text):
            return [ord(c) for c in text]

    engine = fake_engine()
    engine.tokenizer = NoTemplate()
    session = Session(engine)
    list(session.stream("hi", GREEDY))
    assert plain_transcript(session.history[:1], "sys") == "sys\nUser: hi\nAssistant:"
    assert engine.calls[0].config.stop == ("\nUser:",)


def test_the_context_window_drops_the_oldest_exchanges_keeps_the_system_prompt_and_clamps(fake_engine):
    engine = fake_engine()
    session = Session(engine)
    settings = ChatSettings(max_tokens=40, system="Be brief.")
    answer(session, "first " * 10, settings)
    answer(session, "second " * 10, settings)
    session.history.append(session.history[0])  # the next question, to measure its prompts
    without_first, only_last = session.prompt_ids("Be brief.", skip=2), session.prompt_ids("Be brief.", skip=4)
    session.history.pop()
    # Room for the whole answer once the first exchange goes: only that one goes.
    engine.context_window = len(without_first) + 40
    started = answer(session, "first " * 10, settings)[0]
    assert (started.dropped, started.config.max_tokens) == (2, 40)
    assert engine.calls[-1].prompt == without_first and "Be brief." in engine.tokenizer.decode(without_first)
    # Too little room even for the new question alone: every earlier turn goes, and the answer is shortened.
    session.history[-2:] = []
    engine.context_window = len(only_last) + 29  # room for 30: the last token is never fed back
    started = answer(session, "first " * 10, settings)[0]
    assert (started.dropped, started.config.max_tokens) == (4, 30)
    assert engine.calls[-1].prompt == only_last


def test_a_message_too_long_for_the_window_is_refused_in_one_sentence(fake_engine):
    engine = fake_engine()
    engine.context_window = 20
    session = Session(engine)
    with pytest.raises(SpecmlxError, match=r"this message is too long: .* context window holds 20; shorten it"):
        answer(session, "word " * 50)
    assert not engine.calls and session.history == []  # not sent: the next message starts a clean turn
    engine.context_window = None
    answer(session, "short")
    assert [m.role for m in session.history] == ["user", "assistant"]


def test_a_stored_chat_with_unanswered_messages_continues_in_turn_order(fake_engine, turn_checking):
    """A message refused, or left when the app closed before its answer began,
    stays in the stored chat; the prompt leaves it out, as templates like
    Gemma's require turns to alternate."""
    engine = fake_engine()
    engine.tokenizer = turn_checking
    session = Session(engine)
    stored = [ChatMessage("user", "refused"), ChatMessage("user", "hello"), ChatMessage("assistant", "hi"),
              ChatMessage("user", "closed during prefill")]
    assert in_turn(stored) == [False, True, True, False]
    session.reset(stored)
    answer(session, "and now?")
    prompt = turn_checking.decode(engine.calls[0].prompt)
    assert "hello" in prompt and "and now?" in prompt
    assert "refused" not in prompt and "closed during prefill" not in prompt


def test_a_conversation_the_template_refuses_is_one_sentence(fake_engine, turn_checking):
    engine = fake_engine()
    engine.tokenizer = turn_checking
    session = Session(engine)
    session.history = [ChatMessage("user", "one"), ChatMessage("user", "two")]
    with pytest.raises(SpecmlxError, match="chat template refuses this conversation: Conversation roles must"):
        session.prompt_ids()


def test_an_answer_that_fails_midway_keeps_its_turn(fake_engine):
    """The stored chat keeps what was shown of a failed answer; so does the session."""
    engine = fake_engine()
    generate = engine.generate

    def failing(prompt, config):
        generation = generate(prompt, config)
        rounds = generation._rounds

        def one_round_then_fail():
            yield next(rounds)
            raise RuntimeError("the device went away")  # in the next round
        generation._rounds = one_round_then_fail()
        return generation

    engine.generate = failing
    session = Session(engine)
    shown = []
    with pytest.raises(RuntimeError):
        for update in session.stream("hi", GREEDY):
            if isinstance(update, Streamed):
                shown.append(update.round.text)
    assert [m.role for m in session.history] == ["user", "assistant"]
    assert session.history[-1].content == "".join(shown) and shown


def test_a_hybrid_targets_turns_reuse_at_least_the_last_prompt_but_its_end_and_equal_plain_decoding(vocab, wrapped):
    """A Qwen3.5-layout target (Gated DeltaNet and attention): each next turn starts no further back
    than the checkpoint before the last prompt's end, and answers as the target alone does."""
    from specmlx.drafters import ModelDrafter
    from specmlx.caches.recurrent import RENDERED_AGAIN

    from tests import tiny, tiny_hybrid

    from .conftest import RecordingEngine

    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    drafter = ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), vocab)
    session = Session(RecordingEngine(target, drafter, wrapped))
    starts = [answer(session, text)[0] for text in ("The quick brown fox", "jumps over", "the lazy dog")]
    for before, after in zip(starts, starts[1:]):
        assert after.reused >= before.prompt_tokens - RENDERED_AGAIN
    plain = Engine(target, NoDrafter(), wrapped)
    last = session._last[0]
    expected = [e.token for e in plain.generate(last, GenerationConfig(max_tokens=24)).token_events()]
    assert [e.token for e in session.engine.tokens()] == expected


def test_a_chat_reopened_in_a_new_session_continues_from_the_disk(tiny_engine, tmp_path):
    """Close the app, open it again and reopen the chat: its prompt comes from the disk cache, not a
    prefill, and the answer is the one a session without it gives."""
    system = "You are a careful assistant who answers in one line. " * 12
    settings = ChatSettings(max_tokens=8, system=system)
    kept = Keeper(DiskCache(tmp_path / "kept", 1 << 30), Fingerprint("tiny", "v1"))
    first = Session(tiny_engine(), disk=kept)
    answer(first, "The quick brown fox", settings)
    first.close()
    history = list(first.history)
    again = Session(tiny_engine(), disk=Keeper(DiskCache(tmp_path / "kept", 1 << 30), Fingerprint("tiny", "v1")))
    again.reset(history)
    started, *_, finished = answer(again, "jumps over the lazy dog", settings)
    again.close()
    plain = Session(tiny_engine())
    plain.reset(history)
    alone, *_, expected = answer(plain, "jumps over the lazy dog", settings)
    assert alone.reused == 0 and started.reused > BLOCK  # the system prompt and the first turn, from disk
    assert finished.text == expected.text


def test_an_answer_says_the_models_think_markers_and_whether_its_prompt_opened_the_block(target, tiny_engine):
    """Qwen3.5's template opens `<think>` in the prompt: the view splits the answer from its first token."""
    from pathlib import Path

    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from app.thinking import Thinking

    from .. import tiny

    template = (Path(__file__).parents[1] / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
    thinks = TokenizerWrapper(tiny.train_tokenizer(specials=tiny.SPECIALS + ["<think>", "</think>"],
                                                   chat_template=template))
    started = answer(Session(Engine(target, PromptLookupDrafter(), thinks)), "Hi.")[0]
    assert started.thinking == Thinking("<think>", "</think>", inside=True)
    assert answer(Session(tiny_engine()), "Hi.")[0].thinking is None  # a model that does not think
