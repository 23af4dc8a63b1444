"""Anthropic's Messages API in the chat the engine answers: a Messages request as a chat request.

A Messages request becomes the `ChatRequest` the OpenAI chat route would get for the same
conversation, so it is rendered by the model's own chat template, queued, decoded and its calls
read back (`calls.py`) by the one chat path (`serving.py`, `tools.py`); only the answer's shape
differs (`render.py`). The translation:

- `system` (a string or text blocks) is the system message.
- A `tool_use` block is an assistant's tool call (its `input` as the call's arguments); a
  `tool_result` block is a `tool` message answering that call's id, in the order the blocks
  come among the turn's text.
- Consecutive turns of one role are one turn, as Anthropic combines them.
- A `thinking` (or `redacted_thinking`) block of an assistant's turn is dropped, as Anthropic's API
  lets a client do; a block of another kind (a document; an image where the model reads none, in a
  message or a tool_result) and Anthropic's server tools (`web_search_20250305`...) are refused by their place.
- An `image` block (base64; by URL or file it is refused: nothing is downloaded) of a user's turn or of a
  tool_result is chat's `image_url` part, a data URL, in its place among the text, for a model that
  reads images (`images`); Claude Code sends its screenshots in tool_results.
- `tool_choice`: `auto`, `none`, `any` (OpenAI's `required`), `tool` (a named function);
  `disable_parallel_tool_use` is `parallel_tool_calls: false`.
- Sampling fields keep their meaning, and what a request leaves unset is the server's default
  (`--temp`), as on chat, not Anthropic's 1.0. `metadata` is accepted and changes nothing; the
  `speculative` object is the chat route's.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Union

from ..chat import as_chat, chat_call, chat_tool_of, named_choice
from ..errors import APIError, not_served
from ..fields import Unserved
from ..images import picture_bytes
from ..openai.protocol import ChatRequest
from ..tools import refuse_duplicates
from .protocol import (MIN_THINKING, AnthropicMessage, AnthropicTool, CountTokensRequest, ImageBlock, MessagesRequest,
                       TextBlock, ThinkingBlock, ToolChoice, ToolResultBlock, ToolUseBlock)

# The separator of a turn's text blocks: blocks are paragraphs, and a turn's text is one.
BLOCKS_JOINED = "\n\n"


def text_of(blocks: Union[str, list[TextBlock], None]) -> str:
    """A string, or text blocks' text as one."""
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    return BLOCKS_JOINED.join(block.text for block in blocks)


def to_chat(request: CountTokensRequest, interleaved: bool = False, images: bool = False) -> ChatRequest:
    """The chat request of the same conversation, tools and sampling; refused (400) where the
    conversation cannot be one (a tool_result for no earlier call, a block in the wrong turn).
    `interleaved`: the client asked for interleaved thinking (`anthropic-beta`), as Claude Code does;
    `images`: the model reads images (else an image block is refused by its place)."""
    fields: dict[str, Any] = {"model": request.model, "messages": chat_messages(request, images)}
    if request.tools:
        fields["tools"] = [chat_tool(tool, i) for i, tool in enumerate(request.tools)]
        refuse_duplicates([tool.name for tool in request.tools], "tools.{}.name")
    if request.tool_choice is not None:
        fields |= chat_tool_choice(request.tool_choice)
    fields["chat_template_kwargs"] = {"enable_thinking": thinks(request)}
    if isinstance(request, MessagesRequest):
        check_thinking(request, interleaved)
        fields |= {"max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": request.top_p,
                   "top_k": request.top_k, "stop": request.stop_sequences, "stream": request.stream,
                   "speculative": request.speculative}
        fields |= response_format(request)
    return as_chat(fields)


def response_format(request: MessagesRequest) -> dict:
    """Structured outputs (`output_format`, or `output_config.format`) as chat's `response_format`: the same
    grammar constrains the answer, exact under speculation."""
    configured = request.output_config.format if request.output_config is not None else None
    wanted = request.output_format or configured
    if wanted is None:
        return {}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": wanted.schema_}}}


