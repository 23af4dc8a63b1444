"""Choosing how to shard, and refusing what cannot be sharded, before any weights load."""

from __future__ import annotations

import pytest

from specmlx.distributed.load import PIPELINE, TENSOR, sharding_of
from specmlx.errors import SpecmlxError

from .. import tiny


def test_tensor_parallel_where_there_is_shard_else_what_is_asked(dirs):
    assert sharding_of(dirs["target"]) == TENSOR  # qwen2 has both: tensor first
    assert sharding_of(dirs["target"], PIPELINE) == PIPELINE


def test_an_architecture_with_neither_is_refused_in_one_line(tmp_path, tokenizer, vocab):
    args = tiny.gemma3_args(vocab)
    path = tiny.save_model(tiny.build(args, seed=0), args, tokenizer, tmp_path / "gemma3")
    with pytest.raises(SpecmlxError, match=r"^gemma3_text models cannot be sharded \(mlx-lm gives them neither "
                       r"shard\(\) nor pipeline\(\)\)$"):
        sharding_of(path)


def test_a_kind_the_architecture_lacks_is_refused_naming_what_it_has(tmp_path, tokenizer, vocab):
    from mlx_lm.models import llama

    args = llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=vocab)
    path = tiny.save_model(tiny.build(args, seed=0), args, tokenizer, tmp_path / "llama")
    with pytest.raises(SpecmlxError, match=r"^llama models cannot be sharded by pipeline; they support tensor$"):
        sharding_of(path, PIPELINE)


def test_a_hybrid_target_is_refused_in_one_line(tmp_path, tokenizer, vocab):
    from .. import tiny_hybrid

    path = tiny_hybrid.save_qwen3_5(tiny_hybrid.tiny_qwen3_5(vocab, seed=0), vocab, tokenizer, tmp_path / "q35")
    with pytest.raises(SpecmlxError, match=r"^--distributed: targets with recurrent layers \(qwen3_5\) are not "
                       r"supported yet; one process runs them \(`specmlx generate`, `serve`, the chat app\)$"):
        sharding_of(path)


def test_a_block_drafter_is_refused_in_one_line(dirs, tmp_path, vocab):
    from specmlx.distributed.load import Ranks

    from .. import tiny_block

    model, raw = tiny_block.tiny_dflash(vocab, seed=0)
    path = tiny_block.save_dflash(model, raw, tmp_path / "dflash")
    with pytest.raises(SpecmlxError, match=r"^--distributed: block drafters \(dflash\) are not supported yet; one "
                       r"process runs them"):
        Ranks(group=None).settle(dirs["target"], [path])
