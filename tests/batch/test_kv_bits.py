"""Rows of quantized keys and values (`--kv-bits`) in a continuous batch stay exact against the target alone
with the same quantized cache: greedy, every row's tokens are its own alone with a model drafter, an MTP head,
prompt lookup and none, rows joining and leaving mid-run, for a transformer and a hybrid (its attention layers
quantized); above temperature 0, the rows' sequences follow the quantized target's distribution (chi-square),
and a bias planted in the batch's verification fails it. The float cache answers otherwise: the negative control."""

from __future__ import annotations

import random
from collections import deque

import pytest

import specmlx.batch.round

from specmlx.batch import Batch, Member
from specmlx.caches.batch_quantized import BatchQuantizedKVCache
from specmlx.caches.kinds import KVBits
from specmlx.caches.stream import make_cache
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams, warp

from .. import tiny, tiny_hybrid
from ..quantized import alone
from ..test_engine_distribution import LENGTH, RUNS, chi_square_pvalue
from ..test_engine_kv_bits import GROUP, SMALL, SHORT, exact_quantized
from ..test_engine_kv_bits import VOCAB, qwen  # noqa: F401  (a target its quantized keys change: a fixture)
from ..test_engine_kv_bits import pair  # noqa: F401  (the tiny target and its drafter, a fixture)

BASE = random.Random(0).choices(range(VOCAB), k=24)
PROMPTS = [BASE * 2, BASE[:5], BASE[3:] + [4, 4, 8], [7], BASE[:9] * 3, BASE[6:]]
DRAFT_LENGTHS = [4, 2, 3, 1, 3, 2]


def serve(target, drafters: list, kv: KVBits, max_rows: int = 4) -> tuple[list[Member], dict[int, list[int]], int]:
    """Rows joining one every other round, at most `max_rows` at once, each leaving when it finishes;
    also the most rows one round served."""
    members = [Member(Engine(target, d, eos_token_ids=[], kv=kv), p,
                      GenerationConfig(max_tokens=12 + 3 * i, policy=DraftPolicy(num_draft=k)))
               for i, (d, p, k) in enumerate(zip(drafters, PROMPTS, DRAFT_LENGTHS))]
    batch = Batch(target, len(make_cache(target)), max_rows=max_rows)
    out, waiting, rounds, widest = {id(m): [] for m in members}, list(members), 0, 0
    while waiting or batch.members:
        if waiting and rounds % 2 == 0 and not batch.full:
            batch.add(waiting.pop(0))
        widest = max(widest, len(batch.members))
        assert any(type(layer) is BatchQuantizedKVCache for layer in batch.cache.layers)
        for m, event in batch.step():
            out[id(m)] += [t.token for t in event.tokens]
        rounds += 1
    return members, out, widest


@pytest.mark.parametrize("bits", [8, 4])
def test_every_rows_greedy_tokens_are_the_target_alone_with_the_same_quantized_cache(qwen, bits):
    kv = KVBits(bits, GROUP)
    near, head = tiny.perturbed(qwen, qwen.args, 0.5, seed=3), tiny.mtp(qwen.args, seed=2)
    kinds = [lambda: ModelDrafter(near, VOCAB), lambda: MTPDrafter(head, VOCAB), PromptLookupDrafter, NoDrafter]
    members, out, widest = serve(qwen, [kinds[i % len(kinds)]() for i in range(len(PROMPTS))], kv)
    assert widest == 4
    differs = 0
    for i, m in enumerate(members):
        n = len(out[id(m)])
        expected = alone(qwen, PROMPTS[i], n, kv)
        assert out[id(m)] == expected, f"row {i} ({m.engine.drafter.name})"
        differs += expected != alone(qwen, PROMPTS[i], n, None)
    assert differs > 0  # the negative control: a float cache answers otherwise
    assert 0 < sum(m.stats.accepted for m in members) < sum(m.stats.drafted for m in members)


def test_a_hybrids_quantized_attention_rows_and_recurrent_rows_share_a_batch():
    hybrid = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=1, head_dim=32)
    kv = KVBits(4, GROUP)
    drafters = [ModelDrafter(tiny.tiny_qwen(VOCAB, seed=4), VOCAB), PromptLookupDrafter(), NoDrafter()] * 2
    members, out, widest = serve(hybrid, drafters, kv)
    assert widest > 1
    for i, m in enumerate(members):
        assert out[id(m)] == alone(hybrid, PROMPTS[i], len(out[id(m)]), kv), f"row {i} ({m.engine.drafter.name})"


# -- above temperature 0 ------------------------------------------------------------------------------------

ROWS = 16
SHARPEN = 1.2  # verification's logits scaled so, in the planted bias


def sampled(target, make_drafter, kv: KVBits, sampling: SamplingParams) -> list[tuple[int, ...]]:
    """`RUNS` seeded requests through one batch of `ROWS`, joining as others leave; engines are reused
    (their caches hold the prompt, as a server slot's do)."""
    batch, free = Batch(target, len(make_cache(target)), ROWS), []
    queue, out = deque(range(RUNS)), {}
    while queue or batch.members:
        while queue and not batch.full:
            seed = queue.popleft()
            engine = free.pop() if free else Engine(target, make_drafter(), eos_token_ids=[], kv=kv)
            member = Member(engine, SHORT, GenerationConfig(max_tokens=LENGTH, sampling=sampling, seed=seed,
                                                            policy=DraftPolicy(num_draft=2)))
            batch.add(member)
            out[id(member)] = (member, [])
        for member, event in batch.step():
            out[id(member)][1].extend(t.token for t in event.tokens)
            if member.finish:
                free.append(member.engine)
    return [tuple(tokens) for _, tokens in out.values()]


@pytest.mark.parametrize("planted", [False, True], ids=["exact", "planted bias"])
def test_above_temperature_zero_the_rows_follow_the_quantized_targets_distribution(pair, planted,  # noqa: F811
                                                                                    monkeypatch):
    """The planted bias: the batch's verification reads p from logits sharpened by `SHARPEN`
    (`tests/batch/test_distribution.py` measured what that fails at)."""
    target, draft_model = pair
    kv, sampling = KVBits(4, GROUP), SamplingParams(temp=1.0)
    if planted:
        monkeypatch.setattr(specmlx.batch.round, "warp", lambda logits, s: warp(logits * SHARPEN, s))
    samples = sampled(target, lambda: ModelDrafter(draft_model, SMALL), kv, sampling)
    assert len(samples) == RUNS and all(len(s) == LENGTH for s in samples)
    p = chi_square_pvalue(samples, exact_quantized(target, sampling, kv))
    assert (p < 1e-3) if planted else (p > 1e-3)
