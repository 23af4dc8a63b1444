"""Above temperature 0 the engine's output distribution is the target's.

Over a five-token vocabulary, every three-token continuation's probability
under the target is computed exactly by enumeration; seeded speculative runs
(several rounds each, with rejections) must match it by a chi-square test.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
from scipy.stats import chisquare

from specmlx.drafters import Draft, ModelDrafter, PromptLookupDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams, warp

from . import tiny
from .costs import FixedCosts

# 2,000 seeded runs a check. The second negative control below is what that
# buys: a drafter that reports q blended 20% towards uniform fails at p ~ 1e-13
# (measured; a 10% blend gives p ~ 0.02, caught from about 3,000 runs on).
VOCAB, LENGTH, RUNS = 5, 3, 2000
PROMPT = [0, 1, 2, 3, 0, 1, 2]


@pytest.fixture(scope="module")
def pair():
    # One layer: these tests run 3,000 generations each, and on a CPU their
    # time is per MLX op, not per FLOP. Depth changes nothing they check.
    args = tiny.qwen2_args(VOCAB, layers=1)
    target = tiny.build(args, seed=7, sharpness=2.0)
    return target, tiny.perturbed(target, args, noise=0.6, seed=8)


def exact_distribution(target, sampling: SamplingParams, length: int = LENGTH) -> dict[tuple[int, ...], float]:
    """P(x1..xL | prompt) = prod_i p(x_i | prompt, x_<i), by full forwards (all sequences in one batch)."""
    seqs = list(itertools.product(range(VOCAB), repeat=length))
    batch = mx.array([PROMPT + list(seq[:-1]) for seq in seqs])
    p = mx.exp(warp(target(batch)[:, len(PROMPT) - 1 :], sampling))  # (sequences, length, VOCAB)
    chosen = mx.take_along_axis(p, mx.array(seqs)[..., None], axis=-1)[..., 0]
    return dict(zip(seqs, np.prod(np.array(chosen, dtype=np.float64), axis=-1).tolist()))


def config(sampling: SamplingParams, seed: int, length: int, **policy) -> GenerationConfig:
    """`length` tokens sampled with `seed`; rounds draft 2 tokens unless `policy` says otherwise."""
    return GenerationConfig(max_tokens=length, sampling=sampling, seed=seed,
                            policy=DraftPolicy(**{"num_draft": 2, **policy}))


def sample_sequences(engine: Engine, sampling: SamplingParams, length: int = LENGTH, stats: list | None = None,
                     **policy) -> tuple[list[tuple[int, ...]], float]:
    """The sampled sequences and rounds per run; each run's stats are appended to `stats` if given."""
    seqs, rounds = [], 0
    for seed in range(RUNS):
        generation = engine.generate(PROMPT, config(sampling, seed, length, **policy))
        seqs.append(tuple(e.token for e in generation.token_events()))
        rounds += generation.stats.rounds
        if stats is not None:
            stats.append(generation.stats)
    return seqs, rounds / RUNS


def chi_square_pvalue(samples: list[tuple[int, ...]], probs: dict[tuple[int, ...], float]) -> float:
    """Sequences expected fewer than 5 times are pooled into one bin."""
    counts = {s: 0 for s in probs}
    for s in samples:
        counts[s] += 1
    assert sum(counts[s] for s in probs if probs[s] == 0) == 0, "emitted an impossible sequence"
    total = sum(probs.values())
    expect = {s: p / total * len(samples) for s, p in probs.items() if p > 0}
    big = [s for s in expect if expect[s] >= 5]
    small = [s for s in expect if expect[s] < 5]
    observed = [counts[s] for s in big] + ([sum(counts[s] for s in small)] if small else [])
    expected = [expect[s] for s in big] + ([sum(expect[s] for s in small)] if small else [])
    return chisquare(observed, expected).pvalue


SAMPLINGS = {
    "temperature 1": SamplingParams(temp=1.0),
    "temperature 0.6": SamplingParams(temp=0.6),
    "top-k 3": SamplingParams(temp=1.0, top_k=3),
    "top-p 0.7": SamplingParams(temp=0.8, top_p=0.7),
    "min-p 0.2": SamplingParams(temp=1.0, min_p=0.2),
}


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
def test_model_drafter_reproduces_the_target_distribution(pair, name):
    target, drafter = pair
    sampling = SAMPLINGS[name]
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    samples, rounds_per_run = sample_sequences(engine, sampling)
    assert 1 < rounds_per_run < LENGTH  # multi-round, with both accepts and rejections
    assert chi_square_pvalue(samples, exact_distribution(target, sampling)) > 1e-3


