"""A rank that does not lead, without ranks: what it refuses before any collective."""

from __future__ import annotations

import pytest

from specmlx.distributed.follower import Follower, follow
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError

from .. import tiny


class NoCollectives:
    """A lockstep that must not be reached: the refusal comes first, as on rank 0."""

    vocab = False

    def __getattr__(self, name):
        raise AssertionError(f"the follower reached the lockstep ({name}) before refusing")


def test_a_prompt_past_the_window_is_refused_as_rank_0_refuses_it(vocab):
    engine = Engine(tiny.build(tiny.qwen2_args(vocab, max_position_embeddings=48), seed=0), Follower("drafter"),
                    eos_token_ids=[])
    with pytest.raises(SpecmlxError, match=r"do not fit the target's context window of 48 tokens"):
        follow(engine, list(range(3, 43)), GenerationConfig(max_tokens=10), NoCollectives())
    with pytest.raises(SpecmlxError, match="the prompt is empty"):
        follow(engine, [], GenerationConfig(max_tokens=4), NoCollectives())
    assert engine.cache_length() == 0  # nothing prefilled
