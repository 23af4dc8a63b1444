"""Swapping drafters on one engine (`Engine.use`): after every swap, in every
order, greedy output is still the target's own.

Every drafter kind drafts for one tiny Gemma 4 target: a small LM, none,
specmlx's MTP head, prompt lookup and a Gemma 4 assistant. The conversation
grows across swaps, so each incoming drafter must be brought up to date with
a context it partly missed, and the ones that read hidden states must see
every position they skipped.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx.drafters import Draft, HiddenDrafter, ModelDrafter, NoDrafter, PromptLookupDrafter, reads_hidden
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.policy import DraftPolicy

from . import tiny

KINDS = ("model", "none", "mtp", "ngram", "assistant")
CONFIG = GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))


@pytest.fixture(scope="module")
def drafters(g4_args, vocab):
    small = tiny.build(tiny.qwen2_args(vocab, hidden=32), seed=7)
    return {
        "model": ModelDrafter(small, vocab, name="model"),
        "none": NoDrafter(),
        "mtp": MTPDrafter(tiny.mtp(g4_args, seed=3), vocab),
        "ngram": PromptLookupDrafter(),
        "assistant": Gemma4AssistantDrafter(tiny.gemma4_assistant(g4_args, seed=2), vocab),
    }


def eulerian_walk(kinds: tuple[str, ...]) -> list[str]:
    """A walk that makes every ordered swap a -> b (a != b) exactly once
    (Hierholzer on the complete directed graph, which is Eulerian)."""
    unused = {a: [b for b in kinds if b != a] for a in kinds}
    stack, walk = [kinds[0]], []
    while stack:
        node = stack[-1]
        if unused[node]:
            stack.append(unused[node].pop())
        else:
            walk.append(stack.pop())
    return walk[::-1]


def target_greedy(target, prompt: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=n)]


def test_the_walk_covers_every_ordered_swap():
    walk = eulerian_walk(KINDS)
    pairs = list(zip(walk, walk[1:]))
    assert sorted(pairs) == sorted(itertools.permutations(KINDS, 2))


def test_every_swap_in_every_order_keeps_greedy_output_exact(g4_target, drafters, tokenizer):
    engine = Engine(g4_target, drafters["model"], eos_token_ids=[])
    context = tokenizer.encode("def add(a, b):\n    return a + b\n")
    drafted = {kind: 0 for kind in KINDS}
    for step, kind in enumerate(eulerian_walk(KINDS)):
        engine.use(drafters[kind])
        assert engine.drafter is drafters[kind] and engine.reads_hidden == (kind in ("mtp", "assistant"))
        # The next turn extends the context, as a chat does: the caches are reused.
        prompt = context + tokenizer.encode(f"\n# turn {step}\n")
        generation = engine.generate(prompt, CONFIG)
        tokens = [e.token for e in generation.token_events()]
        assert tokens == target_greedy(g4_target, prompt, CONFIG.max_tokens), f"step {step}: {kind}"
        drafted[kind] += generation.stats.drafted
        context = prompt + tokens
    # Every drafter that can draft did, after coming back into use.
    assert all(drafted[k] > 0 for k in ("model", "mtp", "assistant")) and drafted["none"] == 0


def test_the_engine_tells_drafters_that_read_hidden_states_by_their_protocol(drafters):
    hidden = [k for k in KINDS if isinstance(drafters[k], HiddenDrafter)]
    assert [k for k in KINDS if reads_hidden(drafters[k])] == hidden == ["mtp", "assistant"]


def test_using_the_current_drafter_changes_nothing(g4_target, drafters, tokenizer):
    mtp = drafters["mtp"]
    engine = Engine(g4_target, mtp, eos_token_ids=[])
    prompt = tokenizer.encode("x = 1\ny = 2\n")
    first = [e.token for e in engine.generate(prompt, CONFIG).token_events()]
    held = (list(engine.context), engine.cache.length, mtp.history.length)
    engine.use(mtp)
    assert (engine.context, engine.cache.length, mtp.history.length) == held


STATEFUL = ("model", "mtp", "assistant")


@pytest.mark.parametrize("kind", STATEFUL)
@pytest.mark.parametrize("other", ["none", "ngram", "another mtp"])
def test_a_drafter_back_after_the_context_diverged_drafts_as_a_fresh_one(kind, other, g4_target, g4_args, vocab,
                                                                        tokenizer):
    """While it was out, the conversation went elsewhere: what it still holds
    of the old one must not leak into its drafts. Tokens and their sources
    (which drafts were accepted) equal a fresh engine's."""
    def make(kind):
        if kind == "model":
            return ModelDrafter(g4_target, vocab)  # the target drafting for itself: every draft accepted
        if kind == "mtp":
            return MTPDrafter(tiny.mtp(g4_args, seed=3), vocab)
        return Gemma4AssistantDrafter(tiny.gemma4_assistant(g4_args, seed=2), vocab)

    drafter = make(kind)
    others = {"none": NoDrafter(), "ngram": PromptLookupDrafter(),
              "another mtp": MTPDrafter(tiny.mtp(g4_args, seed=5), vocab)}
    engine = Engine(g4_target, drafter, eos_token_ids=[])
    first = tokenizer.encode("def add(a, b):\n    return a + b\n")
    list(engine.generate(first, CONFIG))
    engine.use(others[other])
    elsewhere = first[:5] + tokenizer.encode("something else entirely, x = 3\n")
    answer = [e.token for e in engine.generate(elsewhere, CONFIG).token_events()]
    engine.use(drafter)
    prompt = elsewhere + answer + tokenizer.encode("\n# more\n")
    got = [(e.token, e.source) for e in engine.generate(prompt, CONFIG).token_events()]
    fresh = Engine(g4_target, make(kind), eos_token_ids=[])
    assert got == [(e.token, e.source) for e in fresh.generate(prompt, CONFIG).token_events()]
    assert kind != "model" or sum(source.value == "draft" for _, source in got) > 0


