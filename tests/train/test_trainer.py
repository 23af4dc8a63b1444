"""Training an MTP head on a tiny target: it learns, checkpoints and resumes."""

from __future__ import annotations

import json
from itertools import islice

import mlx.core as mx
from mlx.utils import tree_flatten
import pytest

from specmlx.drafters.mtp import MTPDrafter
from specmlx.models.mtp import MTPConfig, MTPModel, load_mtp
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.train.answers import answer_windows
from specmlx.train.corpus import Document, windows
from specmlx.train.features import ANSWER, Features, Window, collect, load_shard, shard_count, token_count
from specmlx.prompting import PromptRow
from specmlx.train.trainer import (TrainConfig, Trainer, draft_vocabulary, hidden_rms, start_from_last_layer,
                                   start_near_the_target)

from .. import tiny
from ..tiny import CORPUS


def corpus(n: int):
    return iter([Document(text, None, "Say it.") for text in CORPUS] * n)


def text(tokenizer):
    return lambda skip: (Window(w, [ANSWER] * len(w)) for w in islice(windows(tokenizer, corpus(20), 32), skip, None))


@pytest.fixture(scope="module")
def features(tmp_path_factory, tokenizer, target) -> Features:
    root = Features(tmp_path_factory.mktemp("features"))
    collect(target, text(tokenizer), root.text, tokens=32 * 4 * 5, progress=False)
    requests = [PromptRow(str(i), "", f"Say {i} things.") for i in range(8)]
    collect(target, answer_windows(target, tokenizer, requests, 48, 16, 4, {2}), root.held_out, 10**6, progress=False)
    return root


def head_for(target_args, draft_ids: mx.array) -> MTPModel:
    mx.random.seed(0)
    head = MTPModel(MTPConfig(
        target_hidden_size=target_args.hidden_size, target_vocab_size=target_args.vocab_size,
        hidden_size=target_args.hidden_size, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, draft_vocab_size=draft_ids.size, rope_theta=10000.0,
    ))
    head.set_draft_ids(draft_ids)
    return head


def test_collected_hidden_states_are_the_targets(features, target):
    assert shard_count(features.text) == 5 and shard_count(features.held_out) == 2
    assert token_count(features.text) == 32 * 4 * 5
    shard = load_shard(features.text, 2)
    assert shard.tokens.shape == (4, 32) and shard.hidden.dtype == mx.float16
    again = target.model(shard.tokens[1:2])
    assert mx.allclose(again[0], shard.hidden[1].astype(mx.float32), atol=2e-2, rtol=1e-2)


def test_collection_resumes_where_it_stopped(features, tokenizer, target, tmp_path):
    for i in range(3):
        (tmp_path / f"shard-{i:05d}.safetensors").write_bytes(features.text.joinpath(f"shard-{i:05d}.safetensors").read_bytes())
    asked = []

    def source(skip):
        asked.append(skip)
        return text(tokenizer)(skip)

    assert collect(target, source, tmp_path, tokens=32 * 4 * 5, progress=False) == 5
    assert asked == [3 * 4]  # the windows already saved are not computed again
    assert shard_count(tmp_path) == 5
    assert mx.array_equal(load_shard(tmp_path, 4).tokens, load_shard(features.text, 4).tokens)


def test_training_set_takes_sources_in_turn_up_to_a_token_limit(features, tmp_path):
    mixed = Features(tmp_path)
    for name in ("answers", "text"):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"shard-{i:05d}.safetensors").write_bytes(
                features.text.joinpath(f"shard-{i:05d}.safetensors").read_bytes())
    every = mixed.training()
    assert [(r.folder.name, r.index) for r in every.shards] == [
        ("answers", 0), ("text", 0), ("answers", 1), ("text", 1), ("answers", 2), ("text", 2)]
    assert every.tokens == 6 * 4 * 32
    assert [r.folder.name for r in mixed.training(3 * 4 * 32).shards] == ["answers", "text", "answers"]
    assert {r.folder.name for r in mixed.training(source="answers").shards} == {"answers"}
    assert mixed.training(source="text").tokens == 3 * 4 * 32


def test_draft_vocabulary_takes_the_most_frequent_tokens(features, tokenizer):
    ids = draft_vocabulary(features.training().token_counts(), 40, always=(tokenizer.eos_token_id,))
    assert ids.size == 40 and ids.tolist() == sorted(set(ids.tolist()))
    assert tokenizer.eos_token_id in ids.tolist()