@pytest.mark.parametrize("fused", [(), (0,)])
@pytest.mark.parametrize("name", ["temperature 1", "top-p 0.7"])
def test_mtp_head_reproduces_the_target_distribution(pair, name, fused):
    """The head drafts from 4 of the 5 ids: q is zero on the fifth. A head that fuses
    target layers (EAGLE-3 style) is fed them by the same forward."""
    target, _ = pair
    sampling = SAMPLINGS[name]
    head = tiny.mtp(tiny.qwen2_args(VOCAB), seed=9, draft_vocab=VOCAB - 1, fused_layers=fused)
    engine = Engine(target, MTPDrafter(head, VOCAB), eos_token_ids=[])
    samples, rounds_per_run = sample_sequences(engine, sampling)
    assert 1 < rounds_per_run < LENGTH
    assert chi_square_pvalue(samples, exact_distribution(target, sampling)) > 1e-3


# At these p-mins the drafter's first step after PROMPT (top probability 0.63
# at T=1, 0.69 within the top 3) never stops the draft, and its second step
# (top 0.54 to 0.68 at T=1, 0.59 to 0.63 within the top 3) stops it after
# some first tokens and not after others: whether a round's draft stops after
# its second token depends on the first token sampled.
P_MIN = {"temperature 1": 0.6, "top-k 3": 0.6}


class RecordingDrafter(ModelDrafter):
    """Records (tokens proposed, tokens asked for) of every round."""

    sizes: list[tuple[int, int]]

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min)
        self.__dict__.setdefault("sizes", []).append((draft.size, num_draft))
        return draft


@pytest.mark.parametrize("name", ["temperature 1", "top-k 3"])
def test_drafts_stopped_on_low_confidence_keep_the_target_distribution(pair, name):
    """With a p-min the number of drafts depends on the drafter's own
    distribution, step by step; the output must not. Four-token sequences,
    so that a round can draft three."""
    target, drafter = pair
    sampling = SAMPLINGS[name]
    recording = RecordingDrafter(drafter, VOCAB)
    engine = Engine(target, recording, eos_token_ids=[])
    length = LENGTH + 1
    samples, rounds_per_run = sample_sequences(engine, sampling, num_draft=3, p_min=P_MIN[name], length=length)
    assert 1 < rounds_per_run < length
    assert {(2, 3), (3, 3)} <= set(recording.sizes)  # drafts of three stopped after two, and did not
    assert chi_square_pvalue(samples, exact_distribution(target, sampling, length)) > 1e-3


def test_prompt_lookup_reproduces_the_target_distribution(pair):
    target, _ = pair
    sampling = SamplingParams(temp=1.0)
    engine = Engine(target, PromptLookupDrafter(), eos_token_ids=[])
    stats = []
    samples, _ = sample_sequences(engine, sampling, stats=stats)
    # Lookup proposed, in every run: PROMPT ends in [1, 2], seen before it, so
    # the first round copies [3, 0]; and some copies were accepted, some rejected.
    assert all(s.drafted >= 2 and s.rounds > s.plain_rounds for s in stats)
    drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
    assert 0 < accepted < drafted
    assert chi_square_pvalue(samples, exact_distribution(target, sampling)) > 1e-3


@pytest.mark.parametrize("name", ["temperature 1", "top-p 0.7"])
def test_rounds_that_look_up_before_drafting_keep_the_target_distribution(pair, name):
    """PROMPT ends in [1, 2], seen before it: the first round copies [3, 0, 1]
    from the context. Later rounds copy or ask the drafter depending on what
    was sampled so far. Four-token sequences, so that both happen."""
    target, drafter = pair
    sampling = SAMPLINGS[name]
    recording = RecordingDrafter(drafter, VOCAB)
    engine = Engine(target, recording, eos_token_ids=[])
    length = LENGTH + 1
    samples, rounds_per_run = sample_sequences(engine, sampling, num_draft=1, length=length,
                                               lookup=2, lookup_draft=3)
    assert 1 < rounds_per_run < length
    assert 0 < len(recording.sizes) < rounds_per_run * RUNS  # the drafter served some rounds, lookup the rest
    assert chi_square_pvalue(samples, exact_distribution(target, sampling, length)) > 1e-3