def thinks(request: CountTokensRequest) -> bool:
    """Whether the request enables thinking: the template's switch (`enable_thinking`), and the answer's
    thinking blocks (`render.py`)."""
    return request.thinking is not None and request.thinking.type in ("enabled", "adaptive")


def check_thinking(request: MessagesRequest, interleaved: bool = False) -> None:
    """Refuse (400) what Anthropic refuses of thinking: a budget under 1024, or not under max_tokens (with
    interleaved thinking the budget is the whole turn's, and may pass max_tokens, as Anthropic allows), and
    thinking beside a tool_choice that forces a call (`any`, `tool`)."""
    thinking, param = request.thinking, "thinking.budget_tokens"
    if thinks(request) and request.tool_choice is not None and request.tool_choice.type in ("any", "tool"):
        raise APIError(400, "Thinking may not be enabled when tool_choice forces tool use.", "invalid_value",
                       "tool_choice")
    if thinking is None or thinking.type != "enabled":
        return
    if thinking.budget_tokens is None:
        raise APIError(400, f"missing required parameter: {param}", "missing_required_parameter", param)
    if interleaved and thinking.budget_tokens >= MIN_THINKING:
        return
    if not MIN_THINKING <= thinking.budget_tokens < request.max_tokens:
        raise APIError(400, f"{param}: must be at least {MIN_THINKING} and less than max_tokens "
                       f"({request.max_tokens}), not {thinking.budget_tokens}", "invalid_value", param)


def chat_tool(tool: AnthropicTool, index: int) -> dict:
    if tool.type not in (None, "custom"):
        raise not_served(f"tools.{index}", tool.type, "custom tools (a name and an input_schema): Anthropic's "
                         "server tools run on Anthropic's servers")
    if tool.input_schema is None:
        raise APIError(400, f"missing required parameter: tools.{index}.input_schema", "missing_required_parameter",
                       f"tools.{index}.input_schema")
    if tool.input_schema.get("type") != "object":
        raise APIError(400, f"tools.{index}.input_schema: the input schema of tool {tool.name!r} must be a JSON "
                       f"schema of an object (\"type\": \"object\"), not of {tool.input_schema.get('type')!r}",
                       "invalid_value", f"tools.{index}.input_schema")
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return chat_tool_of(function)


def chat_tool_choice(choice: ToolChoice) -> dict:
    if choice.type == "tool":
        if choice.name is None:
            raise APIError(400, "tool_choice of type tool needs the tool's name", "missing_required_parameter",
                           "tool_choice.name")
        named: Any = named_choice(choice.name)
    else:
        named = {"any": "required"}.get(choice.type, choice.type)
    return {"tool_choice": named} | ({"parallel_tool_calls": False} if choice.disable_parallel_tool_use else {})


def turns(messages: list[AnthropicMessage]) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """Each turn's role and blocks (with their place in the request), consecutive messages of one role
    as one turn."""
    role, blocks = None, []
    for i, message in enumerate(messages):
        if not message.blocks():  # said here: pydantic would report the union's string arm
            raise APIError(400, f"messages.{i}.content: a message holds at least one content block",
                           "invalid_value", f"messages.{i}.content")
        if message.role != role and blocks:
            yield role, blocks
            blocks = []
        role = message.role
        blocks += [(f"messages.{i}.content.{j}", block) for j, block in enumerate(message.blocks())]
    if blocks:
        yield role, blocks


def chat_messages(request: CountTokensRequest, images: bool = False) -> list[dict]:
    """The conversation as chat messages: the system prompt, then each turn's."""
    messages = [{"role": "system", "content": text_of(request.system)}] if request.system else []
    called: set[str] = set()  # the ids of the calls made so far
    for role, blocks in turns(request.messages):
        messages += assistant_turn(blocks, called) if role == "assistant" else user_turn(blocks, called, images)
    return messages


