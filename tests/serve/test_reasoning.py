"""A thinking model's reasoning apart from its answer: split as its text arrives, in any pieces; and
behind the server, a tiny model with Qwen3.5's own chat template (which opens `<think>`), through the official
clients, whole and streamed: OpenAI's chat (`reasoning_content`, `reasoning`), Anthropic's thinking
blocks (only where the request enables thinking, the template's switch), and a Responses reasoning item.
The answer's text, rejoined, is the target's own: the split changes what is shown, not what is made."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import mlx.core as mx
import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.prompting import encode_chat
from specmlx.serve.calls import Thought
from specmlx.serve.reasoning import ReasoningReader

from .. import tiny
from .conftest import MODEL, on_thread, start

THINK = ["<think>", "</think>"]
# Qwen3.5's own template (tests/templates/README.md says where from): thinking on opens the block in the
# prompt, off writes it closed.
TEMPLATE = (Path(__file__).parents[1] / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
LEAN = 2.2  # the target's head row for `</think>` scaled: it closes its block after about 20 tokens
TOKENS = 24
ASK = [{"role": "user", "content": "What is add?"}]


# ---- the reader ------------------------------------------------------------------------------------


def read(text: str, thinking: bool, step: int) -> list:
    reader, out = ReasoningReader("<think>", "</think>", thinking), []
    for at in range(0, len(text), step):
        out += reader.feed(text[at:at + step])
    return joined(out + reader.finish())


def joined(pieces: list) -> list:
    out: list = []
    for piece in pieces:
        if out and type(out[-1]) is type(piece):
            out[-1] = out[-1] + piece if isinstance(piece, str) else Thought(out[-1].text + piece.text)
        else:
            out.append(piece)
    return out


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_the_split_is_the_same_in_any_pieces(step):
    """The syntax's white space around the block is neither side's; a marker split across pieces is
    still a marker; a block the model opens itself is reasoning too."""
    answer = "\nLet me see: 2 + 2.\n</think>\n\nIt is 4. <think>Check.</think> Yes."
    assert read(answer, True, step) == [Thought("Let me see: 2 + 2."), "It is 4. ", Thought("Check."), "Yes."]
    assert read("<think>\nhm</think>\n\nok", False, step) == [Thought("hm"), "ok"]
    assert read("    return x", False, step) == ["    return x"]  # an answer outside the block keeps its own


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_gemma4s_channel_form_splits_as_its_markers_say(step):
    """Gemma 4 thinks in a channel (`<|channel>thought` ... `<channel|>`, mlx-lm's markers for it); a prompt
    with thinking off ends with an empty one, so its answer begins outside."""
    reader, out = ReasoningReader("<|channel>thought", "<channel|>", False), []
    text = "<|channel>thought\nThe user greets.<channel|>Hello!"
    for at in range(0, len(text), step):
        out += reader.feed(text[at:at + step])
    assert joined(out + reader.finish()) == [Thought("The user greets."), "Hello!"]


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_what_never_completes_a_marker_is_what_it_was(step):
    """Held back while it might begin one; at the end, the text it was (a length stop inside the
    reasoning leaves only reasoning)."""
    assert read("a <thin b <thi", False, step) == ["a <thin b <thi"]
    assert read("still thinking </thi", True, step) == [Thought("still thinking </thi")]


def test_calls_are_read_after_the_reasoning_and_never_inside_it():
    """A call a thinking model plans in its reasoning is thought; the one it makes after is a call."""
    from specmlx.events import Source, TokenEvent
    from specmlx.serve.calls import Call
    from specmlx.serve.reply import Feed

    from .test_tools import CALL, answer_around_calls, reader

    text = "\nI will call " + CALL + " now.\n</think>\n\n" + CALL
    tokens = [TokenEvent(i, text[i:i + 5], Source.TARGET) for i in range(0, len(text), 5)]
    _, done = answer_around_calls()
    def feed() -> Feed:
        return Feed(reader(), ReasoningReader("<think>", "</think>", True))

    streamed = feed()
    pieces = [p for t in tokens for p in streamed.piece([t]).pieces] + list(streamed.last(done).pieces)
    whole = feed().whole(tokens, done)
    for said in (joined(pieces), list(whole.pieces)):
        assert [type(p) for p in said] == [Thought, Call] and said[0].text == "I will call " + CALL + " now."
    assert whole.made == 1


def test_the_reasoning_tokens_are_counted_streamed_or_whole():
    """A token read inside the block is reasoning, its end marker among them; the same count either way."""
    from specmlx.events import Source, TokenEvent
    from specmlx.serve.reply import Feed

    from .test_tools import answer_around_calls

    texts = ["\nLet", " me", " see", "</think>", "\n\n", "It", " is", " 4."]
    tokens = [TokenEvent(i, t, Source.TARGET) for i, t in enumerate(texts)]
    _, done = answer_around_calls()
    streamed = Feed(None, ReasoningReader("<think>", "</think>", True))
    said = [streamed.piece(tokens[i:i + 3]) for i in range(0, len(tokens), 3)] + [streamed.last(done)]
    whole = Feed(None, ReasoningReader("<think>", "</think>", True)).whole(tokens, done)
    assert said[-1].thought == whole.thought == 4
    assert Feed(None, ReasoningReader("<think>", "</think>", False)).whole(tokens, done).thought == 0


# ---- behind the server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinking_loaded(tmp_path_factory):
    tokenizer = tiny.train_tokenizer(specials=tiny.SPECIALS + THINK, chat_template=TEMPLATE)
    vocab = len(tokenizer)
    args = tiny.qwen2_args(vocab)
    model = tiny.build(args, seed=0)
    row = mx.arange(vocab)[:, None] == tokenizer.convert_tokens_to_ids("</think>")
    model.load_weights([("lm_head.weight", mx.where(row, LEAN * model.lm_head.weight, model.lm_head.weight))],
                       strict=False)
    path = tiny.save_model(model, args, tokenizer, tmp_path_factory.mktemp("thinking") / MODEL)
    with on_thread(str(path), [NGRAM, NONE]) as held:
        yield held


@pytest.fixture(scope="module")
def url(thinking_loaded):
    background, _ = start(thinking_loaded)
    with background as base:
        yield base


@pytest.fixture(scope="module")
def raw(url, thinking_loaded):
    """The target's own answer as one text, markers and all: the same prompt, tokens in, no drafter."""
    _, target, _ = thinking_loaded

    def answer(thinking: bool = True) -> str:
        prompt = encode_chat(target.tokenizer, ASK, template_kwargs={"enable_thinking": thinking})
        reply = httpx.post(url + "/v1/completions", timeout=120, json={
            "model": MODEL, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0, "speculative": {"drafter": NONE}})
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["text"]
    return answer


def split(text: str) -> tuple[str, str]:
    """What the reader makes of an answer that begins inside the block: (reasoning, content)."""
    thought, _, content = text.partition("</think>")
    return thought.strip(), content.lstrip()


SPECULATIVE = {"speculative": {"drafter": NGRAM, "num_draft": 4}}  # drafting, exact all the same


def test_a_chat_answer_carries_its_reasoning_apart_whole_and_streamed(url, raw):
    from openai import OpenAI

    thought, content = split(raw())
    assert thought and content  # the tiny model thinks, then answers
    with OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        whole = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=TOKENS, temperature=0,
                                               extra_body=SPECULATIVE)
        chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=TOKENS, temperature=0,
                                                     stream=True, stream_options={"include_usage": True},
                                                     extra_body=SPECULATIVE))
    message, thought_tokens = whole.choices[0].message, whole.usage.completion_tokens_details.reasoning_tokens
    assert 0 < thought_tokens < whole.usage.completion_tokens  # the reasoning's, its end marker among them
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == thought_tokens
    assert message.content == content and "</think>" not in message.content
    assert message.model_extra["reasoning_content"] == message.model_extra["reasoning"] == thought
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == content
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == thought
    assert "".join((d.model_extra or {}).get("reasoning") or "" for d in deltas) == thought


