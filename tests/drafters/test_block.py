"""A block drafter (DFlash) drafting through the engine for a tiny Qwen3.5 target (a hybrid, as every
published DFlash target is): greedy output is the target's own at every draft length, its cache holds
only the target's context after each round, above temperature 0 the target's distribution is kept (a
planted bias fails), and the published layouts load, or are one line."""

from __future__ import annotations

import json
from dataclasses import replace

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters import Draft
from specmlx.drafters.block import BlockDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.hidden import decoder_taps
from specmlx.loading import DrafterSource, LoadedModel, load_drafter
from specmlx.models.dflash import load_block_drafter
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

from .. import tiny, tiny_block, tiny_hybrid
from ..costs import FixedCosts
from ..test_engine_distribution import chi_square_pvalue, exact_distribution, sample_sequences
from ..test_engine_hybrid import greedy_alone

# A small vocabulary: the tiny target's greedy answer alternates 6 and 2, and a drafter that always
# proposes 2 (`tiny_block.tiny_dflash(guesses=...)`) is right about half the time at its first draft.
VOCAB = 8
GUESSES = 0  # the mask token whose embedding the target's head reads as 2
PROMPT = [5, 1, 2, 7, 5, 1, 2, 7, 1, 3, 5, 6, 2]


@pytest.fixture(scope="module")
def target():
    return tiny_hybrid.tiny_qwen3_5(VOCAB, seed=1, layers=tiny_block.LAYERS)


@pytest.fixture(scope="module")
def model():
    return tiny_block.tiny_dflash(VOCAB, seed=2)[0]


@pytest.fixture(scope="module")
def guessing():
    return tiny_block.tiny_dflash(VOCAB, seed=2, guesses=GUESSES)[0]


@pytest.mark.parametrize("kind", ["dflash2", "dspark"])
def test_chained_drafters_draft_the_targets_own_greedy_tokens(target, kind):
    """Their proposals chained (a selector's, a Markov term's; DSpark's block anchored): every draft
    length still gives the target's own."""
    model = tiny_block.tiny_dflash(VOCAB, seed=3, **{kind: True})[0]
    engine = Engine(target, BlockDrafter(model, VOCAB, kind), eos_token_ids=[])
    for num_draft in (1, 4, 8):
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=32, policy=DraftPolicy(num_draft=num_draft)))
        assert [e.token for e in generation.token_events()] == greedy_alone(target, PROMPT, 32)
        assert generation.stats.drafted > 0


@pytest.mark.parametrize("num_draft", [1, 4, 8, 12, 15])
def test_greedy_output_is_the_target_alone(target, model, guessing, num_draft):
    """With a drafter that is right about half the time at its first draft and one never right; each
    drafting round's block took one drafter forward, whatever it proposed."""
    for drafter, accepts in ((guessing, True), (model, False)):
        engine = Engine(target, BlockDrafter(drafter, VOCAB, "dflash"), eos_token_ids=[])
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=48, policy=DraftPolicy(num_draft=num_draft)))
        rounds = list(generation)
        assert [t.token for r in rounds for t in r.tokens] == greedy_alone(target, PROMPT, 48)
        assert (0 < generation.stats.accepted < generation.stats.drafted) is accepts
        assert all(r.blocked and r.steps == 1 for r in rounds if r.drafted)
        assert max(r.drafted for r in rounds) == num_draft


def test_a_fixed_length_past_its_block_drafts_the_longest_of_the_set_it_holds(target):
    """A block of 8 proposes 7: asked for 12, it drafts 6, the set's longest within 7, whose verify is warmed."""
    engine = Engine(target, BlockDrafter(tiny_block.tiny_dflash(VOCAB, seed=2, block=8)[0], VOCAB, "dflash"),
                    eos_token_ids=[])
    rounds = list(engine.generate(PROMPT, GenerationConfig(max_tokens=24, policy=DraftPolicy(num_draft=12))))
    assert [t.token for r in rounds for t in r.tokens] == greedy_alone(target, PROMPT, 24)
    assert max(r.drafted for r in rounds) == 6