def test_training_raises_agreement_and_resumes(features, target, target_args, tmp_path, tokenizer, vocab):
    ids = draft_vocabulary(features.training().token_counts(), 96)
    head = head_for(target_args, ids)
    config = TrainConfig(steps=40, batch=2, lr=3e-3, warmup=5, checkpoint_every=20)
    trainer = Trainer(head, target, features.training(), features.held_out, tmp_path, config)
    before = trainer.validate()
    seen = []
    after_train = trainer.train(progress=False, on_progress=seen.append)
    after = trainer.validate()
    assert after.loss < before.loss
    assert after.accept_1 > before.accept_1 + 0.1
    assert seen[-1].step == 40 and json.loads((tmp_path / "checkpoint" / "state.json").read_text())["step"] == 40
    logged = [json.loads(line) for line in (tmp_path / "training-log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [20, 40]  # held-out agreement at each checkpoint
    assert logged[-1]["held_out"]["accept_1"] == pytest.approx(after.accept_1)
    # A new trainer with more steps picks up at step 40 with the same weights.
    again = Trainer(head_for(target_args, ids), target, features.training(), features.held_out, tmp_path,
                    TrainConfig(**{**config.__dict__, "steps": 41}))
    again.resume()
    assert again.step == 40
    assert mx.allclose(again.head.fc.weight, head.fc.weight)
    # The trained head drafts through the engine, exactly.
    drafter = MTPDrafter(load_mtp(tmp_path / "checkpoint"), vocab)
    prompt = tokenizer.encode(CORPUS[0])
    run = Engine(target, drafter, eos_token_ids=[]).generate(prompt, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=3)))
    tokens = [e.token for e in run.token_events()]
    from ..test_engine import reference_greedy
    assert tokens == reference_greedy(target, prompt, 16)
    assert run.stats.accepted > 0


def test_draft_vocabulary_pads_a_tiny_corpus_and_keeps_forced_ids():
    from collections import Counter

    ids = draft_vocabulary(Counter({7: 5, 3: 2}), 6, always=(100,)).tolist()
    assert len(ids) == 6 and ids == sorted(ids) and {3, 7, 100} <= set(ids)


def test_a_head_can_start_from_the_targets_last_layer(features, target, target_args):
    ids = mx.arange(64, dtype=mx.int32)
    head = MTPModel(MTPConfig(
        target_hidden_size=target_args.hidden_size, target_vocab_size=target_args.vocab_size,
        hidden_size=target_args.hidden_size, intermediate_size=target_args.intermediate_size,
        num_attention_heads=target_args.num_attention_heads, num_key_value_heads=target_args.num_key_value_heads,
        draft_vocab_size=64, rope_theta=10000.0,
    ))
    head.set_draft_ids(ids)
    start_from_last_layer(head, target, hidden_rms(features.held_out))
    last = target.model.layers[-1]
    assert mx.array_equal(head.layers[0].mlp.down_proj.weight, last.mlp.down_proj.weight)
    assert mx.array_equal(head.layers[0].self_attn.q_proj.bias, last.self_attn.q_proj.bias)
    narrow = head_for(target_args, ids)  # MLP width 128 = the tiny target's: refuse a different one
    narrow.layers[0].mlp.down_proj.weight = narrow.layers[0].mlp.down_proj.weight[:, :100]
    start_near_the_target(narrow, 1.0)
    with pytest.raises(SpecmlxError, match="--init last-layer"):
        start_from_last_layer(narrow, target, 1.0)


def test_collection_resumes_after_a_short_last_shard(target, tokenizer, tmp_path):
    requests = [PromptRow(str(i), "", f"Say {i}.") for i in range(7)]
    seen = []

    def source(reqs):
        make = answer_windows(target, tokenizer, reqs, 48, 8, 4, {2})
        return lambda skip: (seen.append(skip), make(skip))[1]

    collect(target, source(requests[:6]), tmp_path, 10**6, progress=False)
    assert shard_count(tmp_path) == 2 and load_shard(tmp_path, 1).tokens.shape[0] == 2
    collect(target, source(requests), tmp_path, 10**6, progress=False)  # the list grew by one
    assert seen == [0, 6] and shard_count(tmp_path) == 3 and load_shard(tmp_path, 2).tokens.shape[0] == 1


def test_too_few_windows_for_a_batch_is_one_line(features, target, target_args):
    one = features.training(1)
    with pytest.raises(SpecmlxError, match="fewer than a batch of 8"):
        Trainer(head_for(target_args, mx.arange(64, dtype=mx.int32)), target, one, features.held_out,
                features.root, TrainConfig(batch=8))


def test_the_last_layer_start_reads_a_quantized_target(target, target_args):
    import mlx.nn as nn

    from specmlx.train.trainer import dense_parameters

    quantized = tiny.build(target_args, seed=0)
    nn.quantize(quantized, group_size=32, bits=8)
    dense = dense_parameters(quantized.model.layers[-1])
    plain = dict(tree_flatten(target.model.layers[-1].parameters()))
    assert set(dense) == set(plain)
    for name, value in plain.items():
        assert mx.allclose(dense[name], value, atol=0.05), name


TAPS = (0, 1)  # the tiny target's layers: what enters each is kept


@pytest.fixture(scope="module")
def tapped(tmp_path_factory, tokenizer, target) -> Features:
    """The held-out answers of `features`, collected again with taps, and text windows with them."""
    root = Features(tmp_path_factory.mktemp("tapped"))
    collect(target, text(tokenizer), root.text, tokens=32 * 4 * 5, progress=False, taps=TAPS)
    requests = [PromptRow(str(i), "", f"Say {i} things.") for i in range(8)]
    collect(target, answer_windows(target, tokenizer, requests, 48, 16, 4, {2}, TAPS), root.held_out, 10**6,
            progress=False, taps=TAPS)
    return root