def test_the_templates_switch_turns_thinking_off(url, raw):
    """`chat_template_kwargs` (vLLM's and llama.cpp's name): the block is written closed in the prompt, so
    the answer has no reasoning; what the server sets itself is refused."""
    asked = {"model": MODEL, "messages": ASK, "max_tokens": TOKENS, "temperature": 0}
    off = httpx.post(url + "/v1/chat/completions", timeout=120,
                     json=asked | {"chat_template_kwargs": {"enable_thinking": False}}).json()
    message = off["choices"][0]["message"]
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert "reasoning_content" not in message and message["content"] == raw(thinking=False).lstrip()
    refused = httpx.post(url + "/v1/chat/completions", timeout=30,
                         json=asked | {"chat_template_kwargs": {"add_generation_prompt": False}})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "chat_template_kwargs.add_generation_prompt"
    padded = httpx.post(url + "/v1/chat/completions", timeout=30,  # past the template, into the encoding
                        json=asked | {"chat_template_kwargs": {"padding": "max_length", "max_length": 10 ** 9}})
    assert padded.status_code == 400 and padded.json()["error"]["param"] == "chat_template_kwargs.max_length"


def test_anthropic_thinking_blocks_only_where_the_request_enables_thinking(url, raw):
    anthropic = pytest.importorskip("anthropic")

    thought, content = split(raw())
    # Claude Code's interleaved thinking: a budget past max_tokens is allowed, so the answer stays short.
    enabled = {"thinking": {"type": "enabled", "budget_tokens": 1024},
               "extra_headers": {"anthropic-beta": "interleaved-thinking-2025-05-14"}}
    asked = {"model": MODEL, "messages": ASK, "max_tokens": TOKENS, "extra_body": {"temperature": 0} | SPECULATIVE}
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60) as claude:
        thinking = claude.messages.create(**asked, **enabled)
        with claude.messages.stream(**asked, **enabled) as stream:
            events = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in stream]
            streamed = stream.get_final_message()
        plain = claude.messages.create(**asked)
    for message in (thinking, streamed):
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].thinking == thought and message.content[0].signature == ""
        assert message.content[1].text == content
    deltas = [delta for kind, delta in events if kind == "content_block_delta"]
    assert deltas.index("signature_delta") < deltas.index("text_delta") and "thinking_delta" in deltas
    assert [b.type for b in plain.content] == ["text"]  # thinking off: the template wrote the block closed
    assert plain.content[0].text == raw(thinking=False).lstrip()


