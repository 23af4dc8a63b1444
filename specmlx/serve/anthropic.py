"""Anthropic's Messages API in: its request bodies, and their translation into a chat request.

A Messages request becomes the `ChatRequest` the OpenAI chat route would get for the same
conversation, so it is rendered by the model's own chat template, queued, decoded and its calls
read back (`calls.py`) by the one chat path (`serving.py`, `tools.py`); only the answer's shape
differs (`anthropic_render.py`). The translation:

- `system` (a string or text blocks) is the system message.
- A `tool_use` block is an assistant's tool call (its `input` as the call's arguments); a
  `tool_result` block is a `tool` message answering that call's id, in the order the blocks
  come among the turn's text.
- Consecutive turns of one role are one turn, as Anthropic combines them.
- `tool_choice`: `auto`, `none`, `any` (OpenAI's `required`), `tool` (a named function);
  `disable_parallel_tool_use` is `parallel_tool_calls: false`.
- Sampling fields keep their meaning, and what a request leaves unset is the server's default
  (`--temp`), as on chat, not Anthropic's 1.0. `metadata` is accepted and changes nothing; the
  `speculative` object is the chat route's.

Fields Anthropic's clients send that change nothing here (`cache_control` on a block: the slots
reuse any shared prefix anyway) are ignored, as on the OpenAI routes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from .errors import APIError
from .protocol import FUNCTION_NAME, MAX_CALL_ID, MAX_TOOLS, ChatRequest, Speculative

# The separator of a turn's text blocks: blocks are paragraphs, and a turn's text is one.
BLOCKS_JOINED = "\n\n"


class TextBlock(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ToolUseBlock(BaseModel):
    """A call an assistant made: its id, function and arguments (an object, not JSON text as OpenAI's)."""

    type: Literal["tool_use"]
    id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    """A tool's answer to the call `tool_use_id`; `is_error`: the tool failed."""

    type: Literal["tool_result"]
    tool_use_id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    content: Union[StrictStr, list[TextBlock], None] = None
    is_error: StrictBool = False


Block = Annotated[Union[TextBlock, ToolUseBlock, ToolResultBlock], Field(discriminator="type")]


class AnthropicMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[Block]]  # at least one block (`turns`)

    def blocks(self) -> list:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else self.content


class AnthropicTool(BaseModel):
    """A function the model may call; `input_schema` a JSON schema of its arguments (an object)."""

    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None  # Anthropic's own server tools (web search...) are not served here


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: StrictStr | None = Field(default=None, pattern=FUNCTION_NAME)  # `tool`'s function
    disable_parallel_tool_use: StrictBool = False


class CountTokensRequest(BaseModel):
    """What `/v1/messages/count_tokens` reads: the fields that make the prompt."""

    model: StrictStr
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: Union[StrictStr, list[TextBlock], None] = None
    tools: list[AnthropicTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: StrictInt = Field(ge=1)  # required, as Anthropic has it
    # Anthropic's ranges; strict numbers, as on the OpenAI routes.
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0)
    stop_sequences: list[StrictStr] | None = None  # at most `protocol.MAX_STOP`, as chat's `stop`
    stream: StrictBool = False
    metadata: dict[str, Any] | None = None  # accepted, ignored
    speculative: Speculative = Field(default_factory=Speculative)


def text_of(blocks: Union[str, list[TextBlock], None]) -> str:
    """A string, or text blocks' text as one."""
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    return BLOCKS_JOINED.join(block.text for block in blocks)


def to_chat(request: CountTokensRequest) -> ChatRequest:
    """The chat request of the same conversation, tools and sampling; refused (400) where the
    conversation cannot be one (a tool_result for no earlier call, a block in the wrong turn)."""
    fields: dict[str, Any] = {"model": request.model, "messages": chat_messages(request)}
    if request.tools:
        fields["tools"] = [chat_tool(tool, i) for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        fields |= chat_tool_choice(request.tool_choice)
    if isinstance(request, MessagesRequest):
        fields |= {"max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": request.top_p,
                   "top_k": request.top_k, "stop": request.stop_sequences, "stream": request.stream,
                   "speculative": request.speculative}
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as err:  # the fields above carry the same caps: a miss here is ours to name
        raise APIError(400, f"the request cannot be read as a conversation: {err.errors()[0]['msg']}",
                       "invalid_value") from None


def chat_tool(tool: AnthropicTool, index: int) -> dict:
    if tool.input_schema.get("type") != "object":
        raise APIError(400, f"tools.{index}.input_schema: the input schema of tool {tool.name!r} must be a JSON "
                       f"schema of an object (\"type\": \"object\"), not of {tool.input_schema.get('type')!r}",
                       "invalid_value", f"tools.{index}.input_schema")
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def chat_tool_choice(choice: ToolChoice) -> dict:
    if choice.type == "tool":
        if choice.name is None:
            raise APIError(400, "tool_choice of type tool needs the tool's name", "missing_required_parameter",
                           "tool_choice.name")
        named: Any = {"type": "function", "function": {"name": choice.name}}
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


def chat_messages(request: CountTokensRequest) -> list[dict]:
    """The conversation as chat messages: the system prompt, then each turn's."""
    messages = [{"role": "system", "content": text_of(request.system)}] if request.system else []
    called: set[str] = set()  # the ids of the calls made so far
    for role, blocks in turns(request.messages):
        messages += assistant_turn(blocks, called) if role == "assistant" else user_turn(blocks, called)
    return messages


def assistant_turn(blocks: list[tuple[str, Any]], called: set[str]) -> list[dict]:
    """An assistant's turn: its text, and its calls (arguments as JSON text, OpenAI's form)."""
    texts, calls = [], []
    for where, block in blocks:
        if isinstance(block, ToolResultBlock):
            raise APIError(400, f"{where}: a tool_result block belongs in a user's message, after the "
                           "assistant's tool_use it answers", "invalid_value", where)
        if isinstance(block, ToolUseBlock):
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json_text(block.input)}})
            called.add(block.id)
        else:
            texts.append(block.text)
    return [{"role": "assistant", "content": BLOCKS_JOINED.join(texts)} | ({"tool_calls": calls} if calls else {})]


def user_turn(blocks: list[tuple[str, Any]], called: set[str]) -> list[dict]:
    """A user's turn: each tool result as a tool message, and the text between them as user messages."""
    messages, texts = [], []
    for where, block in blocks:
        if isinstance(block, ToolUseBlock):
            raise APIError(400, f"{where}: a tool_use block belongs in an assistant's message", "invalid_value",
                           where)
        if isinstance(block, TextBlock):
            texts.append(block.text)
            continue
        if block.tool_use_id not in called:
            raise APIError(400, f"{where}: this tool_result answers tool_use_id {block.tool_use_id!r}, which no "
                           "earlier tool_use block has", "invalid_value", f"{where}.tool_use_id")
        if texts:
            messages.append({"role": "user", "content": BLOCKS_JOINED.join(texts)})
            texts = []
        # The template has no place for a failure: the model reads it in the result's text.
        content = ("Error: " if block.is_error else "") + text_of(block.content)
        messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    if texts:
        messages.append({"role": "user", "content": BLOCKS_JOINED.join(texts)})
    return messages


def json_text(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False)
