"""Hybrid targets (attention and recurrent layers) in a batch: each row's greedy speculative output is
the target's own, with every drafter kind (a transformer, a hybrid model drafting on its own row,
prompt lookup, none, the checkpoint's own MTP layers), rows of different draft lengths joining and
leaving mid-run; a row that leaves takes its state back to its slot, whose next turn goes on from it."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.batch import Batch, Member
from specmlx.batch.drafting import shares
from specmlx.caches.stream import make_cache
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy

from .. import tiny
from ..drafters.test_native_mtp import BUILDS as MTP_BUILDS
from ..drafters.test_native_mtp import layers as mtp_layers
from ..test_engine_hybrid import BUILDS, PROMPT, VOCAB, greedy_alone

PROMPTS = [PROMPT, PROMPT[:5], PROMPT[3:] + [4, 4, 8], [7], PROMPT[:9] * 2, PROMPT[6:]]
DRAFT_LENGTHS = [4, 2, 3, 1, 3, 2]


def drafters(target) -> list:
    """One of each kind, cycled over the rows: two rows share the transformer's forward."""
    small = tiny.tiny_qwen(VOCAB, seed=4)
    near = tiny.perturbed(target, target.args, noise=0.3, seed=3)
    kinds = [lambda: ModelDrafter(small, VOCAB, name="transformer"), lambda: ModelDrafter(near, VOCAB, name="hybrid"),
             PromptLookupDrafter, NoDrafter]
    return [kinds[i % len(kinds)]() for i in range(len(PROMPTS))]


def serve(target, drafters: list, max_rows: int = 4) -> tuple[list[Member], dict[int, list[int]]]:
    """Rows joining one every other round, at most `max_rows` at once, each leaving when it finishes."""
    members = [Member(Engine(target, d, eos_token_ids=[]), p,
                      GenerationConfig(max_tokens=10 + 4 * i, policy=DraftPolicy(num_draft=k)))
               for i, (d, p, k) in enumerate(zip(drafters, PROMPTS, DRAFT_LENGTHS))]
    batch = Batch(target, len(make_cache(target)), max_rows=max_rows)
    out, waiting, rounds = {id(m): [] for m in members}, list(members), 0
    while waiting or batch.members:
        if waiting and rounds % 2 == 0 and not batch.full:
            batch.add(waiting.pop(0))
        for m, event in batch.step():
            out[id(m)] += [t.token for t in event.tokens]
        rounds += 1
    return members, out


def assert_greedy(target, members: list[Member], out: dict[int, list[int]]) -> None:
    for i, m in enumerate(members):
        assert out[id(m)] == greedy_alone(target, PROMPTS[i], len(out[id(m)])), f"row {i} ({m.engine.drafter.name})"


@pytest.fixture(scope="module", params=sorted(BUILDS))
def target(request):
    return BUILDS[request.param](VOCAB, seed=1)


def test_greedy_output_is_the_target_alone_with_every_drafter(target):
    members, out = serve(target, drafters(target))
    assert_greedy(target, members, out)
    assert sum(m.stats.accepted for m in members) > 0
    assert not shares(members[1]) and shares(members[0])  # the hybrid drafter drafts on its own row


@pytest.mark.parametrize("name", sorted(MTP_BUILDS))
def test_greedy_output_is_the_target_alone_with_its_own_mtp_layers(name):
    target = MTP_BUILDS[name](VOCAB, seed=1)
    layers = mtp_layers(target)
    members, out = serve(target, [NativeMTPDrafter(layers, VOCAB) for _ in PROMPTS])
    assert_greedy(target, members, out)
    assert 0 < sum(m.stats.accepted for m in members) < sum(m.stats.drafted for m in members)


def test_a_row_that_left_goes_on_from_its_slot(target):
    """Its next turn, alone or in the batch again, reuses the state it took back (no prefill of it)."""
    members, out = serve(target, drafters(target)[:2], max_rows=2)
    for m, prompt in zip(members, PROMPTS):
        engine = m.engine
        turn = prompt + out[id(m)] + [3, 6]
        assert engine.reusable(turn) == len(prompt) + len(out[id(m)]) - 1 == engine.cache_length()
    first, second = members
    turn = PROMPTS[0] + out[id(first)] + [3, 6]
    alone = [e.token for e in first.engine.generate(turn, GenerationConfig(
        max_tokens=8, policy=DraftPolicy(num_draft=3))).token_events()]
    assert alone == greedy_alone(target, turn, 8)
    again = Member(second.engine, PROMPTS[1] + out[id(second)] + [3, 6], GenerationConfig(
        max_tokens=8, policy=DraftPolicy(num_draft=2)))
    batch = Batch(target, len(make_cache(target)))
    batch.add(again)
    tokens = []
    while batch.members:
        tokens += [t.token for _, event in batch.step() for t in event.tokens]
    assert tokens == greedy_alone(target, again.tokens[: len(again.tokens) - len(tokens)], 8)


@pytest.mark.parametrize("name", ["qwen3_5", "nemotron_h"])  # one replay for all rows; one a group
def test_a_round_still_waits_once(name, monkeypatch):
    """The rows' replays are lazy: they run with the next round's graph, not in a wait of their own."""
    target = BUILDS[name](VOCAB, seed=1)
    batch = Batch(target, len(make_cache(target)))
    for d, prompt, k in zip(drafters(target), PROMPTS, DRAFT_LENGTHS):
        batch.add(Member(Engine(target, d, eos_token_ids=[]), prompt,
                         GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=k))))
    waits = []
    evaluate = mx.eval
    monkeypatch.setattr(mx, "eval", lambda *a, **k: (waits.append(1), evaluate(*a, **k))[1])
    rejected = 0
    while batch.members:
        before = len(waits)
        events = batch.step()
        assert len(waits) - before == 1
        rejected += sum(0 < e.accepted < e.drafted for _, e in events)
    assert rejected
