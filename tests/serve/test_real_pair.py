"""The real default preset behind the server: one greedy chat through OpenAI's client equals
`specmlx generate` and the target alone. Slow: the pair loads once, in this module only."""

from __future__ import annotations

import gc

import mlx.core as mx
import pytest

from specmlx import presets
from specmlx.drafters import NGRAM, NONE
from specmlx.engine import Engine, GenerationConfig
from specmlx.generate import encode
from specmlx.loading import load_models
from specmlx.mlx_thread import MLXThread
from specmlx.presets.fetch import fetch_preset

from .conftest import start

pytestmark = pytest.mark.slow

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
TOKENS = 32


@pytest.fixture(scope="module")
def real():
    preset = presets.get_preset(presets.default_preset_name())
    fetch_preset(preset, progress=False, log=lambda m: None)
    mlx = MLXThread()
    loaded = mlx.call(load_models, preset.name, [None, NGRAM, NONE])
    held = [mlx, loaded.target, {d.name: d for d in loaded.drafters}]
    del loaded
    yield held
    # The next module loads the pair again: free this one first. A server's objects (FastAPI's
    # routes, uvicorn's loop) form reference cycles, so only the collector frees what they hold;
    # and pytest keeps a fixture's value until its teardown ends, so the list is emptied.
    mlx.close()
    held.clear()
    gc.collect()
    mx.clear_cache()


def test_a_greedy_chat_through_the_openai_client_equals_specmlx_generate(real):
    from openai import OpenAI

    mlx, target, drafters = real
    default = next(iter(drafters))

    def direct(drafter: str) -> list[int]:  # what `specmlx generate --chat` runs
        prompt = encode(target.tokenizer, PROMPT, chat=True, system=None)
        engine = Engine(target.model, drafters[drafter].fresh(), target.tokenizer)
        return [e.token for e in engine.generate(prompt, GenerationConfig(max_tokens=TOKENS)).token_events()]

    background, worker = start(real, max_tokens=TOKENS)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600) as client:
        def served(drafter: str):
            return client.chat.completions.create(
                model=target.name, messages=[{"role": "user", "content": PROMPT}], temperature=0,
                extra_body={"speculative": {"drafter": drafter, "sources": True}})

        reply, alone = served("default"), served(NONE)
    expected = mlx.call(direct, default)
    assert reply.speculative["tokens"] == expected == alone.speculative["tokens"]
    assert reply.speculative["drafter"] == default and reply.speculative["accepted"] > 0
    assert reply.usage.completion_tokens == TOKENS
