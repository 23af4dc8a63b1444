"""The real default preset behind the server: one greedy chat through OpenAI's client equals
`specmlx generate` and the target alone. Slow: the pair loads once, in this module only."""

from __future__ import annotations

import gc
import json

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


CHATS = [PROMPT, "Explain what a hash map is in two sentences.",
         "Write a bash one-liner that counts the lines of every .py file.", "List three uses of Python's zip."]


def tie_note(model, prompt: list[int], alone: list[int], batched: list[int]) -> str:
    """Where a batched answer parts from the answer alone, how close the target's own top two
    logits were there (one row, no batch): only a near-tie may flip under batched arithmetic."""
    at = next(i for i, (a, b) in enumerate(zip(alone, batched)) if a != b)
    logits = model(mx.array(prompt + alone[:at])[None])[0, -1]
    top = mx.sort(logits)[-2:].tolist()
    return f"parts at token {at}: {alone[at]} alone, {batched[at]} batched; top two logits there {top}"


def test_four_greedy_chats_at_once_each_equal_specmlx_generate_alone(real):
    """Four requests share every round (a batch of four); each is what `specmlx generate --chat`
    writes alone, and each accepted drafts."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from openai import OpenAI

    mlx, target, drafters = real
    default = next(iter(drafters))
    prompts = [encode(target.tokenizer, text, chat=True, system=None) for text in CHATS]

    def direct(prompt: list[int]) -> list[int]:
        engine = Engine(target.model, drafters[default].fresh(), target.tokenizer)
        return [e.token for e in engine.generate(prompt, GenerationConfig(max_tokens=TOKENS)).token_events()]

    alone = [mlx.call(direct, p) for p in prompts]
    background, worker = start(real, max_tokens=TOKENS, slots=4, max_batch=4)
    line = Barrier(4, timeout=60)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600) as client:
        def served(text: str):
            line.wait()
            return client.chat.completions.create(
                model=target.name, messages=[{"role": "user", "content": text}], temperature=0,
                extra_body={"speculative": {"sources": True}})

        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(served, CHATS))
    assert worker.runner.batch.widest == 4
    for prompt, expected, reply in zip(prompts, alone, replies):
        tokens = reply.speculative["tokens"]
        assert tokens == expected, mlx.call(tie_note, target.model, prompt, expected, tokens)
        assert reply.speculative["accepted"] > 0


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city's name"}},
                   "required": ["city"]}}}]


def test_a_tool_round_trip_with_the_real_target_parses_its_call_and_accepts_drafts(real):
    """A call the real target must make parses with valid JSON arguments, token for token what the engine
    writes under the same grammar; the tool's result goes into the next turn's prompt; both answers accepted
    drafts. Left to choose, the 1.5B writes its calls as JSON text (a ```json block), not in its template's
    <tool_call> syntax; made to call, it calls again and again (other cities): `required` with
    parallel_tool_calls false holds it to one call."""
    from openai import OpenAI

    from specmlx.prompting import encode_chat
    from specmlx.serve.openai.protocol import ChatRequest
    from specmlx.serve.tools import forced_calls, template_messages, template_tools

    mlx, target, drafters = real
    default = next(iter(drafters))
    ask = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    fields = {"tools": WEATHER, "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0}

    def direct() -> list[int]:
        request, tokenizer = ChatRequest(model=target.name, messages=ask, **fields), target.tokenizer
        prompt = encode_chat(tokenizer, template_messages(request, tokenizer), tools=template_tools(request, tokenizer))
        engine = Engine(target.model, drafters[default].fresh(), tokenizer)
        config = GenerationConfig(max_tokens=64, grammar=forced_calls(request, tokenizer))
        return [e.token for e in engine.generate(prompt, config).token_events()]

    background, _ = start(real, max_tokens=64)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=900) as client:
        def served(messages, **overrides):
            return client.chat.completions.create(model=target.name, messages=messages, **(fields | overrides),
                                                  extra_body={"speculative": {"sources": True}})

        first = served(ask)
        [call] = first.choices[0].message.tool_calls
        history = [*ask, first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 21, "sky": "clear"}'}]
        final = served(history, tool_choice="auto")
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"].lower().startswith("paris")
    assert first.speculative["tokens"] == mlx.call(direct)
    assert first.speculative["accepted"] > 0 and final.speculative["accepted"] > 0
    assert final.usage.prompt_tokens > first.usage.prompt_tokens + first.usage.completion_tokens