def test_collection_keeps_what_enters_the_tapped_layers(tapped, target):
    from specmlx.hidden import decoder_taps

    for folder in (tapped.text, tapped.held_out):  # computed here, and kept while the target answered
        shard = load_shard(folder, 1)
        assert shard.layers == TAPS and shard.taps.dtype == mx.float16
        real = int((shard.mask[0] > 0).sum().item())
        hidden, taps = decoder_taps(target, shard.tokens[:1, :real], None, TAPS)
        assert mx.allclose(shard.taps[0, :real].astype(mx.float32), taps[0], atol=2e-2, rtol=1e-2)
        assert mx.allclose(shard.hidden[0, :real].astype(mx.float32), hidden[0], atol=2e-2, rtol=1e-2)


def test_a_collection_resumes_only_with_the_same_taps(features, tapped, tokenizer, target, tmp_path):
    for source, asked in ((features.text, TAPS), (tapped.text, ()), (tapped.text, (1,))):
        folder = tmp_path / f"{source.parent.name}-{len(asked)}"
        folder.mkdir()
        (folder / "shard-00000.safetensors").write_bytes((source / "shard-00000.safetensors").read_bytes())
        with pytest.raises(SpecmlxError, match="collect into a new --out"):
            collect(target, text(tokenizer), folder, tokens=32 * 4 * 5, progress=False, taps=asked)


def fused_head(target_args, ids: mx.array, layers=TAPS) -> MTPModel:
    mx.random.seed(0)
    head = MTPModel(MTPConfig(
        target_hidden_size=target_args.hidden_size, target_vocab_size=target_args.vocab_size,
        hidden_size=target_args.hidden_size, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, draft_vocab_size=ids.size, rope_theta=10000.0, fused_layers=layers,
    ))
    head.set_draft_ids(ids)
    return head


def test_a_fused_head_starts_as_the_final_hidden_state_and_learns(tapped, target, target_args, tmp_path):
    ids = draft_vocabulary(tapped.training(source="text").token_counts(), 96)
    head = fused_head(target_args, ids)
    start_near_the_target(head, hidden_rms(tapped.held_out))
    shard = load_shard(tapped.held_out, 0)
    taps, hidden = shard.taps.astype(mx.float32), shard.hidden.astype(mx.float32)
    assert mx.allclose(head.fused(taps, hidden), hidden, atol=1e-5)  # the identity start, as an unfused head's
    config = TrainConfig(steps=40, batch=2, lr=3e-3, warmup=5, checkpoint_every=40)
    trainer = Trainer(head, target, tapped.training(source="text"), tapped.held_out, tmp_path, config)
    before = trainer.validate()
    trainer.train(progress=False)
    after = trainer.validate()
    assert after.loss < 0.7 * before.loss and after.accept_1 > before.accept_1
    assert mx.abs(head.fuse.weight[:, : -target_args.hidden_size]).max().item() > 0  # the taps' weights learned
    again = load_mtp(tmp_path / "checkpoint")
    assert again.config.fused_layers == TAPS
    assert mx.allclose(again.fused(taps, hidden), head.fused(taps, hidden), atol=1e-5)


def test_more_passes_add_later_draft_steps_to_the_loss(features, target, target_args, tmp_path):
    ids = draft_vocabulary(features.training().token_counts(), 96)
    batch = next(Trainer(head_for(target_args, ids), target, features.training(), features.held_out, tmp_path,
                         TrainConfig(batch=2)).batches(0))
    losses = []
    for passes in (1, 2, 3):
        trainer = Trainer(head_for(target_args, ids), target, features.training(), features.held_out, tmp_path,
                          TrainConfig(batch=2, passes=passes))
        loss, (first, second) = trainer.losses(batch)
        losses.append(loss.item())
        if passes == 1:
            assert second.item() == 0.0
    assert losses[0] < losses[1] < losses[2]


def test_answer_only_leaves_the_request_out_of_the_loss(features, target, target_args, tmp_path):
    from specmlx.train.trainer import Batch, trimmed

    ids = draft_vocabulary(features.training().token_counts(), 96)
    shard = load_shard(features.held_out, 0)
    whole = trimmed(Batch(shard.tokens, shard.hidden, shard.mask))
    request = Batch(whole.tokens, whole.hidden, mx.where(whole.mask > 0, 1, 0).astype(mx.uint8))  # all CONTEXT
    for answer_only in (False, True):
        trainer = Trainer(head_for(target_args, ids), target, features.training(), features.held_out, tmp_path,
                          TrainConfig(batch=2, answer_only=answer_only))
        assert trainer.losses(whole)[0].item() > 0
        assert (trainer.losses(request)[0].item() == 0) == answer_only


def test_a_fused_head_is_refused_features_without_its_layers(features, tapped, target, target_args, tmp_path):
    ids = mx.arange(64, dtype=mx.int32)
    for source, layers in ((features, TAPS), (tapped, (1,))):
        with pytest.raises(SpecmlxError, match="but the head fuses"):
            Trainer(fused_head(target_args, ids, layers), target, source.training(), source.held_out, tmp_path,
                    TrainConfig(batch=2))
