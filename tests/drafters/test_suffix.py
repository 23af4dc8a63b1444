"""Suffix lookup over an owner's session: what it proposes, what it remembers across requests and
for whom, where its documents end, its cap, and exactness through the engine at every temperature."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from specmlx.drafters import Draft, PromptLookupDrafter, Remembers, SuffixDrafter, tell_owner
from specmlx.drafters.suffix import Corpus, Sessions
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

from .. import tiny
from ..test_engine_distribution import PROMPT, RUNS, VOCAB, chi_square_pvalue, exact_distribution, sample_sequences
from ..test_engine_hybrid import greedy_alone

GREEDY = SamplingParams()
KEY = mx.random.key(0)


def take(loaded: SuffixDrafter, owner) -> SuffixDrafter:
    """A slot's instance for `owner`'s request, as the server's `Slots.take` makes and tells it: the
    loaded drafter's `fresh()` (sharing its memory of the sessions), told whose request it serves."""
    drafter = loaded.fresh()
    tell_owner(drafter, owner)
    return drafter


def answer(drafter: SuffixDrafter, prompt: list[int], output: list[int]) -> None:
    """What one request shows its drafter: the prompt, then the context a round at a time."""
    drafter.prefill(prompt)
    for i in range(len(output) + 1):
        drafter.draft(prompt + output[:i], 4, GREEDY, KEY)


def proposed(drafter: SuffixDrafter, tokens: list[int], num_draft: int = 8) -> list[int]:
    draft = drafter.draft(tokens, num_draft, GREEDY, KEY)
    assert draft.probs is None  # deterministic: verified as one-hot
    return draft.tokens.tolist()


EARLIER = list(range(100, 140))  # 40 distinct tokens: an answer an agent will see again


@pytest.mark.parametrize("matched, drafted", [(2, 2), (3, 3), (4, 4), (5, 4), (6, 6), (8, 8), (11, 8), (31, 8)])
def test_the_draft_is_as_long_as_the_match(matched, drafted):
    """Up to `num_draft`, a draft is as long as the tail it matched, cut to a length of the set of
    copies (`widths.COPIED`: 5 proposes 4)."""
    drafter = SuffixDrafter()
    answer(drafter, [1, 2, 3], EARLIER)
    tail = EARLIER[:matched]
    new = take(drafter, None)
    assert proposed(new, [7] + tail, num_draft=8) == EARLIER[len(tail) : len(tail) + drafted]
    assert proposed(new, [7] + tail, num_draft=3) == EARLIER[len(tail) : len(tail) + min(3, drafted)]


def test_a_one_token_match_proposes_nothing():
    drafter = SuffixDrafter()
    answer(drafter, [1, 2, 3], EARLIER)
    assert proposed(take(drafter, None), [7, EARLIER[5]]) == []


def test_a_longer_match_wins_over_a_later_shorter_one():
    drafter = SuffixDrafter()
    context = [1, 2, 3, 4, 5, 50, 51, 52, 53, 9, 4, 5, 60, 61, 62, 9]
    drafter.prefill(context)
    assert proposed(drafter, context + [2, 3, 4, 5]) == [50, 51, 52, 53]
    assert proposed(drafter, context + [7, 4, 5]) == [60, 61]


def test_a_later_request_of_the_same_owner_proposes_from_an_earlier_answer():
    loaded = SuffixDrafter()
    answer(take(loaded, "alice"), [1, 2, 3], EARLIER)
    follow_up = [4, 5, 6] + EARLIER[10:14]  # a new conversation quoting the first one's answer
    assert proposed(take(loaded, "alice"), follow_up, num_draft=4) == EARLIER[14:18]


