"""Images behind the server: a tiny Qwen3.5-style vision-language checkpoint (`tests/tiny_vision.py`, mlx-vlm's
classes, Qwen3.5's own chat template) served on 127.0.0.1, its images sent as the clients send them: chat's
`image_url` (OpenAI's client), Anthropic's image blocks, in a message and in a tool_result (Anthropic's client),
and the Responses API's `input_image`. Each answer is mlx-vlm's own greedy answer to the same prompt, with
speculation and without; two different images never share a cached prefix; what cannot be read is one line."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.serve.images import placed
from specmlx.serve.openai.protocol import ChatRequest
from specmlx.serve.prompts import chat_prompt
from specmlx.vision.checkpoint import load_vision

from .. import tiny_vision
from .conftest import MODEL, greedy, on_thread, start

TEMPLATE = (Path(__file__).parents[1] / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
TOKENS = 12
DRAFTER = "drafter"  # the checkpoint's own text model, loaded again: it drafts without seeing the image


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


def asking(image: bytes, text: str = "What is in it?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": data_url(image)}}]}]


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    """The checkpoint, served with a text drafter, prompt lookup and none: (url, worker, loaded, path)."""
    tok = tiny_vision.tokenizer(TEMPLATE)
    root = tmp_path_factory.mktemp("vlm")
    path = tiny_vision.save(tok, root / MODEL)
    tiny_vision.save(tok, root / DRAFTER)  # the same weights: its text model is a drafter that never sees images
    with on_thread(str(path), [str(root / DRAFTER), NGRAM, NONE]) as held:
        mlx = held[0]
        vision = mlx.call(load_vision, path)
        background, worker = start(held, slots=2, vision=vision)
        with background as url:
            yield url, worker, held, path, vision


def expected(vlm, messages: list[dict]) -> tuple[list[int], list[int]]:
    """The prompt the server makes of `messages` and mlx-vlm's own greedy answer to it."""
    _, _, (mlx, target, _), path, vision = vlm
    request = ChatRequest.model_validate({"model": MODEL, "messages": messages})
    tokens, images = placed(chat_prompt(target.tokenizer, request, images=True), request, vision)
    return tokens, mlx.call(tiny_vision.reference, path, tokens, [s.picture for s in images.spans], TOKENS)


def chat(url: str, messages: list[dict], drafter: str, num_draft: int = 3) -> dict:
    body = {"model": MODEL, "messages": messages, "max_tokens": TOKENS, "temperature": 0,
            "speculative": {"drafter": drafter, "num_draft": num_draft, "sources": True}}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_image_is_answered_as_mlx_vlm_answers_it_with_speculation_and_without(vlm):
    """The prefill feeds the tower's rows at their multimodal positions: the answer is mlx-vlm's own, token
    for token, whether a drafter (that never sees the image) drafts or not."""
    from openai import OpenAI

    url = vlm[0]
    messages = asking(tiny_vision.png(0))
    tokens, reference = expected(vlm, messages)
    tok = vlm[2][1].tokenizer
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=TOKENS, temperature=0,
                                               extra_body={"speculative": {"drafter": NONE}})
        assert client.models.list().data[0].capabilities["images"] is True
    assert plain.usage.prompt_tokens == len(tokens)
    assert plain.choices[0].message.content == tok.decode(reference)
    assert chat(url, messages, NONE)["speculative"]["tokens"] == reference
    for drafter in (DRAFTER, NGRAM):
        drafted = chat(url, messages, drafter)
        assert drafted["speculative"]["tokens"] == reference, drafter
    assert drafted["speculative"]["drafted"] > 0 and chat(url, messages, DRAFTER)["speculative"]["accepted"] > 0


def test_two_images_never_share_a_cached_prefix(vlm):
    """The same text with another image (of the same size, so that the two shift positions alike) reuses at
    most the text before the image, and answers as mlx-vlm does; the same image again reuses the prompt past
    the image."""
    url = vlm[0]
    first, second = asking(tiny_vision.png(1)), asking(tiny_vision.png(2))
    tokens, _ = expected(vlm, first)
    start_of_image, image = tokens.index(vlm[4].image_token), tokens.count(vlm[4].image_token)
    chat(url, first, NONE)
    again = chat(url, first, NONE)  # a hybrid's cache reaches back to its last checkpoint, past the image here
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > start_of_image + image
    other = chat(url, second, NONE)
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] <= start_of_image
    assert other["speculative"]["tokens"] == expected(vlm, second)[1]


def screenshot_turn(image: bytes) -> list[dict]:
    """Claude Code's shape: the assistant called a tool, and its result holds a screenshot beside text."""
    return [{"role": "user", "content": "Take a screenshot."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "Here it is."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(image).decode()}}]}]}]


SCREENSHOT_TOOL = {"name": "screenshot", "description": "Take a screenshot", "input_schema": {"type": "object"}}
SCREENSHOT_FUNCTION = [{"type": "function", "function": {"name": "screenshot", "description": "Take a screenshot",
                                                         "parameters": {"type": "object"}}}]


