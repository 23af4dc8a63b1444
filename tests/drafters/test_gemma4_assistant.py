"""Gemma 4 assistant drafters on tiny random Gemma 4 targets: the layer, the
centroid head, reading (never writing) the target's cache, exactness."""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import gemma4_text
from scipy.stats import chisquare

from specmlx.drafters.gemma4_assistant import HF_WINDOW_EXTRA, Gemma4AssistantDrafter
from specmlx.models.gemma4_assistant import (
    AssistantConfig, AssistantLayer, Gemma4AssistantModel, load_gemma4_assistant,
)
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.sampling import SamplingParams, warp

from .. import tiny
from ..costs import FixedCosts
from ..test_engine import PROMPTS, reference_greedy, run

SAMPLED = SamplingParams(temp=1.0)


@pytest.fixture(scope="module")
def assistants(g4_args):
    return {ordered: tiny.gemma4_assistant(g4_args, seed=1, ordered=ordered) for ordered in (False, True)}


@pytest.fixture(params=[False, True], ids=["dense", "centroids"])
def assistant(request, assistants):
    return assistants[request.param]


def prefilled(target, model, vocab, prompt) -> tuple[Engine, Gemma4AssistantDrafter]:
    """An engine whose caches hold `prompt`, and one more target token committed."""
    drafter = Gemma4AssistantDrafter(model, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    list(engine.generate(prompt, GenerationConfig(max_tokens=1, policy=DraftPolicy(num_draft=0))))
    return engine, drafter


# -- the network ------------------------------------------------------------------


def test_layer_is_mlx_lms_gemma4_layer_reading_shared_kv(g4_args):
    """Same weights, same target K/V: the Q-only layer equals mlx-lm's Gemma 4
    decoder layer in its KV-shared mode (scale 1.0, norms, GeGLU, layer_scalar)."""
    config = AssistantConfig.from_dict(tiny.gemma4_assistant_config(g4_args))
    text = config.text
    theirs_args = gemma4_text.ModelArgs(
        model_type="gemma4_text", hidden_size=text.hidden_size, num_hidden_layers=4,
        intermediate_size=text.intermediate_size, num_attention_heads=text.num_attention_heads,
        head_dim=text.head_dim, global_head_dim=text.global_head_dim, num_key_value_heads=2,
        num_kv_shared_layers=4, hidden_size_per_layer_input=0, use_double_wide_mlp=False,
        vocab_size=text.vocab_size, sliding_window=text.sliding_window, layer_types=list(text.layer_types),
        rope_parameters=dict(text.rope_parameters),
    )
    mx.random.seed(3)
    for i, layer_type in enumerate(text.layer_types[2:], start=2):  # one sliding, one full
        mine = AssistantLayer(text, layer_type)
        noisy = {k: v + 0.3 * mx.random.normal(v.shape) for k, v in tree_flatten(mine.parameters())}
        mine.load_weights(list(noisy.items()))
        theirs = gemma4_text.DecoderLayer(theirs_args, layer_idx=i)
        theirs.load_weights(list(tree_flatten(mine.parameters())), strict=True)
        dim = text.head_dim_for(layer_type)
        x = mx.random.normal((1, 1, text.hidden_size))
        keys, values = mx.random.normal((1, 2, 11, dim)), mx.random.normal((1, 2, 11, dim))
        expected = theirs(x, None, None, shared_kv=(keys, values), offset=17)[0]
        assert mx.allclose(mine(x, keys, values, 17), expected, atol=1e-5)


def test_shapes_and_heads(g4_args, assistant):
    config = assistant.config
    kv = {
        "sliding_attention": (mx.random.normal((1, 2, 8, 16)),) * 2,
        "full_attention": (mx.random.normal((1, 2, 20, 32)),) * 2,
    }
    h, following = assistant(mx.random.normal((1, 1, 2 * g4_args.hidden_size)), kv, 20)
    assert h.shape == (1, 1, config.text.hidden_size)
    assert following.shape == (1, 1, g4_args.hidden_size)
    logits = assistant.logits(h[0, 0])
    assert logits.shape == (g4_args.vocab_size,)
    assert assistant.greedy(h[0, 0]).item() == mx.argmax(logits).item()
    if config.use_ordered_embeddings:
        ids, scores = assistant.candidate_logits(h[0, 0])
        assert ids.shape == (config.centroid_intermediate_top_k * g4_args.vocab_size // config.num_centroids,)
        dense = assistant.model.embed_tokens.as_linear(h[0, 0])
        assert mx.allclose(scores, dense[ids], atol=1e-5)
        assert int(mx.isfinite(logits).sum()) == ids.shape[0]  # -inf off the chosen clusters
        # the chosen clusters are the best-scoring centroids
        best = mx.argsort(assistant.masked_embedding.centroids(h[0, 0]))[-config.centroid_intermediate_top_k:]
        ordering = assistant.masked_embedding.token_ordering.reshape(config.num_centroids, -1)
        assert set(ids.tolist()) == set(ordering[best].reshape(-1).tolist())


def test_token_ordering_is_not_a_parameter(g4_args):
    model = tiny.gemma4_assistant(g4_args, seed=1, ordered=True)
    names = dict(tree_flatten(model.parameters()))
    assert "masked_embedding.centroids.weight" in names
    assert not any("ordering" in k for k in names)
    model.set_dtype(mx.float16)
    assert model.masked_embedding.token_ordering.dtype == mx.int32
    assert model.weights()["masked_embedding.token_ordering"].dtype == mx.int32


def test_config_reads_released_fields_and_refuses_what_hf_refuses(g4_args):
    raw = tiny.gemma4_assistant_config(g4_args, ordered=True)
    config = AssistantConfig.from_dict(raw)
    assert (config.backbone_hidden_size, config.num_centroids, config.text.num_hidden_layers) == (64, 8, 4)
    assert config.text.head_dim_for("full_attention") == 32
    flat = {k: v for k, v in raw.items() if k != "text_config"} | raw["text_config"]
    flat["model_type"] = "gemma4_unified_assistant"
    assert AssistantConfig.from_dict(flat).text == config.text
    for key, value in [("use_double_wide_mlp", True), ("hidden_size_per_layer_input", 256)]:
        bad = dict(raw, text_config=dict(raw["text_config"], **{key: value}))
        with pytest.raises(SpecmlxError, match=key):
            AssistantConfig.from_dict(bad)
    with pytest.raises(SpecmlxError, match="centroids"):
        AssistantConfig.from_dict(dict(raw, num_centroids=7))
    with pytest.raises(SpecmlxError, match="not a Gemma 4 assistant"):
        AssistantConfig.from_dict(dict(raw, model_type="gemma4_text"))


# -- reading the target ---------------------------------------------------------------


def test_drafts_read_the_targets_cache_within_the_window(tokenizer, vocab, g4_target, assistant):
    engine, drafter = prefilled(g4_target, assistant, vocab, tokenizer.encode(PROMPTS[0]))
    tokens = engine.context
    scored = len(tokens) - 1
    window = assistant.config.text.sliding_window + HF_WINDOW_EXTRA
    assert scored > window + 2
    key = mx.random.key(0)
    base = drafter.draft(tokens, 2, SAMPLED, key).probs

    def probs_with_key_changed(cache, position):
        original = cache.keys
        changed = original * 1
        changed[..., position, :] = 3.0
        cache.keys = changed
        try:
            return drafter.draft(tokens, 2, SAMPLED, key).probs
        finally:
            cache.keys = original

    sliding, full = drafter.sources["sliding_attention"], drafter.sources["full_attention"]
    assert sliding is engine.cache[1] and full is engine.cache[2]  # last owners of each type
    assert mx.array_equal(probs_with_key_changed(sliding, scored - window - 1), base)  # outside the window
    assert not mx.allclose(probs_with_key_changed(sliding, scored - window), base)
    assert not mx.allclose(probs_with_key_changed(full, 0), base)
    assert mx.array_equal(probs_with_key_changed(full, scored), base)  # past the valid entries


def test_drafting_never_writes_to_the_targets_cache(tokenizer, vocab, g4_target, assistant):
    from specmlx.hidden import decoder

    engine, drafter = prefilled(g4_target, assistant, vocab, tokenizer.encode(PROMPTS[1]))
    tokens = engine.context
    before = [(c.offset, mx.array(c.keys[..., : c.offset, :]), mx.array(c.values[..., : c.offset, :]))
              for c in engine.cache]
    mx.eval(before)
    now = drafter.draft(tokens, 4, SAMPLED, mx.random.key(1))
    mx.eval(now.tokens, now.probs)
    greedy = drafter.draft(tokens, 4, SamplingParams(), mx.random.key(1))
    mx.eval(greedy.tokens)
    for c, (offset, keys, values) in zip(engine.cache, before):
        assert c.offset == offset
        assert mx.array_equal(c.keys[..., :offset, :], keys) and mx.array_equal(c.values[..., :offset, :], values)
    # A draft left lazy while the verify pass writes the cache sees the cache as it was.
    lazy = drafter.draft(tokens, 4, SAMPLED, mx.random.key(1))
    written = decoder(g4_target, mx.array([tokens[-1:] + [5, 6, 7]], dtype=mx.uint32), engine.cache)
    mx.eval(written, [c.state for c in engine.cache])
    mx.eval(lazy.tokens, lazy.probs)
    assert mx.array_equal(lazy.tokens, now.tokens) and mx.array_equal(lazy.probs, now.probs)
    for c in engine.cache:
        c.trim(4)


def test_rewound_state_matches_a_fresh_prefill(tokenizer, vocab, g4_target, assistant):
    prompt = tokenizer.encode(PROMPTS[2])
    drafter = Gemma4AssistantDrafter(assistant, vocab)
    engine = Engine(g4_target, drafter, eos_token_ids=[])
    for max_tokens in (6, 13):  # the second reuses the first's prefix, then rewinds within it
        run(engine, prompt, max_tokens=max_tokens, num_draft=3)
        context = engine.context
        assert drafter.history.length == engine.cache.length == len(context) - 1
    fresh_engine, fresh = prefilled(g4_target, assistant, vocab, context[:-1])
    assert fresh_engine.context == context  # the greedy continuation is the same token
    for sampling in (SamplingParams(), SAMPLED):
        ours = drafter.draft(context, 4, sampling, mx.random.key(2))
        theirs = fresh.draft(context, 4, sampling, mx.random.key(2))
        assert ours.tokens.tolist() == theirs.tokens.tolist()
        if sampling.temp:
            assert mx.allclose(ours.probs, theirs.probs, atol=1e-4)
            assert mx.allclose(ours.probs.sum(-1), mx.ones(4), atol=1e-5)


def test_nothing_to_read_means_no_draft(vocab, g4_target, assistant):
    drafter = Gemma4AssistantDrafter(assistant, vocab)
    Engine(g4_target, drafter, eos_token_ids=[])
    assert drafter.draft([7], 3, SamplingParams(), mx.random.key(0)).size == 0  # a one-token prompt
    assert drafter.draft([7, 8, 9], 3, SamplingParams(), mx.random.key(0)).size == 0  # nothing observed


# -- through the engine -------------------------------------------------------------------


@pytest.mark.parametrize("ordered,num_draft", [(False, 1), (False, 3), (False, 5), (True, 3)],
                         ids=["dense-1", "dense-3", "dense-5", "centroids-3"])
def test_greedy_output_equals_the_targets_own(tokenizer, vocab, g4_target, assistants, ordered, num_draft):
    assistant = assistants[ordered]
    engine = Engine(g4_target, Gemma4AssistantDrafter(assistant, vocab), eos_token_ids=[])
    for text in PROMPTS[:2]:  # both longer than the sliding window
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=20, num_draft=num_draft)
        assert [e.token for e in events] == reference_greedy(g4_target, prompt, 20)
        assert stats.host_syncs == stats.rounds
        assert stats.drafted > 0


@pytest.mark.parametrize("costs", [(1.0, 0.05), (0.0, 0.02)], ids=["plain-heavy", "cheap"])
def test_greedy_exact_with_the_automatic_length(tokenizer, vocab, g4_target, assistants, costs):
    engine = Engine(g4_target, Gemma4AssistantDrafter(assistants[False], vocab), eos_token_ids=[])
    engine.auto_draft().costs = FixedCosts(*costs)
    lengths = []
    for text in PROMPTS[:2] * 2:
        prompt = tokenizer.encode(text)
        rounds = list(engine.generate(prompt, GenerationConfig(max_tokens=20, policy=DraftPolicy(num_draft=None))))
        assert [t.token for r in rounds for t in r.tokens] == reference_greedy(g4_target, prompt, 20)
        lengths += [r.num_draft for r in rounds]
    # A drafter as dear as the target never drafts (its calibration's probe says so); a cheap one does.
    assert 0 in lengths and (max(lengths) > 0) == (costs[0] < 1.0)


@pytest.mark.parametrize("ordered", [False, True], ids=["dense", "centroids"])
def test_greedy_exact_when_drafts_stop_on_low_confidence(tokenizer, vocab, g4_target, assistants, ordered):
    engine = Engine(g4_target, Gemma4AssistantDrafter(assistants[ordered], vocab), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    events, stats = run(engine, prompt, max_tokens=20, num_draft=5, p_min=0.5)
    assert [e.token for e in events] == reference_greedy(g4_target, prompt, 20)
    _, full = run(engine, prompt, max_tokens=20, num_draft=5)
    assert 0 < stats.drafted / stats.rounds < full.drafted / full.rounds  # drafts were cut short


def test_greedy_exact_with_acceptances_and_k_eq_v():
    """A small vocabulary makes a random assistant right often enough to see
    accepted, rejected and fully accepted rounds; the target's full layers
    share K and V (the 31B/12B layout) with fewer K/V heads."""
    vocab = 8
    args = tiny.gemma4_args(vocab, window=6)
    args.attention_k_eq_v, args.num_global_key_value_heads = True, 1
    target = tiny.gemma4_target(args, seed=4, sharpness=1.0)
    model = tiny.gemma4_assistant(args, seed=5, ordered=True, centroids=2, top_k=1)
    engine = Engine(target, Gemma4AssistantDrafter(model, vocab), eos_token_ids=[])
    prompt = [1, 5, 2, 7, 3, 3, 0, 6, 4, 1, 2, 5]
    events, stats = run(engine, prompt, max_tokens=40, num_draft=3)
    assert [e.token for e in events] == reference_greedy(target, prompt, 40)
    assert 0 < stats.accepted < stats.drafted


def test_refuses_a_target_it_was_not_made_for(vocab, target, g4_args, assistant):
    with pytest.raises(SpecmlxError, match="only for Gemma 4 text targets"):
        Engine(target, Gemma4AssistantDrafter(assistant, vocab), eos_token_ids=[])  # a qwen2 target
    narrow = tiny.gemma4_target(tiny.gemma4_args(vocab, hidden=32), seed=2)
    with pytest.raises(SpecmlxError, match="width 64.*hidden size is 32"):
        Engine(narrow, Gemma4AssistantDrafter(assistant, vocab), eos_token_ids=[])
    with pytest.raises(SpecmlxError, match="more than the target's"):
        Engine(tiny.gemma4_target(g4_args, seed=0), Gemma4AssistantDrafter(assistant, vocab - 1), eos_token_ids=[])


# -- above temperature 0 ---------------------------------------------------------------------

VOCAB, LENGTH, RUNS = 3, 3, 400
PROMPT = [0, 1, 2, 2, 0, 1, 2]  # longer than the window of 4


def exact_distribution(target) -> dict[tuple[int, ...], float]:
    """P(x1..xL | PROMPT) under the target at temperature 1, by enumeration."""
    step: dict[tuple[int, ...], list[float]] = {}
    for n in range(LENGTH):
        for prefix in itertools.product(range(VOCAB), repeat=n):
            logits = target(mx.array(PROMPT + list(prefix))[None])[0, -1]
            step[prefix] = mx.exp(warp(logits, SAMPLED)).tolist()
    return {seq: float(np.prod([step[seq[:i]][seq[i]] for i in range(LENGTH)]))
            for seq in itertools.product(range(VOCAB), repeat=LENGTH)}


def test_sampled_output_follows_the_target_distribution():
    """Seeded runs with 2 drafts a round, several rounds each, match the target's
    exact distribution. The centroid head keeps 2 of 3 clusters, so q is zero
    on a third of the vocabulary: q must be exactly what the draft was drawn from."""
    args = tiny.gemma4_args(VOCAB, window=4, hidden=32)
    target = tiny.gemma4_target(args, seed=7, sharpness=1.0)
    model = tiny.gemma4_assistant(args, seed=9, ordered=True, centroids=3, top_k=2, sharpness=1.0)
    engine = Engine(target, Gemma4AssistantDrafter(model, VOCAB), eos_token_ids=[])
    counts: dict[tuple[int, ...], int] = {}
    rounds = 0
    for seed in range(RUNS):
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=LENGTH, sampling=SAMPLED, seed=seed, policy=DraftPolicy(num_draft=2)))
        seq = tuple(e.token for e in generation.token_events())
        counts[seq] = counts.get(seq, 0) + 1
        rounds += generation.stats.rounds
    assert 1 < rounds / RUNS < LENGTH  # accepts and rejections both happen
    probs = exact_distribution(target)
    total = sum(probs.values())  # 1 up to float32 rounding
    expect = {s: p / total * RUNS for s, p in probs.items()}
    big = [s for s in expect if expect[s] >= 5]
    small = [s for s in expect if expect[s] < 5]
    observed = [counts.get(s, 0) for s in big] + [sum(counts.get(s, 0) for s in small)]
    expected = [expect[s] for s in big] + [sum(expect[s] for s in small)]
    assert chisquare(observed, expected).pvalue > 1e-3


# -- files -------------------------------------------------------------------------------


def test_a_quantized_mlx_directory_loads(tmp_path, g4_args):
    import json

    import mlx.nn as nn

    model = tiny.gemma4_assistant(g4_args, seed=1, ordered=True)
    nn.quantize(model, group_size=32, bits=8, 
                class_predicate=lambda p, m: hasattr(m, "to_quantized") and "centroids" not in p)
    folder = tmp_path / "q"
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), model.weights())
    config = tiny.gemma4_assistant_config(g4_args, ordered=True)
    config["quantization"] = {"group_size": 32, "bits": 8}
    (folder / "config.json").write_text(json.dumps(config))
    again = load_gemma4_assistant(folder)
    assert isinstance(again.model.embed_tokens, nn.QuantizedEmbedding)
    assert isinstance(again.masked_embedding.centroids, nn.Linear)
    assert not isinstance(again.masked_embedding.centroids, nn.QuantizedLinear)
    h = mx.random.normal((32,))
    assert mx.array_equal(again.logits(h), model.logits(h))
    assert isinstance(again, Gemma4AssistantModel)