def test_another_owner_is_never_proposed_an_owners_text():
    """Security: an accepted copy would show bob alice's prompt. Bob's own text and the same tail:
    nothing of alice's is proposed, by a new instance or by one that served alice before."""
    loaded = SuffixDrafter()
    alice = take(loaded, "alice")
    answer(alice, [1, 2, 3], EARLIER)
    follow_up = [4, 5, 6] + EARLIER[10:14]
    assert proposed(take(loaded, "bob"), follow_up) == []
    assert proposed(take(loaded, None), follow_up) == []  # no key is an owner of its own
    tell_owner(alice, "bob")  # a slot that served alice now serves bob
    assert proposed(alice, follow_up) == []
    answer(alice, [7, 8, 9], [10, 11, 12, 13])
    assert proposed(take(loaded, "bob"), [5, 10, 11]) == [12, 13]  # bob's own memory works
    assert proposed(take(loaded, "alice"), follow_up, num_draft=4) == EARLIER[14:18]


def test_no_owner_proposes_what_another_wrote_at_random():
    """Many owners' sessions of the same few tokens, written by instances swapped between them: every
    proposal is a run of its owner's own text (each owner writes tokens of its own range, and each
    context mixes in common ones)."""
    rng = random.Random(0)
    loaded, owners = SuffixDrafter(), ["a", "b", "c", None]
    instances = [loaded.fresh() for _ in range(3)]
    for _ in range(300):
        drafter, owner = rng.choice(instances), rng.choice(owners)
        tell_owner(drafter, owner)
        own = 100 * (owners.index(owner) + 1)
        context = [rng.choice([own + rng.randrange(3), rng.randrange(3)]) for _ in range(rng.randrange(1, 30))]
        assert all(t < 3 or own <= t < own + 3 for t in proposed(drafter, context))


def test_a_conversation_that_parts_from_what_was_written_starts_a_new_document():
    drafter = SuffixDrafter()
    drafter.prefill([1, 2, 3, 4, 5])
    drafter.prefill([1, 2, 3, 4, 5, 6])  # the next turn extends it: the same document
    corpus = drafter.sessions.corpus(None)
    assert corpus.tokens == [1, 2, 3, 4, 5, 6] and len(corpus.starts) == 1
    drafter.rewind(3)  # the engine keeps what a new prompt shares: the next turn parts there
    drafter.prefill([1, 2, 3, 9])
    assert corpus.tokens == [1, 2, 3, 4, 5, 6, 1, 2, 3, 9] and corpus.starts == [0, 6]  # led by what precedes 9
    drafter.rewind(3)  # a batch round undrafted: the context is the same, nothing is written again
    drafter.draft([1, 2, 3, 9, 7], 4, GREEDY, KEY)
    assert corpus.tokens == [1, 2, 3, 4, 5, 6, 1, 2, 3, 9, 7] and corpus.starts == [0, 6]


def test_a_finished_request_is_remembered_once_whatever_drafted_it():
    """`remember`: a slot's context after a turn another drafter served is written past what this
    conversation wrote already; one that changed behind its back goes in a new document."""
    drafter = take(SuffixDrafter(), "k")
    drafter.prefill([1, 2, 3])  # a first turn it drafted
    drafter.remember([1, 2, 3, 4, 5])  # its answer's last token was never drafted from
    drafter.remember([1, 2, 3, 4, 5, 6, 7])  # a next turn another drafter served
    drafter.remember([1, 2, 3, 4, 5, 6, 7])  # the same again: nothing written twice
    corpus = drafter.sessions.corpus("k")
    assert corpus.tokens == [1, 2, 3, 4, 5, 6, 7] and corpus.starts == [0]
    drafter.remember([1, 2, 9, 8])  # the slot took another conversation while another drafter served it
    assert corpus.tokens == [1, 2, 3, 4, 5, 6, 7, 1, 2, 9, 8] and corpus.starts == [0, 7]
    assert isinstance(drafter, Remembers)


def test_a_match_never_spans_two_documents_nor_copies_into_the_next():
    loaded = SuffixDrafter()
    answer(take(loaded, None), [10, 11], [12])
    answer(take(loaded, None), [13, 14], [20, 21])
    new = take(loaded, None)
    assert proposed(new, [5, 11, 12]) == []  # the first document ends at 12: 13 is another's
    assert proposed(new, [5, 12, 13]) == []  # 12, 13 follow each other only across two documents
    assert proposed(new, [5, 13, 14]) == [20, 21]


