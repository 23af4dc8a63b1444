"""Training an MTP head on a tiny target: it learns, checkpoints and resumes."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from specmlx.drafters.mtp import MTPDrafter
from specmlx.models.mtp import MTPConfig, MTPModel, load_mtp
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.train.corpus import Document, windows
from specmlx.train.features import collect, load_shard, shard_count
from specmlx.train.trainer import TrainConfig, Trainer, draft_vocabulary, shard_token_counts

from ..tiny import CORPUS


def corpus(n: int):
    return iter([Document(text, None, "Say it.") for text in CORPUS] * n)


@pytest.fixture(scope="module")
def features(tmp_path_factory, tokenizer, target):
    folder = tmp_path_factory.mktemp("features")
    collect(target, windows(tokenizer, corpus(20), 32), folder, tokens=32 * 4 * 5, progress=False)
    return folder


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
    assert shard_count(features) == 5
    shard = load_shard(features, 2)
    assert shard.tokens.shape == (4, 32) and shard.hidden.dtype == mx.float16
    again = target.model(shard.tokens[1:2])
    assert mx.allclose(again[0], shard.hidden[1].astype(mx.float32), atol=2e-2, rtol=1e-2)


def test_collection_resumes_where_it_stopped(features, tokenizer, target, tmp_path):
    for i in range(3):
        (tmp_path / f"shard-{i:05d}.safetensors").write_bytes(features.joinpath(f"shard-{i:05d}.safetensors").read_bytes())
    collect(target, windows(tokenizer, corpus(20), 32), tmp_path, tokens=32 * 4 * 5, progress=False)
    assert shard_count(tmp_path) == 5
    assert mx.array_equal(load_shard(tmp_path, 4).tokens, load_shard(features, 4).tokens)


def test_draft_vocabulary_takes_the_most_frequent_tokens(features, tokenizer):
    ids = draft_vocabulary(shard_token_counts(features), 40, always=(tokenizer.eos_token_id,))
    assert ids.size == 40 and ids.tolist() == sorted(set(ids.tolist()))
    assert tokenizer.eos_token_id in ids.tolist()


def test_training_raises_agreement_and_resumes(features, target, target_args, tmp_path, tokenizer, vocab):
    ids = draft_vocabulary(shard_token_counts(features), 96)
    head = head_for(target_args, ids)
    config = TrainConfig(steps=40, batch=2, lr=3e-3, warmup=5, checkpoint_every=20)
    trainer = Trainer(head, target, features, tmp_path, config)
    before = trainer.validate()
    seen = []
    after_train = trainer.train(progress=False, on_progress=seen.append)
    after = trainer.validate()
    assert after.loss < before.loss
    assert after.accept_1 > before.accept_1 + 0.1
    assert seen[-1].step == 40 and json.loads((tmp_path / "checkpoint" / "state.json").read_text())["step"] == 40
    # A new trainer with more steps picks up at step 40 with the same weights.
    again = Trainer(head_for(target_args, ids), target, features, tmp_path, TrainConfig(**{**config.__dict__, "steps": 41}))
    again.resume()
    assert again.step == 40
    assert mx.allclose(again.head.fc.weight, head.fc.weight)
    # The trained head drafts through the engine, exactly.
    drafter = MTPDrafter(load_mtp(tmp_path / "checkpoint"), vocab)
    prompt = tokenizer.encode(CORPUS[0])
    run = Engine(target, drafter, eos_token_ids=[]).generate(prompt, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=3)))
    tokens = [e.token for e in run]
    from ..test_engine import reference_greedy
    assert tokens == reference_greedy(target, prompt, 16)
    assert run.stats.accepted > 0


def test_draft_vocabulary_pads_a_tiny_corpus_and_keeps_forced_ids():
    from collections import Counter

    ids = draft_vocabulary(Counter({7: 5, 3: 2}), 6, always=(100,)).tolist()
    assert len(ids) == 6 and ids == sorted(ids) and {3, 7, 100} <= set(ids)
