"""Block drafters (DFlash) in a batch on a hybrid target: rows drafting blocks, each its own length (fixed,
or the automatic one's), joining and leaving, commit the target's own greedy tokens, with drafts
accepted and rejected; above temperature 0 the batch keeps the target's distribution."""

from __future__ import annotations

from collections import deque

import pytest

from specmlx.batch import Batch, Member
from specmlx.caches.stream import make_cache
from specmlx.drafters.block import BlockDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

from .. import tiny_block, tiny_hybrid
from ..drafters.test_block import GUESSES, PROMPT, SMALL, VOCAB, Misreporting
from ..drafters.test_block import small_pair, small_target  # noqa: F401  (the tiny target and its drafter, fixtures)
from ..test_engine_distribution import LENGTH, RUNS, chi_square_pvalue, exact_distribution
from ..test_engine_distribution import PROMPT as DISTRIBUTION_PROMPT
from ..test_engine_hybrid import greedy_alone
from .test_batch import serve

PROMPTS = [PROMPT, PROMPT[:5], PROMPT[3:] + [4, 4, 6], [7], PROMPT[:9] * 2, PROMPT[6:]]
LENGTHS = [4, None, 15, 1, 12, 8]  # None: the automatic length; past 8, a block drafter's widths


@pytest.mark.parametrize("join_every", [1, 3])
def test_rows_drafting_blocks_commit_the_targets_own_tokens(join_every):
    target = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=1, layers=tiny_block.LAYERS)
    model = tiny_block.tiny_dflash(VOCAB, seed=2, guesses=GUESSES)[0]
    members = [Member(Engine(target, BlockDrafter(model, VOCAB, "dflash"), eos_token_ids=[]), prompt,
                      GenerationConfig(max_tokens=12 + 4 * i, policy=DraftPolicy(num_draft=k)))
               for i, (prompt, k) in enumerate(zip(PROMPTS, LENGTHS))]
    served = serve(target, members, join_every=join_every)
    assert served.most > 1 and (served.rejoined or join_every == 1)
    for i, prompt in enumerate(PROMPTS):
        assert served.tokens[i] == greedy_alone(target, prompt, 12 + 4 * i), f"row {i}"
    assert 0 < sum(m.stats.accepted for m in members) < sum(m.stats.drafted for m in members)
    assert members[2].stats.draft_histogram[15] > 0 and members[4].stats.draft_histogram[12] > 0  # past 8


ROWS = 16  # rows at once


def block_samples(target, drafter) -> tuple[list[tuple[int, ...]], int, int]:
    """`RUNS` seeded rows at temperature 1 through one batch of `ROWS`, drafting blocks of two or at
    the automatic length by turns, engines reused as rows leave (a server's slots). Returns the
    samples, and the drafts proposed and accepted."""
    free: list[Engine] = []
    batch, queue, live, samples = Batch(target, len(make_cache(target)), ROWS), deque(range(RUNS)), {}, []
    drafted = accepted = 0
    while queue or batch.members:
        while queue and not batch.full:
            j = queue.popleft()
            engine = free.pop() if free else Engine(target, drafter.fresh(), eos_token_ids=[])
            policy = DraftPolicy(num_draft=2 if j % 2 else None)
            member = Member(engine, DISTRIBUTION_PROMPT, GenerationConfig(
                max_tokens=LENGTH, sampling=SamplingParams(temp=1.0), seed=j, policy=policy))
            batch.add(member)
            live[member] = []
        for member, event in batch.step():
            live[member].extend(t.token for t in event.tokens)
            drafted, accepted = drafted + event.drafted, accepted + event.accepted
            if member.finish:
                free.append(member.engine)
                samples.append(tuple(live.pop(member)))
    return samples, drafted, accepted


def test_rows_drafting_blocks_keep_the_targets_distribution(small_pair):
    target, model = small_pair
    samples, drafted, accepted = block_samples(target, BlockDrafter(model, SMALL, "dflash"))
    assert len(samples) == RUNS and 0 < accepted < drafted
    assert chi_square_pvalue(samples, exact_distribution(target, SamplingParams(temp=1.0))) > 1e-3


def test_the_batch_check_detects_a_planted_bias(small_pair):
    target, model = small_pair
    samples, _, _ = block_samples(target, Misreporting(model, SMALL, "dflash"))
    assert chi_square_pvalue(samples, exact_distribution(target, SamplingParams(temp=1.0))) < 1e-3