def screenshot_chat(image: bytes) -> list[dict]:
    """`screenshot_turn` as chat's messages: the call, and its result a tool message with the image."""
    return [{"role": "user", "content": "Take a screenshot."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": [
                {"type": "text", "text": "Here it is."},
                {"type": "image_url", "image_url": {"url": data_url(image)}}]}]


def test_anthropics_image_blocks_in_a_message_and_in_a_tool_result_are_read(vlm):
    """Through Anthropic's client: an image block in a user's message, and one in a tool_result as Claude Code
    sends a screenshot, are the chat's image parts in their places: the answer is the chat route's own."""
    from anthropic import Anthropic

    url, image = vlm[0], tiny_vision.png(3)
    with Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120) as client:
        said = client.messages.create(model=MODEL, max_tokens=TOKENS, extra_body={"temperature": 0}, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is in it?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": base64.b64encode(image).decode()}}]}])
        tool = client.messages.create(model=MODEL, max_tokens=TOKENS, extra_body={"temperature": 0},
                                      tools=[SCREENSHOT_TOOL], messages=screenshot_turn(image))
    tok = vlm[2][1].tokenizer
    assert said.content[0].text == tok.decode(expected(vlm, asking(image, "What is in it?"))[1])
    body = {"model": MODEL, "messages": screenshot_chat(image), "max_tokens": TOKENS, "temperature": 0,
            "tools": SCREENSHOT_FUNCTION}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert tool.usage.input_tokens == r.json()["usage"]["prompt_tokens"] > 60
    assert "".join(b.text for b in tool.content if b.type == "text") == r.json()["choices"][0]["message"]["content"]


def test_a_responses_input_image_is_read(vlm):
    """The Responses API's `input_image` (a data URL) in a message is chat's image part: the same answer."""
    from openai import OpenAI

    url, image = vlm[0], tiny_vision.png(4)
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        response = client.responses.create(model=MODEL, max_output_tokens=TOKENS, temperature=0, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "What is in it?"},
                                         {"type": "input_image", "image_url": data_url(image)}]}])
    assert response.output_text == vlm[2][1].tokenizer.decode(expected(vlm, asking(image))[1])


@pytest.mark.parametrize("part, says", [
    ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "downloads nothing"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}}, "not base64"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"no image").decode()}},
     "cannot be read"),
    ({"type": "image_url", "image_url": {"url": data_url(tiny_vision.png(0, 300, 1))}}, "cannot be read"),  # 300:1
])
def test_an_image_that_cannot_be_read_is_one_line_and_the_server_keeps_serving(vlm, part, says):
    url = vlm[0]
    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, part]}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"].startswith("messages.0.content.1")
    assert chat(url, asking(tiny_vision.png(0)), NONE)["choices"][0]["message"]["content"]


def test_what_anthropic_and_responses_send_wrong_is_named_by_its_own_place(vlm):
    url = vlm[0]
    by_url = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]}]}
    r = httpx.post(f"{url}/v1/messages", json=by_url, timeout=60)
    assert r.status_code == 400 and "downloads nothing" in r.json()["error"]["message"], r.text
    turn = screenshot_turn(tiny_vision.png(0))
    turn[2]["content"][0]["content"][1]["source"]["data"] = "not base64!"
    r = httpx.post(f"{url}/v1/messages", json={"model": MODEL, "max_tokens": 4, "system": "Be brief.",
                                               "tools": [SCREENSHOT_TOOL], "messages": turn}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("messages.2.content.0.content.1.source.data: ")
    r = httpx.post(f"{url}/v1/responses", json={"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("input.0.content.0.image_url: "), r.text


def test_a_text_that_spells_the_image_token_is_text(vlm):
    """Without images, a prompt is the text's as it is: an agent reading a template file that spells the image
    token is answered, not refused for an image it never sent."""
    reply = chat(vlm[0], [{"role": "user", "content": "A template writes <|image_pad|> for an image."}], NONE)
    assert reply["usage"]["prompt_tokens"] > 10


def test_requests_with_and_without_images_at_once_each_get_their_own_answer(vlm):
    """In one batch: two images of different sizes (their rows shifted apart) and a text alone, drafted; each
    answer is its own prompt's reference."""
    from concurrent.futures import ThreadPoolExecutor

    url, _, (mlx, target, _), _, _ = vlm
    asks = [asking(tiny_vision.png(6)), asking(tiny_vision.png(7, 128, 64), "And this?"),
            [{"role": "user", "content": "No picture today."}]]
    with ThreadPoolExecutor(len(asks)) as pool:
        replies = list(pool.map(lambda messages: chat(url, messages, DRAFTER, 2), asks))
    for messages, reply in zip(asks[:2], replies):
        assert reply["speculative"]["tokens"] == expected(vlm, messages)[1]
    text = ChatRequest.model_validate({"model": MODEL, "messages": asks[2]})
    assert replies[2]["speculative"]["tokens"] == mlx.call(greedy, target.model,
                                                           chat_prompt(target.tokenizer, text), TOKENS)