def test_two_conversations_of_one_owner_written_by_turns_keep_their_own_context():
    """Two slots of one owner write in turn: each continues in a new document led by its own last tokens."""
    loaded = SuffixDrafter()
    one, two = take(loaded, "k"), take(loaded, "k")
    one.prefill([1, 2, 3])
    two.prefill([7, 8, 9])
    one.draft([1, 2, 3, 4, 5], 4, GREEDY, KEY)
    assert proposed(take(loaded, "k"), [0, 3, 4]) == [5]  # one's new document is led by its 3


def test_the_cap_drops_the_oldest_tokens_and_owners():
    sessions = Sessions(cap=40, owners=2)
    loaded = SuffixDrafter(sessions)
    answer(take(loaded, "k"), [1, 2], list(range(200, 230)))
    answer(take(loaded, "k"), [3, 4], list(range(300, 330)))
    corpus = sessions.corpus("k")
    assert 30 <= len(corpus.tokens) <= 40
    assert proposed(take(loaded, "k"), [5, 320, 321], 2) == [322, 323]
    assert proposed(take(loaded, "k"), [5, 201, 202]) == []  # dropped
    answer(take(loaded, "j"), [1, 2], [5, 6, 7])
    answer(take(loaded, "i"), [1, 2], [5, 6, 7])
    assert proposed(take(loaded, "k"), [5, 320, 321]) == []  # the least recently served owner is forgotten
    assert proposed(take(loaded, "i"), [9, 5, 6]) == [7]


def test_after_drops_a_match_is_the_longest_within_a_factor_of_two():
    """A corpus that dropped its oldest tokens many times: every match it finds is real (the tail's last
    `length` tokens, followed by a token, within one kept document), and as long as the longest there
    to within a factor of two (its keys: 2, 4, 8, 16), with none missed."""
    rng = random.Random(1)
    corpus = Corpus(cap=64)
    for _ in range(40):
        corpus.open(object(), [])
        corpus.extend([rng.randrange(4) for _ in range(rng.randrange(1, 20))])
    assert 48 <= len(corpus.tokens) <= 64 and corpus.base > 0
    docs = documents(corpus)
    for _ in range(300):
        tail = [rng.randrange(4) for _ in range(rng.randrange(2, 12))]
        found, longest = corpus.match(tail), longest_match(docs, tail)
        assert (found is None) == (longest is None), tail
        if found is not None:
            at, n = found.at - corpus.base, found.length
            assert corpus.tokens[at - n : at] == tail[-n:] and found.at < found.end
            assert any(start <= found.at - n and found.end == end for start, end in docs.values())
            assert longest // 2 < n <= longest, tail


def documents(corpus: Corpus) -> dict[int, tuple[int, int]]:
    """Each kept document's tokens (a tuple) to its absolute bounds."""
    bounds = [*corpus.starts, corpus.end]
    return {tuple(corpus.tokens[a - corpus.base : b - corpus.base]): (a, b) for a, b in zip(bounds, bounds[1:])}


def longest_match(docs, tail: list[int]) -> int | None:
    """By a plain search: the longest n >= 2 whose last n tokens of `tail` occur followed by a token in a document."""
    found = [n for n in range(2, len(tail) + 1) for doc in docs
             if any(list(doc[i : i + n]) == tail[-n:] for i in range(len(doc) - n))]
    return max(found, default=None)


def test_may_propose_is_false_only_when_no_next_token_could_be_copied():
    rng = random.Random(2)
    seen = {False: 0, True: 0}
    for _ in range(200):
        new = take(SuffixDrafter(), None)
        answer(new.fresh(), [1, 2, 3], [rng.randrange(6) for _ in range(12)])
        tokens = [rng.randrange(10) for _ in range(rng.randrange(1, 10))]
        may = new.may_propose(tokens)
        if not may:
            assert not any(proposed(new, tokens + [t]) for t in range(11))
        seen[may] += 1
    assert seen[False] and seen[True]


