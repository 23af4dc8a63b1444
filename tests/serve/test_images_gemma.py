"""Gemma 4's images behind the server: a tiny Gemma 4 vision-language checkpoint (`tests/tiny_gemma_vision.py`,
mlx-vlm's classes, Gemma 4's own chat template) served on 127.0.0.1. An image sent through OpenAI's client (whole
and streamed), Anthropic's (in a message and in a tool_result, as Claude Code sends a screenshot) and the
Responses API is answered as mlx-vlm answers the same prompt, with speculation and without."""

from __future__ import annotations

import base64

import httpx
import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.serve.images import placed
from specmlx.serve.openai.protocol import ChatRequest
from specmlx.serve.prompts import chat_prompt
from specmlx.vision.checkpoint import load_vision

from .. import tiny_gemma_vision
from .conftest import MODEL, on_thread, start
from .test_images import SCREENSHOT_FUNCTION, SCREENSHOT_TOOL, asking, data_url, screenshot_chat, screenshot_turn

TOKENS = 12
DRAFTER = "drafter"  # the checkpoint's own text model, loaded again: it drafts without seeing the image


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    """The checkpoint, served with a text drafter, prompt lookup and none: (url, loaded, path, tower)."""
    tok = tiny_gemma_vision.tokenizer()
    root = tmp_path_factory.mktemp("gemma-vlm")
    path = tiny_gemma_vision.save(tok, root / MODEL)
    tiny_gemma_vision.save(tok, root / DRAFTER)
    with on_thread(str(path), [str(root / DRAFTER), NGRAM, NONE]) as held:
        vision = held[0].call(load_vision, path)
        background, _ = start(held, slots=2, vision=vision)
        with background as url:
            yield url, held, path, vision


def expected(vlm, messages: list[dict], **fields) -> tuple[list[int], list[int]]:
    """The prompt the server makes of `messages` and mlx-vlm's own greedy answer to it."""
    _, (mlx, target, _), path, vision = vlm
    request = ChatRequest.model_validate({"model": MODEL, "messages": messages, **fields})
    tokens, images = placed(chat_prompt(target.tokenizer, request, images=True), request, vision)
    return tokens, mlx.call(tiny_gemma_vision.reference, path, tokens, [s.picture for s in images.spans], TOKENS)


def test_an_image_is_answered_as_mlx_vlm_answers_it_whole_and_streamed(vlm):
    from openai import OpenAI

    url, (_, target, _), _, vision = vlm
    messages = asking(tiny_gemma_vision.png(0))
    tokens, reference = expected(vlm, messages)
    assert tokens.count(vision.image_token) == 6 and vision.before[0] in tokens and vision.after[0] in tokens
    text = target.tokenizer.decode(reference)
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        assert client.models.list().data[0].capabilities["images"] is True
        for drafter in (NONE, NGRAM, DRAFTER):
            said = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=TOKENS, temperature=0,
                                                  extra_body={"speculative": {"drafter": drafter, "num_draft": 3}})
            assert said.usage.prompt_tokens == len(tokens)
            assert said.choices[0].message.content == text, drafter
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=TOKENS, temperature=0,
                                                stream=True, extra_body={"speculative": {"drafter": DRAFTER}})
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text


def test_a_screenshot_in_a_tool_result_and_a_responses_image_are_read(vlm):
    """Anthropic's image block inside a tool_result, as Claude Code sends a screenshot, is the chat route's
    image in a tool message, where Gemma 4's template writes it; the Responses API's `input_image` is chat's
    image part."""
    from anthropic import Anthropic
    from openai import OpenAI

    url, (_, target, _), _, _ = vlm
    image = tiny_gemma_vision.png(3)
    with Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120) as client:
        tool = client.messages.create(model=MODEL, max_tokens=TOKENS, extra_body={"temperature": 0},
                                      tools=[SCREENSHOT_TOOL], messages=screenshot_turn(image))
    as_chat, tools = screenshot_chat(image), SCREENSHOT_FUNCTION
    # Anthropic's route thinks only when asked (`thinking`): the chat route asked not to
    tokens, reference = expected(vlm, as_chat, tools=tools, chat_template_kwargs={"enable_thinking": False})
    r = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": MODEL, "messages": as_chat, "tools": tools, "max_tokens": TOKENS, "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False}, "speculative": {"sources": True}})
    assert r.status_code == 200 and r.json()["speculative"]["tokens"] == reference, r.text
    assert tool.usage.input_tokens == len(tokens)
    assert "".join(b.text for b in tool.content if b.type == "text") == r.json()["choices"][0]["message"]["content"]
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        response = client.responses.create(model=MODEL, max_output_tokens=TOKENS, temperature=0, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "What is in it?"},
                                         {"type": "input_image", "image_url": data_url(image)}]}])
    assert response.output_text == target.tokenizer.decode(expected(vlm, asking(image))[1])


def test_an_image_that_cannot_be_read_is_one_line_and_the_server_keeps_serving(vlm):
    url = vlm[0]
    bad = base64.b64encode(b"no image").decode()
    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{bad}"}}]}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "cannot be read" in r.json()["error"]["message"], r.text
    body["messages"] = asking(tiny_gemma_vision.png(0))
    assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).status_code == 200