def assistant_turn(blocks: list[tuple[str, Any]], called: set[str]) -> list[dict]:
    """An assistant's turn: its text, and its calls (arguments as JSON text, OpenAI's form)."""
    texts, calls = [], []
    for where, block in blocks:
        refuse_unserved(where, block)
        if isinstance(block, ImageBlock):  # a model's answer holds no images
            raise not_served(where, block.type, "text, tool_use and thinking blocks in an assistant's turn")
        if isinstance(block, ToolResultBlock):
            raise APIError(400, f"{where}: a tool_result block belongs in a user's message, after the "
                           "assistant's tool_use it answers", "invalid_value", where)
        if isinstance(block, ThinkingBlock):
            continue
        if isinstance(block, ToolUseBlock):
            calls.append(chat_call(block.id, block.name, json_text(block.input)))
            called.add(block.id)
        else:
            texts.append(block.text)
    return [{"role": "assistant", "content": BLOCKS_JOINED.join(texts)} | ({"tool_calls": calls} if calls else {})]


def user_turn(blocks: list[tuple[str, Any]], called: set[str], images: bool = False) -> list[dict]:
    """A user's turn: each tool result as a tool message, and the text (and images) between them as user
    messages."""
    messages, texts = [], []
    for where, block in blocks:
        refuse_unserved(where, block, images)
        if isinstance(block, (ToolUseBlock, ThinkingBlock)):
            raise APIError(400, f"{where}: a {block.type} block belongs in an assistant's message", "invalid_value",
                           where)
        if isinstance(block, (TextBlock, ImageBlock)):
            texts.append(piece(block, where))
            continue
        if block.tool_use_id not in called:
            raise APIError(400, f"{where}: this tool_result answers tool_use_id {block.tool_use_id!r}, which no "
                           "earlier tool_use block has", "invalid_value", f"{where}.tool_use_id")
        if texts:
            messages.append({"role": "user", "content": joined(texts)})
            texts = []
        # The template has no place for a failure: the model reads it in the result's text.
        content = joined(result_pieces(block.content, f"{where}.content", images))
        if block.is_error:
            content = "Error: " + content if isinstance(content, str) else [{"type": "text", "text": "Error: "}, *content]
        messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    if texts:
        messages.append({"role": "user", "content": joined(texts)})
    return messages


def refuse_unserved(where: str, block: Any, images: bool = False) -> None:
    if unserved(block, images):
        raise not_served(where, block.type, "text, tool_use, tool_result and thinking blocks")


def unserved(block: Any, images: bool) -> bool:
    """A block of a kind not served, or an image where the model reads none."""
    return isinstance(block, Unserved) or isinstance(block, ImageBlock) and not images


def result_pieces(content: Union[str, list, None], where: str, images: bool) -> list[Union[str, dict]]:
    """A tool_result's text and images, in order (`piece`); an image where the model reads none is refused by
    its place."""
    if not isinstance(content, list):
        return [content or ""]
    pieces = []
    for k, block in enumerate(content):
        if unserved(block, images):
            raise not_served(f"{where}.{k}", block.type, "text blocks")
        pieces.append(piece(block, f"{where}.{k}"))
    return pieces


def piece(block: Union[TextBlock, ImageBlock], where: str) -> Union[str, dict]:
    """A text block's text, or an image block as chat's image part (a data URL of its base64 source)."""
    if isinstance(block, TextBlock):
        return block.text
    source = block.source
    if source.type != "base64" or source.media_type is None or source.data is None:
        raise APIError(400, f"{where}.source: images are read from base64 sources only (a media_type and its "
                       f"data), not {source.type!r}: this server downloads nothing", "invalid_value",
                       f"{where}.source")
    url = f"data:{source.media_type};base64,{source.data}"
    picture_bytes(url, f"{where}.source.data")  # its base64 refused here, by its own place
    return {"type": "image_url", "image_url": {"url": url}}


def joined(pieces: list[Union[str, dict]]) -> Union[str, list[dict]]:
    """A message's content from its pieces: their text as one (blocks joined as paragraphs), or, with
    images, text and image parts in order."""
    if all(isinstance(p, str) for p in pieces):
        return BLOCKS_JOINED.join(pieces)
    parts: list[dict] = []
    texts: list[str] = []
    for p in [*pieces, None]:  # None: the end, where the last texts are joined
        if isinstance(p, str):
            texts.append(p)
            continue
        if BLOCKS_JOINED.join(texts):
            parts.append({"type": "text", "text": BLOCKS_JOINED.join(texts)})
        if p is not None:
            parts.append(p)
        texts = []
    return parts


def json_text(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False)