def test_its_warm_up_runs_the_widths_past_eight_its_block_holds(target, model):
    """Past 8 its set holds 12 and 15 (a block of 16's whole proposal), each warmed with its drafts drawn;
    a drafter of a token a step stops at 8 (`test_warmup.py`)."""
    from specmlx.warmup import warm_up

    ran = warm_up(target, BlockDrafter(model, VOCAB, "dflash"), DraftPolicy(max_draft=16, prediction_draft=1))
    assert [k for k, _, _ in ran[::2]] == [0, 1, 2, 3, 4, 6, 8, 12, 15]
    assert ran[-2:] == ((15, 15, 16), (15, 15, 15))
    narrow = warm_up(target, BlockDrafter(tiny_block.tiny_dflash(VOCAB, seed=2, block=8)[0], VOCAB, "dflash"),
                     DraftPolicy(max_draft=16, prediction_draft=1))
    assert [k for k, _, _ in narrow[::2]] == [0, 1, 2, 3, 4, 6]  # a block of 8 proposes 7


def test_the_automatic_length_stays_exact(target, guessing):
    """At the costs of a machine where it pays (this CPU's tiny forwards would say it does not)."""
    engine = Engine(target, BlockDrafter(guessing, VOCAB, "dflash"), eos_token_ids=[])
    engine.auto_draft(policy=DraftPolicy(num_draft=None)).costs = FixedCosts(step=0.1, width=0.02)
    for _ in range(2):  # a second answer starts from what the first measured
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=40, policy=DraftPolicy(num_draft=None)))
        assert [e.token for e in generation.token_events()] == greedy_alone(target, PROMPT, 40)
        assert generation.stats.drafted > 0


def test_the_same_prompt_again_on_an_attention_only_target():
    """Its cache then holds every context row already (an attention cache keeps the prompt): the block
    feeds the last row again rather than none. z-lab publishes drafters for Qwen3's attention-only models."""
    target = tiny.build(tiny.qwen2_args(VOCAB, layers=tiny_block.LAYERS), seed=5)
    engine = Engine(target, BlockDrafter(tiny_block.tiny_dflash(VOCAB, seed=6)[0], VOCAB, "dflash"), eos_token_ids=[])
    for _ in range(2):
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=4)))
        assert [e.token for e in generation.token_events()] == greedy_alone(target, PROMPT, 16)
        assert generation.stats.drafted > 0


def test_its_context_rows_are_kept_on_disk_and_restored(target, model):
    """What the prompt cache on disk keeps of it (`KeepsOnDisk`): its rows, from which a restored
    drafter drafts what the one that kept them drafts."""
    drafter = BlockDrafter(model, VOCAB, "dflash")
    engine = Engine(target, drafter, eos_token_ids=[])
    list(engine.generate(PROMPT, GenerationConfig(max_tokens=8, policy=DraftPolicy(num_draft=4))))
    context = engine.context
    kept = [drafter.capture(0, 8, "drafter.dflash"), drafter.capture(8, 16, "drafter.dflash")]
    assert all(kept) and not drafter.capture(0, len(context) + 8, "drafter.dflash")
    restored = drafter.fresh()
    restored.attach(target, [])
    assert restored.restore(kept, "drafter.dflash") == 16
    tokens = context[:17]
    drafter.rewind(16)
    mine, theirs = (d.draft(tokens, 4, SamplingParams(), mx.random.key(0)).tokens.tolist() for d in (drafter, restored))
    assert mine == theirs and len(mine) == 4