class FirstDraftRecorder(ModelDrafter):
    """Records the first token of each draft, generation by generation."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.runs: list[list[int]] = []

    def prefill(self, tokens) -> None:
        self.runs.append([])
        super().prefill(tokens)

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min)
        self.runs[-1].append(draft.tokens[0].item())
        return draft


@pytest.mark.parametrize("name", ["temperature 1", "top-p 0.7"])
def test_the_automatic_length_keeps_the_target_distribution(pair, name):
    """Each round's length is chosen from the rounds before, in this run and the
    runs before it: a round after an accepted draft drafts more often than one
    after a rejection. At these costs the choice crosses between plain rounds
    (some of them probing the drafter) and drafts of one."""
    target, drafter = pair
    sampling = SAMPLINGS[name]
    recorder = FirstDraftRecorder(drafter, VOCAB)
    engine = Engine(target, recorder, eos_token_ids=[])
    engine.auto_draft().costs = FixedCosts(step=0.5, width=0.05)
    length = LENGTH + 1
    samples, lengths, probes = [], [], 0
    for seed in range(RUNS):
        generation = engine.generate(PROMPT, config(sampling, seed, length, num_draft=None))
        rounds = list(generation)
        samples.append(tuple(t.token for r in rounds for t in r.tokens))
        lengths.append([r.num_draft for r in rounds])
        probes += generation.stats.probes
    assert 1 < sum(map(len, lengths)) / RUNS < length
    assert sum(len(set(run)) > 1 for run in lengths) > RUNS // 20  # the length varies within runs
    assert {0, 1} <= {k for run in lengths for k in run} and probes > 0
    # ... and with what was sampled. A rejected draft token is never the one
    # committed in its place (the residual is zero there), so a first round
    # drafting one token was accepted exactly when its draft is the first token.
    drafts_again = {True: [], False: []}
    for run, drafts, sample in zip(lengths, recorder.runs, samples):
        if run[0] == 1 and len(run) > 1:
            drafts_again[drafts[0] == sample[0]].append(run[1] > 0)
    share = {accepted: sum(flags) / len(flags) for accepted, flags in drafts_again.items()}
    assert share[True] > share[False] + 0.1
    assert chi_square_pvalue(samples, exact_distribution(target, sampling, length)) > 1e-3


class MisreportingDrafter(ModelDrafter):
    """Samples from q but reports q blended `blend` of the way towards uniform: no longer exact."""

    blend = 1.0

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min)
        if draft.probs is None:
            return draft
        return Draft(draft.tokens, (1 - self.blend) * draft.probs + self.blend / VOCAB)


@pytest.mark.parametrize("blend", [1.0, 0.2])
def test_the_check_detects_a_drafter_that_misreports_q(pair, blend):
    """Negative controls: the same test fails when exactness is broken, grossly
    (q reported uniform) or subtly (q reported a fifth of the way to uniform)."""
    target, drafter = pair
    sampling = SamplingParams(temp=1.0)
    misreporting = MisreportingDrafter(drafter, VOCAB)
    misreporting.blend = blend
    engine = Engine(target, misreporting, eos_token_ids=[])
    samples, _ = sample_sequences(engine, sampling)
    assert chi_square_pvalue(samples, exact_distribution(target, sampling)) < 1e-3


def alternating(monkeypatch, k: int) -> None:
    """Every generation plans plain rounds and rounds drafting `k` by turns,
    each plain round looking ahead (`round.look_ahead`) on the guess that the
    next is plain too: every drafting round scores after a looked-ahead row."""
    from .schedules import Alternating

    monkeypatch.setattr("specmlx.decoding.schedule_for", lambda engine, policy: Alternating(k))


@pytest.mark.parametrize("name", ["temperature 1", "top-p 0.7"])
def test_rounds_after_a_look_ahead_keep_the_target_distribution(monkeypatch, pair, name):
    target, drafter = pair
    sampling = SAMPLINGS[name]
    alternating(monkeypatch, 2)
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    stats = []
    samples, _ = sample_sequences(engine, sampling, LENGTH + 1, stats)
    assert all(s.rounds >= 2 and s.drafted for s in stats)  # a plain round, then a drafting one
    assert chi_square_pvalue(samples, exact_distribution(target, sampling, LENGTH + 1)) > 1e-3


def test_the_check_detects_a_look_ahead_that_biases_its_row(monkeypatch, pair):
    """Negative control: the looked-ahead row's logits nudged towards token 0
    (by 0.5) fail the same test."""
    import specmlx.round as round_module

    target, drafter = pair
    sampling = SamplingParams(temp=1.0)
    alternating(monkeypatch, 2)
    honest = round_module.look_ahead
    nudge = mx.array([0.5] + [0.0] * (VOCAB - 1))
    monkeypatch.setattr(round_module, "look_ahead",
                        lambda engine, following: round_module.Ahead(honest(engine, following).logits + nudge))
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    samples, _ = sample_sequences(engine, sampling, LENGTH + 1)
    assert chi_square_pvalue(samples, exact_distribution(target, sampling, LENGTH + 1)) < 1e-3