def test_a_drafter_that_cannot_read_this_target_is_refused_and_changes_nothing(g4_target, drafters, tokenizer,
                                                                                 vocab):
    engine = Engine(g4_target, drafters["model"], eos_token_ids=[])
    prompt = tokenizer.encode("a = [1, 2, 3]\n")
    first = [e.token for e in engine.generate(prompt, CONFIG).token_events()]
    wrong = MTPDrafter(tiny.mtp(tiny.qwen2_args(vocab, hidden=32), seed=4), vocab)  # hidden size 32, not 64
    with pytest.raises(SpecmlxError, match="hidden states of width 32"):
        engine.use(wrong)
    assert engine.drafter is drafters["model"] and not engine.reads_hidden
    follow = prompt + first + tokenizer.encode("\n")
    assert [e.token for e in engine.generate(follow, CONFIG).token_events()] == target_greedy(g4_target, follow, CONFIG.max_tokens)


class OldPlain:
    """A drafter written to the protocol before `draft_model`, `reads_target_cache`, `may_propose`,
    `adopt`, `held_bytes` and `bytes_per_token`."""
    name, drafts = "old", True

    def prefill(self, tokens):
        pass

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None):
        return Draft.empty()

    def rewind(self, length):
        pass

    def fresh(self):
        return type(self)()


class OldHead(OldPlain):
    """A hidden drafter of that time: it reads the target's hidden states."""
    fused_layers = ()

    def attach(self, target, cache):
        self.attached = target

    def observe(self, start, hidden, taps=None):
        pass


class Head(OldHead):
    """The same brought up to date: it holds nothing."""
    draft_model, reads_target_cache = None, False

    def may_propose(self, tokens):
        return True

    def adopt(self, source, length):
        return 0

    def held_bytes(self):
        return 0

    def bytes_per_token(self, target):
        return 0


NEW_MEMBERS = "draft_model, reads_target_cache, may_propose, adopt, held_bytes, bytes_per_token"


@pytest.mark.parametrize("old", [OldPlain, OldHead], ids=["plain", "hidden"])
def test_a_drafter_lacking_members_of_its_protocol_is_refused_in_a_line_that_names_them(old, g4_target, drafters):
    """Not left unattached (a hidden one) nor failing later where a batch reads what it lacks."""
    with pytest.raises(SpecmlxError, match=f"drafter {old.__name__} lacks {NEW_MEMBERS}: "):
        Engine(g4_target, old(), eos_token_ids=[])
    engine = Engine(g4_target, drafters["none"], eos_token_ids=[])
    with pytest.raises(SpecmlxError, match=f"lacks {NEW_MEMBERS}:"):
        engine.use(old())
    assert engine.drafter is drafters["none"]


def test_a_complete_hidden_drafter_is_attached(g4_target, drafters):
    engine = Engine(g4_target, drafters["none"], eos_token_ids=[])
    head = Head()
    engine.use(head)
    assert engine.drafter is head and engine.reads_hidden and head.attached is g4_target