def test_a_response_has_its_reasoning_item_before_its_message(url, raw):
    from openai import OpenAI

    thought, content = split(raw())
    with OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        whole = client.responses.create(model=MODEL, input=ASK[0]["content"], max_output_tokens=TOKENS,
                                        temperature=0, extra_body=SPECULATIVE)
        events = list(client.responses.create(model=MODEL, input=ASK[0]["content"], max_output_tokens=TOKENS,
                                              temperature=0, stream=True, extra_body=SPECULATIVE))
    assert [item.type for item in whole.output] == ["reasoning", "message"]
    assert whole.output[0].content[0].text == thought and whole.output_text == content
    assert 0 < whole.usage.output_tokens_details.reasoning_tokens < whole.usage.output_tokens
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thought
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == content
    finished = events[-1].response
    assert [item.type for item in finished.output] == ["reasoning", "message"]
    assert json.loads(finished.model_dump_json())["output"][0]["content"][0]["text"] == thought


def test_a_response_format_holds_the_answer_after_the_reasoning(url, raw, thinking_loaded):
    """The grammar leaves the reasoning to the model and holds what follows its end to JSON: without
    that, JSON from the first token would be read as reasoning. (The reasoning is held to valid UTF-8,
    as every grammar's text is: the tiny model's random bytes are not always, so its reasoning differs.)"""
    from specmlx.serve.tools import json_after_thought

    from .test_tools import accepts

    _, target, _ = thinking_loaded
    grammar = json_after_thought({"type": "object"}, target.tokenizer)
    assert accepts(grammar, target.tokenizer, 'Let me see.</think>\n\n{"a": 1}')
    assert not accepts(grammar, target.tokenizer, '{"a": 1}') and not accepts(grammar, target.tokenizer, "x</think>y")
    reply = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": MODEL, "messages": ASK, "max_tokens": TOKENS + 8, "temperature": 0,
        "response_format": {"type": "json_object"}} | SPECULATIVE).json()
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"].lstrip().startswith("{")