def test_after_each_round_its_cache_holds_what_a_fresh_feed_of_the_context_gives(target, model):
    """Entry j of each layer's cache: the keys and values of context row j, as one forward over the
    committed tokens' features (a fresh prefill's) computes them, within float32 tolerance, and never
    past the last committed token but one. A rewind one position late, or a block's rows kept, fail."""
    drafter = BlockDrafter(model, VOCAB, "dflash")
    engine = Engine(target, drafter, eos_token_ids=[])
    rounds = 0
    for _ in engine.generate(PROMPT, GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=4))):
        n, context = drafter.cache.length, engine.context
        assert n <= drafter.history.length <= len(context) - 1
        if not n:
            continue
        _, taps = decoder_taps(target, mx.array([context[:n]]), make_prompt_cache(target), drafter.fused_layers)
        fresh = model.make_cache()
        model(mx.zeros((1, 1, 64)), model.context(taps), fresh)
        for mine, want in zip(drafter.cache, fresh):
            assert mx.allclose(mine.keys[..., :n, :], want.keys[..., :n, :], atol=1e-4).item()
            assert mx.allclose(mine.values[..., :n, :], want.values[..., :n, :], atol=1e-4).item()
        rounds += 1
    assert rounds > 5
    fresh_drafter = drafter.fresh()
    assert fresh_drafter.model is drafter.model and fresh_drafter.history.length == 0


SMALL = 5  # the chi-square test's vocabulary (test_engine_distribution)
SAMPLING = SamplingParams(temp=1.0)


@pytest.fixture(scope="module")
def small_target():
    return tiny_hybrid.sharpened(tiny_hybrid.tiny_qwen3_5(SMALL, seed=7, layers=tiny_block.LAYERS), 0.5)


@pytest.fixture(scope="module")
def small_pair(small_target):
    return small_target, tiny_block.tiny_dflash(SMALL, seed=8)[0]


@pytest.mark.parametrize("kind", ["dflash", "dflash2", "dspark"])
def test_the_target_distribution_is_kept_above_temperature_0(small_target, kind):
    """DFlash2's q is over each position's candidates alone (its selector's top 4 of 5), and DSpark's
    moved by its Markov term, each chained to the token drafted before it: what it draws from, and what
    verification reads."""
    model = tiny_block.tiny_dflash(SMALL, seed=8, **({kind: True} if kind != "dflash" else {}))[0]
    engine = Engine(small_target, BlockDrafter(model, SMALL, "dflash"), eos_token_ids=[])
    samples, rounds_per_run = sample_sequences(engine, SAMPLING)
    assert 1 < rounds_per_run < 3  # multi-round, with both accepts and rejections
    assert chi_square_pvalue(samples, exact_distribution(small_target, SAMPLING)) > 1e-3


class Misreporting(BlockDrafter):
    """The planted bias: samples from q but reports q as uniform."""

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min, allowed)
        return draft if draft.probs is None else replace(draft, probs=mx.full(draft.probs.shape, 1 / SMALL))

    def fresh(self) -> "Misreporting":
        return Misreporting(self.model, self.vocab_size, self.name)


def test_the_check_detects_a_planted_bias(small_pair):
    target, model = small_pair
    samples, _ = sample_sequences(Engine(target, Misreporting(model, SMALL, "dflash"), eos_token_ids=[]), SAMPLING)
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) < 1e-3


@pytest.mark.parametrize("prefix", ["model.", ""])
def test_a_published_checkpoint_loads_with_or_without_its_prefix(target, model, tmp_path, prefix):
    """As z-lab publishes it (`model.` names) or as mlx-vlm converts it (none); the loader knows it by
    its `dflash_config`, needs no tokenizer, and holds the same tensors."""
    folder = tiny_block.save_dflash(model, tiny_block.raw_config(VOCAB), tmp_path / "drafter", prefix)
    loaded = load_drafter(DrafterSource(str(folder), "dflash"), LoadedModel(target, None, folder, "target"))
    assert isinstance(loaded, BlockDrafter) and loaded.fused_layers == tuple(i + 1 for i in tiny_block.TAPPED)
    mine, theirs = dict(tree_flatten(loaded.model.parameters())), dict(tree_flatten(model.parameters()))
    assert mine.keys() == theirs.keys() and all(mx.array_equal(mine[k], theirs[k]).item() for k in mine)


