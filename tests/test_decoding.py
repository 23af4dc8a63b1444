"""A generation's state (`decoding.Decoding`) on hand-made rounds, no model: what it commits,
emits and counts, and the stats it closes into."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.config import GenerationConfig
from specmlx.decoding import Decoding
from specmlx.drafters import NoDrafter
from specmlx.events import Source
from specmlx.plan import Plan, Round
from specmlx.policy import START_DRAFT, DraftPolicy
from specmlx.schedule import AutoDraft, DraftLength

EOS = 2
PROMPT = [7, 8, 9]


class FakeEngine:
    """An engine's parts a state reads, with no model: prefill only takes the prompt as the context."""

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer, self.eos_token_ids, self.drafter = tokenizer, frozenset({EOS}), NoDrafter()
        self.context: list[int] = []

    def prefill(self, prompt: list[int], drafter: bool = True, images=None) -> None:
        self.context = prompt

    def constrain(self, grammar):
        return None


def prefilled(config: GenerationConfig, tokenizer=None, schedule=None) -> Decoding:
    state = Decoding(FakeEngine(tokenizer), PROMPT, config, schedule)
    state.prefill()
    return state


def test_the_end_of_sequence_is_committed_not_emitted():
    state = prefilled(GenerationConfig(max_tokens=10))
    event = state.commit(Plan(3), Round((5, 6, EOS), drafted=3, looked_up=False))
    assert [t.token for t in event.tokens] == [5, 6] and state.finish == "eos"
    assert [t.source for t in event.tokens] == [Source.DRAFT, Source.DRAFT]
    assert state.tokens == PROMPT + [5, 6, EOS] and state.engine.context is state.tokens
    assert (event.num_draft, event.drafted, event.accepted) == (3, 3, 2)


def test_max_tokens_ends_it_inside_a_round_and_room_counts_down():
    state = prefilled(GenerationConfig(max_tokens=3, stop_tokens=frozenset({4})))
    assert state.room == 2  # one token of the budget is the target's own
    assert [t.token for t in state.commit(Plan(1), Round((5, 6), 1, False)).tokens] == [5, 6]
    assert state.room == 0 and not state.finish
    event = state.commit(Plan(0), Round((7, 8, 9), 2, False))
    assert [t.token for t in event.tokens] == [7] and state.finish == "length"
    assert state.tokens == PROMPT + [5, 6, 7]  # nothing past the last emitted token is committed


def test_a_stop_token_ends_it_as_the_end_of_sequence_does():
    state = prefilled(GenerationConfig(max_tokens=10, stop_tokens=frozenset({4})))
    event = state.commit(Plan(0), Round((4,), 0, False))
    assert event.tokens == () and state.finish == "eos" and state.tokens[-1] == 4


def test_a_stop_string_ends_it_and_the_stats_say_which(tokenizer):
    text = " hello world and more"
    tokens = tokenizer.encode(text)
    state = prefilled(GenerationConfig(max_tokens=50, stop=("world",)), TokenizerWrapper(tokenizer))
    event = state.commit(Plan(0), Round(tuple(tokens), len(tokens) - 1, False))
    assert state.finish == "stop" and "world" not in event.text and len(event.tokens) < len(tokens)
    stats = state.close()
    assert stats.finish_reason == "stop" and stats.stop == "world"


def test_a_round_after_the_finish_is_counted_not_committed():
    state = prefilled(GenerationConfig(max_tokens=10))
    state.commit(Plan(0), Round((EOS,), 0, False))
    committed = list(state.tokens)
    event = state.commit(Plan(2), Round((5, 6), 2, False))
    assert event.tokens == () and state.tokens == committed and state.finish == "eos"
    assert state.close().rounds == 2


def test_close_freezes_the_stats_once():
    state = prefilled(GenerationConfig(max_tokens=10, policy=DraftPolicy(num_draft=3)), schedule=DraftLength(3, 3))
    state.commit(Plan(3), Round((5, 6, 7), 3, False))
    state.commit(Plan(3), Round((8,), 3, False))
    stats = state.close()
    assert stats.finish_reason == "cancelled"  # nothing stopped it: its caller did
    assert (stats.generation_tokens, stats.rounds, stats.drafted, stats.accepted) == (4, 2, 6, 2)
    assert stats.prompt_tokens == len(PROMPT) and stats.num_draft == 3 and not stats.auto
    assert state.close() is stats


def test_an_automatic_length_reports_the_policys_start_and_is_its_auto():
    auto = AutoDraft(8, 4)
    state = Decoding(FakeEngine(), PROMPT, GenerationConfig(policy=DraftPolicy(num_draft=None)), auto)
    assert state.auto is auto and state.rec.auto and state.rec.num_draft == START_DRAFT
    fixed = Decoding(FakeEngine(), PROMPT, GenerationConfig(), DraftLength(2, 6))
    assert fixed.auto is None and not fixed.rec.auto and fixed.rec.num_draft == 2


def test_round_keys_are_split_off_the_seeded_key_in_turn():
    state = Decoding(FakeEngine(), PROMPT, GenerationConfig(seed=11))
    key, want = mx.random.key(11), []
    for _ in range(3):
        key, round_key = mx.random.split(key)
        want.append(round_key.tolist())
    assert [state.next_key().tolist() for _ in range(3)] == want