# Exactness through the engine: the tiny models the engine's tests use.


@pytest.fixture(scope="module")
def target():
    return tiny.tiny_qwen(64, seed=3)


@pytest.mark.parametrize("num_draft", [3, None])
def test_greedy_output_is_the_target_alone_turn_after_turn(target, num_draft):
    """Three turns of one conversation and a new one quoting it, each on a slot's fresh instance:
    every answer is the target's own, and some copies are accepted, some rejected."""
    loaded = SuffixDrafter()
    rng = random.Random(3)
    prompt, drafted, accepted = [rng.randrange(64) for _ in range(12)], 0, 0
    for turn in range(4):
        engine = Engine(target, take(loaded, "k"), eos_token_ids=[])
        config = GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=num_draft))
        generation = engine.generate(prompt, config)
        out = [e.token for e in generation.token_events()]
        assert out == greedy_alone(target, prompt, 30)
        drafted, accepted = drafted + generation.stats.drafted, accepted + generation.stats.accepted
        prompt = (prompt + out if turn < 2 else out[5:]) + [rng.randrange(64) for _ in range(3)]
    assert 0 < accepted < drafted


@pytest.fixture(scope="module")
def small():
    """test_engine_distribution's target over five tokens."""
    return tiny.build(tiny.qwen2_args(VOCAB, layers=1), seed=7, sharpness=2.0)


SAMPLING = SamplingParams(temp=1.0)


class FirstCopies(SuffixDrafter):
    """Records what it copies at the end of the prompt, the first round of each request."""

    firsts: list[list[int]]

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min, allowed)
        if tokens == PROMPT:
            self.__dict__.setdefault("firsts", []).append(draft.tokens.tolist())
        return draft


def test_the_target_distribution_is_kept_above_temperature_0(small):
    """2,000 seeded requests on one drafter, each remembered by the next: its copies come from the
    prompt and from earlier requests' answers, and the output is still the target's distribution."""
    drafter, stats = FirstCopies(), []
    samples, _ = sample_sequences(Engine(small, drafter, eos_token_ids=[]), SAMPLING, stats=stats)
    assert all(s.drafted and s.rounds > s.plain_rounds for s in stats)
    assert 0 < sum(s.accepted for s in stats) < sum(s.drafted for s in stats)
    # The prompt alone copies [3, 0] after its [0, 1, 2]; the latest earlier answer copies what followed it there.
    assert len(drafter.firsts) == RUNS and sum(first != [3, 0] for first in drafter.firsts) > RUNS // 2
    assert chi_square_pvalue(samples, exact_distribution(small, SAMPLING)) > 1e-3


class Misreporting(SuffixDrafter):
    """The planted bias: copies as it should but reports q uniform, not one-hot."""

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min, allowed)
        return Draft(draft.tokens, mx.full((draft.size, VOCAB), 1 / VOCAB)) if draft.size else draft


def test_the_check_detects_a_planted_bias(small):
    samples, _ = sample_sequences(Engine(small, Misreporting(), eos_token_ids=[]), SAMPLING)
    assert chi_square_pvalue(samples, exact_distribution(small, SAMPLING)) < 1e-3


def test_it_is_loaded_by_name_and_its_instances_share_one_memory():
    from specmlx.drafters import SUFFIX
    from specmlx.loading import DrafterSource, load_drafter, resolve_drafter

    source = resolve_drafter(SUFFIX, "any/target")
    assert source == DrafterSource(SUFFIX, SUFFIX) and source.builtin
    loaded = load_drafter(source, target=None)
    assert isinstance(loaded, SuffixDrafter) and loaded.fresh().sessions is loaded.sessions
    assert load_drafter(source, target=None).sessions is not loaded.sessions  # one memory a load
    assert isinstance(loaded, Remembers) and not isinstance(PromptLookupDrafter(), Remembers)