def test_a_hub_id_loads_as_its_snapshot(target, model, tmp_path, monkeypatch):
    """`--drafter z-lab/Qwen3.5-4B-DFlash`: the hub's snapshot (here a folder: nothing downloads) is
    read as the published directory; an id the hub does not have is one line."""
    from specmlx import hub, loading

    folder = tiny_block.save_dflash(model, tiny_block.raw_config(VOCAB), tmp_path / "snapshot")
    asked = []
    monkeypatch.setattr(loading, "download", lambda repo: asked.append(repo) or folder)
    source = DrafterSource("z-lab/Qwen3.5-4B-DFlash", "dflash")
    assert isinstance(load_drafter(source, LoadedModel(target, None, folder, "target")), BlockDrafter)
    assert asked == ["z-lab/Qwen3.5-4B-DFlash"]
    monkeypatch.setattr(loading, "download", hub.download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecmlxError, match=r"^cannot download 'z-lab/No-Such-DFlash': "):
        load_drafter(DrafterSource("z-lab/No-Such-DFlash", "dflash"), LoadedModel(target, None, folder, "target"))


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["DFlash2DraftModel"]}, "a DFlash2 drafter needs conv_kernel_size"),
    ({"dflash_config": {"mask_token_id": 7, "target_layer_ids": [1, 3, 5], "projector_type": "dspark"}},
     "a DSpark drafter needs a markov_rank above 0"),
    ({"dflash_config": {"mask_token_id": 8, "target_layer_ids": [1, 3, 5]}}, "mask_token_id 8 is outside its vocabulary"),
    ({"dflash_config": {"mask_token_id": 7, "target_layer_ids": [3, 1]}}, "target_layer_ids must ascend"),
    ({"layer_types": ["chunked_attention", "full_attention"]}, r"drafter layers \['chunked_attention'\]"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding-window drafter layers need a sliding_window"),
    ({"dflash_config": {"mask_token_id": 7, "target_layer_ids": [1, 3, 5], "draft_window_size": 64}},
     "draft_window_size are not supported yet"),
    ({"hidden_size": None}, "lacks or mistypes a block drafter's field"),
])
def test_what_it_cannot_run_is_one_line_before_any_weight_loads(tmp_path, change, message):
    raw = {**tiny_block.raw_config(VOCAB), **change}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(SpecmlxError, match=message):
        load_block_drafter(tmp_path)


@pytest.mark.parametrize("shape, message", [
    ({"target_layers": 12}, r"reads target layers \[1, 3, 5\] of 12, but this target has 8"),
    ({"tapped": (1, 3, 7)}, r"reads what leaves layer 7, the target's last: specmlx taps what enters a layer"),
])
def test_a_drafter_for_another_target_is_one_line_when_attached(target, shape, message):
    model, _ = tiny_block.tiny_dflash(VOCAB, seed=3, **shape)
    with pytest.raises(SpecmlxError, match=message):
        BlockDrafter(model, VOCAB, "dflash").attach(target, [])


def test_a_drafter_for_another_vocabulary_is_one_line_when_attached(target):
    model, _ = tiny_block.tiny_dflash(VOCAB * 2, seed=3)
    with pytest.raises(SpecmlxError, match="trained for a vocabulary of 16, but this target's is 8"):
        BlockDrafter(model, VOCAB, "dflash").attach(target, [])


def test_a_prediction_is_copied_before_a_block_is_drafted(target, guessing):
    """A request's predicted output (the target's own answer, then wrong) is proposed first, as with
    every drafter, and stays exact beside a block drafter."""
    want = greedy_alone(target, PROMPT, 32)
    engine = Engine(target, BlockDrafter(guessing, VOCAB, "dflash"), eos_token_ids=[])
    predicted = tuple(want[:12] + [(t + 1) % VOCAB for t in want[12:20]])  # right, then wrong
    generation = engine.generate(PROMPT, GenerationConfig(max_tokens=32, prediction=predicted,
                                                          policy=DraftPolicy(num_draft=4)))
    rounds = list(generation)
    assert [t.token for r in rounds for t in r.tokens] == want
    assert generation.stats.prediction_accepted >= 11
