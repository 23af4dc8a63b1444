"""specmlx's own MTP head drafting through the engine: exact, rewound, reloadable."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.drafters.mtp import MTPDrafter, head_rows
from specmlx.models.mtp import is_mtp_dir, load_mtp, save_mtp
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.sampling import SamplingParams

from .. import tiny
from ..costs import FixedCosts
from ..test_engine import PROMPTS, reference_greedy, run


@pytest.fixture(scope="module")
def mtp_model(target_args):
    return tiny.mtp(target_args, seed=3, draft_vocab=target_args.vocab_size // 2)


@pytest.mark.parametrize("num_draft", [1, 3, 6])
def test_greedy_output_equals_the_targets_own(tokenizer, vocab, target, mtp_model, num_draft):
    engine = Engine(target, MTPDrafter(mtp_model, vocab), eos_token_ids=[])
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=30, num_draft=num_draft)
        assert [e.token for e in events] == reference_greedy(target, prompt, 30)
        assert stats.host_syncs == stats.rounds
        assert stats.drafted > 0


@pytest.mark.parametrize("costs", [(1.0, 0.05), (0.0, 0.02)], ids=["plain-heavy", "cheap"])
def test_greedy_exact_with_the_automatic_length(tokenizer, vocab, target, mtp_model, costs):
    """Plain rounds leave the head behind; a probe feeds it every position it
    missed before it drafts."""
    engine = Engine(target, MTPDrafter(mtp_model, vocab), eos_token_ids=[])
    engine.auto_draft().costs = FixedCosts(*costs)
    lengths = []
    for text in PROMPTS * 2:
        prompt = tokenizer.encode(text)
        rounds = list(engine.generate(prompt, GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=None))))
        assert [t.token for r in rounds for t in r.tokens] == reference_greedy(target, prompt, 30)
        lengths += [r.num_draft for r in rounds]
    # A drafter as dear as the target never drafts (its calibration's probe says so); a cheap one does.
    assert 0 in lengths and (max(lengths) > 0) == (costs[0] < 1.0)


def test_greedy_exact_when_drafts_stop_on_low_confidence(tokenizer, vocab, target, mtp_model):
    engine = Engine(target, MTPDrafter(mtp_model, vocab), eos_token_ids=[])
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=30, num_draft=6, p_min=0.3)
        assert [e.token for e in events] == reference_greedy(target, prompt, 30)
        _, full = run(engine, prompt, max_tokens=30, num_draft=6)
        assert 0 < stats.drafted / stats.rounds < full.drafted / full.rounds  # drafts were cut short


def test_drafts_only_from_the_draft_vocabulary(tokenizer, vocab, target, mtp_model):
    drafter = MTPDrafter(mtp_model, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    allowed = set(mtp_model.draft_ids.tolist())
    prompt = tokenizer.encode(PROMPTS[1])
    list(engine.generate(prompt, GenerationConfig(max_tokens=2, policy=DraftPolicy(num_draft=0))))
    tokens = engine.context
    for sampling in (SamplingParams(), SamplingParams(temp=1.0)):
        draft = drafter.draft(tokens, 5, sampling, mx.random.key(0))
        assert set(draft.tokens.tolist()) <= allowed
        if draft.probs is not None:  # q puts no mass outside the draft vocabulary
            outside = [i for i in range(vocab) if i not in allowed]
            assert float(draft.probs[:, outside].sum()) == 0.0
            assert mx.allclose(draft.probs.sum(-1), mx.ones(5), atol=1e-5)


def test_after_each_generation_the_head_holds_only_real_positions(tokenizer, vocab, target, mtp_model):
    drafter = MTPDrafter(mtp_model, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    for max_tokens in (7, 19):
        run(engine, tokenizer.encode(PROMPTS[0]), max_tokens=max_tokens, num_draft=4)
        n = len(engine.context)
        assert drafter.history.length == engine.cache.length
        assert drafter.real <= n - 1 and drafter.cache.length <= drafter.real


def test_a_new_prompt_reusing_the_prefix_stays_exact(tokenizer, vocab, target, mtp_model):
    engine = Engine(target, MTPDrafter(mtp_model, vocab), eos_token_ids=[])
    first = tokenizer.encode(PROMPTS[0])
    events, _ = run(engine, first, max_tokens=12, num_draft=3)
    follow = first + [e.token for e in events][:5] + tokenizer.encode(" x = 1\n")
    events, _ = run(engine, follow, max_tokens=16, num_draft=3)
    assert [e.token for e in events] == reference_greedy(target, follow, 16)


def test_head_rows_are_the_targets_head(target_args, target):
    ids = mx.array([3, 1, 4, 1, 5], dtype=mx.int32)
    hidden = mx.random.normal((2, target_args.hidden_size))
    from specmlx.hidden import head

    assert mx.allclose(hidden @ head_rows(target, ids).T, head(target, hidden)[:, ids], atol=1e-4)
    tied_args = tiny.qwen2_args(target_args.vocab_size, tie_word_embeddings=True)
    tied = tiny.build(tied_args, seed=2)
    assert mx.allclose(hidden @ head_rows(tied, ids).T, head(tied, hidden)[:, ids], atol=1e-4)


def test_saved_head_reloads_identically(tmp_path, mtp_model):
    save_mtp(mtp_model, tmp_path / "mtp")
    assert is_mtp_dir(tmp_path / "mtp")
    again = load_mtp(tmp_path / "mtp")
    assert mx.array_equal(again.draft_ids, mtp_model.draft_ids)
    e, h = mx.random.normal((1, 3, 64)), mx.random.normal((1, 3, 64))
    assert mx.allclose(again(e, h), mtp_model(e, h))


def test_a_head_for_another_width_is_refused(tokenizer, vocab, target):
    other = tiny.mtp(tiny.qwen2_args(vocab, hidden=32), seed=1)
    with pytest.raises(SpecmlxError, match="width 32"):
        Engine(target, MTPDrafter(other, vocab), eos_token_ids=[])


def fused_head(target_args, layers: tuple[int, ...], seed: int = 3):
    """A random head that fuses `layers`: its fusion's weights are random, so what it is fed shows."""
    return tiny.mtp(target_args, seed=seed, draft_vocab=target_args.vocab_size // 2, fused_layers=layers)


def assert_fed_the_fusion(drafter: MTPDrafter, target, context: list[int]) -> None:
    """The head's history holds fused(taps, hidden) of the context, as one full forward computes them."""
    from specmlx.hidden import decoder_taps

    n = drafter.history.length
    assert n >= len(context) - 2
    hidden, taps = decoder_taps(target, mx.array(context[:n])[None], None, drafter.fused_layers)
    assert mx.allclose(drafter.history.rows(0, n), drafter.model.fused(taps[0], hidden[0]), atol=1e-4)


@pytest.mark.parametrize("layers, num_draft", [((0, 1), 3), ((1,), 5)])
def test_a_head_fusing_target_layers_drafts_exactly_from_them(tokenizer, vocab, target, target_args, layers,
                                                               num_draft):
    drafter = MTPDrafter(fused_head(target_args, layers), vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    for text in PROMPTS[:2]:  # the second reuses the engine: prefill, rounds and rewinds all feed it
        prompt = tokenizer.encode(text)
        run = engine.generate(prompt, GenerationConfig(max_tokens=20, policy=DraftPolicy(num_draft=num_draft)))
        tokens = [e.token for e in run.token_events()]
        assert tokens == reference_greedy(target, prompt, 20)
        assert run.stats.drafted > 0
        assert_fed_the_fusion(drafter, target, prompt + tokens)


def test_a_fused_head_for_a_deeper_target_is_refused(target, target_args, vocab):
    with pytest.raises(SpecmlxError, match=r"fuses target layers \[0, 5\], but this target has 2"):
        Engine(target, MTPDrafter(fused_head(target_args, (0, 5)), vocab), eos_token_ids=[])


def test_a_fused_head_shown_no_taps_says_so(target_args, vocab):
    drafter = MTPDrafter(fused_head(target_args, (0,)), vocab)
    with pytest.raises(SpecmlxError, match=r"fuses target layers \[0\]: it needs what enters them"):
        drafter.observe(0, mx.zeros((2, target_args.hidden_size)))
