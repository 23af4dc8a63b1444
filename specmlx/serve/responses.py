"""OpenAI's Responses API in: its request bodies, and their translation into a chat request.

A Responses request becomes the `ChatRequest` the chat route would get for the same conversation,
so it is rendered by the model's own chat template, queued, decoded and its calls read back
(`calls.py`) by the one chat path (`serving.py`, `tools.py`); only the answer's shape differs
(`responses_render.py`). The translation:

- `instructions` is the system message, first; `input` a user's message (a string) or items:
  `message` items of any role (a string, or `input_text` / `output_text` parts, joined),
  `function_call` items (an assistant's call: its `call_id`, `name`, `arguments` as JSON text)
  and `function_call_output` items (a `tool` message answering that `call_id`). Calls right
  after an assistant's message, or after each other, are that one assistant turn, as the model
  wrote them. `reasoning` items are dropped: templates have no place for them.
- Flat function tools (`{"type": "function", "name", "description", "parameters", "strict"}`)
  are chat's tools; `tool_choice` (`auto`, `none`, `required`, a named function) and
  `parallel_tool_calls` keep their meaning. `text.format` (`json_object`, `json_schema`) is
  chat's `response_format`; `max_output_tokens` its `max_tokens`.
- What a request leaves unset is the server's default (`--temp`), as on chat; the
  `speculative` object is the chat route's.

The server keeps no response once it is sent, so what points at one (`previous_response_id`,
`conversation`) or asks for one to be kept (`background`) is refused, as is any tool or item
that is not a function's or a message's: each refusal names its field. Fields that change
nothing here (`store`, `include`, `reasoning`, `prompt_cache_key`, `metadata`, `truncation`,
`user`, `service_tier`...) are ignored, as on the other routes.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from .errors import APIError, not_served, validation_error
from .protocol import FUNCTION_NAME, MAX_CALL_ID, MAX_TOOLS, ChatRequest, Speculative
from .tools import check_parameters, refuse_duplicates

# Chat's fields that a refusal from the chat path may name, as a Responses request names them, the longer
# paths first. A chat message's index is not an item's: any message is `input`.
RESPONSES_FIELDS = {"messages": "input", "prompt": "input", "response_format.json_schema.schema": "text.format.schema",
                    "response_format.json_schema": "text.format", "response_format": "text.format"}
WHOLE = {"messages", "prompt"}  # renamed with what follows them

# What points at state this server does not keep, and what to send instead.
STATEFUL = {"previous_response_id": "send the whole conversation in input",
            "conversation": "send the whole conversation in input",
            "background": "send the request without background and wait for its answer"}


class TextPart(BaseModel):
    """A message's text: a user's (`input_text`) or an earlier answer's (`output_text`)."""

    type: Literal["input_text", "output_text"]
    text: StrictStr


class MessageItem(BaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[StrictStr, list[dict[str, Any]]]  # parts: read one by one (`text_of`)


class FunctionCallItem(BaseModel):
    """A call an earlier answer made: its id, function and arguments (JSON text)."""

    type: Literal["function_call"]
    call_id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    arguments: StrictStr


class FunctionCallOutputItem(BaseModel):
    """A tool's answer to the call `call_id`: text, or text parts."""

    type: Literal["function_call_output"]
    call_id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    output: Union[StrictStr, list[dict[str, Any]]]


class ReasoningItem(BaseModel):
    type: Literal["reasoning"]


ITEMS = {"message": MessageItem, "function_call": FunctionCallItem, "function_call_output": FunctionCallOutputItem,
         "reasoning": ReasoningItem}
PARTS = {"input_text": TextPart, "output_text": TextPart}


class FunctionTool(BaseModel):
    """A function the model may call; `parameters` a JSON schema of its arguments (an object)."""

    type: Literal["function"]
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None  # accepted either way, as on chat (`tools.py`)


class FunctionChoice(BaseModel):
    """`tool_choice` naming the one function the answer calls."""

    type: Literal["function"]
    name: StrictStr = Field(pattern=FUNCTION_NAME)


class TextFormat(BaseModel):
    """`text.format`: plain text, any JSON object, or JSON its `schema` validates (as chat's `response_format`)."""

    type: Literal["text", "json_object", "json_schema"]
    name: StrictStr = Field(default="response", max_length=64)
    description: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class TextConfig(BaseModel):
    format: TextFormat | None = None  # `verbosity` and the like change nothing here


class ResponsesRequest(BaseModel):
    model: StrictStr
    input: Union[StrictStr, list[dict[str, Any]]]  # items: read one by one (`chat_messages`), refused by place
    instructions: StrictStr | None = None
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TOOLS)  # function tools (`chat_tool`)
    tool_choice: Union[Literal["none", "auto", "required"], FunctionChoice, None] = None
    parallel_tool_calls: StrictBool | None = None
    max_output_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=2.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: StrictInt | None = None  # accepted so that chat's refusal can name it
    stream: StrictBool = False
    text: TextConfig | None = None
    speculative: Speculative = Field(default_factory=Speculative)
    # What needs state kept between requests: accepted as types so that a refusal names them (`STATEFUL`).
    previous_response_id: StrictStr | None = None
    conversation: Any = None
    background: StrictBool | None = None


def to_chat(request: ResponsesRequest) -> ChatRequest:
    """The chat request of the same conversation, tools and sampling; refused (400) where the request needs
    state this server does not keep, or cannot be one conversation (an output for no earlier call)."""
    refuse_stateful(request)
    fields: dict[str, Any] = {
        "model": request.model, "messages": chat_messages(request), "parallel_tool_calls": request.parallel_tool_calls,
        "max_tokens": request.max_output_tokens, "temperature": request.temperature, "top_p": request.top_p,
        "top_logprobs": request.top_logprobs, "stream": request.stream, "speculative": request.speculative,
        "response_format": response_format(request.text)}
    if request.tools:
        fields["tools"] = [chat_tool(tool, i) for i, tool in enumerate(request.tools)]
        refuse_duplicates([tool["function"]["name"] for tool in fields["tools"]], "tools.{}.name")
    if isinstance(request.tool_choice, FunctionChoice):
        fields["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice.name}}
    else:
        fields["tool_choice"] = request.tool_choice
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as err:  # the fields above carry the same caps: a miss here is ours to name
        raise APIError(400, f"the request cannot be read as a conversation: {err.errors()[0]['msg']}",
                       "invalid_value") from None


def in_responses_terms(err: APIError) -> APIError:
    """A refusal from the chat path (`serving.py`, `tools.py`), naming the Responses API's own field."""
    for chat, ours in RESPONSES_FIELDS.items():
        if err.param is not None and (err.param == chat or err.param.startswith(chat + ".")):
            param = ours if chat in WHOLE else ours + err.param[len(chat):]
            return APIError(err.status, err.message, err.code, param, err.headers)
    return err


def refuse_stateful(request: ResponsesRequest) -> None:
    for name, instead in STATEFUL.items():
        if getattr(request, name) not in (None, False):
            raise APIError(400, f"{name} is not supported: this server keeps no responses or conversations; "
                           f"{instead}", "unsupported_parameter", name)


def typed(value: Any, kinds: dict[str, type[BaseModel]], where: str, served: str,
          default: str | None = None) -> BaseModel:
    """`value` read as the model its `type` names among `kinds` (`default` where it names none); refused (400)
    naming `where` if it is of another type, or not one of its type."""
    kind = value.get("type", default) if isinstance(value, dict) else None
    if kind not in kinds:
        raise not_served(where, kind, served)
    try:
        return kinds[kind].model_validate(value)
    except ValidationError as err:
        raise validation_error(err, where) from None


def chat_tool(tool: dict[str, Any], index: int) -> dict:
    function = typed(tool, {"function": FunctionTool}, f"tools.{index}", "function tools")
    check_parameters(function.parameters, function.name, f"tools.{index}.parameters")
    return {"type": "function", "function": function.model_dump(exclude_none=True, exclude={"type"})}


def response_format(text: TextConfig | None) -> dict | None:
    """`text.format` as chat's `response_format`: a json_schema format's fields under its `json_schema`."""
    fmt = text.format if text is not None else None
    if fmt is None:
        return None
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    if fmt.schema_ is None:
        raise APIError(400, "a json_schema format needs its schema", "missing_required_parameter",
                       "text.format.schema")
    return {"type": "json_schema", "json_schema": fmt.model_dump(exclude_none=True, exclude={"type"}, by_alias=True)}


def text_of(content: Union[str, list[dict[str, Any]]], where: str) -> str:
    """A string, or text parts' text as one (a part of another kind, an image or a file, is refused)."""
    if isinstance(content, str):
        return content
    parts = [typed(part, PARTS, f"{where}.{j}", "text parts (input_text, output_text)")
             for j, part in enumerate(content)]
    return "".join(part.text for part in parts)


def chat_messages(request: ResponsesRequest) -> list[dict]:
    """The conversation as chat messages: the instructions, then each item's."""
    if not request.input:
        raise APIError(400, "input is empty: send the user's text, or the conversation's items", "invalid_value",
                       "input")
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    if isinstance(request.input, str):
        return messages + [{"role": "user", "content": request.input}]
    called: set[str] = set()  # the ids of the calls made so far
    for i, raw in enumerate(request.input):
        where = f"input.{i}"
        item = typed(raw, ITEMS, where, "message, function_call, function_call_output and reasoning items",
                     default="message")
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": text_of(item.content, f"{where}.content")})
        elif isinstance(item, FunctionCallItem):
            add_call(messages, item, where)
            called.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(call_output(item, called, where))
    return messages


def add_call(messages: list[dict], item: FunctionCallItem, where: str) -> None:
    """An earlier call, in the assistant's turn it follows (its text, or the calls before it), else in one of
    its own."""
    try:
        if item.arguments.strip():  # empty: no arguments, as on chat
            json.loads(item.arguments)
    except json.JSONDecodeError as err:
        raise APIError(400, f"{where}.arguments: the arguments of call {item.call_id!r} are not JSON ({err.msg})",
                       "invalid_value", f"{where}.arguments") from None
    call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    messages[-1].setdefault("tool_calls", []).append(call)


def call_output(item: FunctionCallOutputItem, called: set[str], where: str) -> dict:
    if item.call_id not in called:
        raise APIError(400, f"{where}: this function_call_output answers call_id {item.call_id!r}, which no earlier "
                       "function_call item made", "invalid_value", f"{where}.call_id")
    return {"role": "tool", "tool_call_id": item.call_id, "content": text_of(item.output, f"{where}.output")}


def echoed(request: ResponsesRequest) -> dict:
    """The request's settings, as OpenAI's response object repeats them (unset sampling: the server's default)."""
    choice = request.tool_choice.model_dump() if isinstance(request.tool_choice, FunctionChoice) else \
        request.tool_choice or "auto"
    text = request.text.model_dump(exclude_none=True, by_alias=True) if request.text and request.text.format else \
        {"format": {"type": "text"}}
    return {"instructions": request.instructions, "max_output_tokens": request.max_output_tokens,
            "parallel_tool_calls": request.parallel_tool_calls is not False, "temperature": request.temperature,
            "top_p": request.top_p, "tool_choice": choice, "tools": request.tools or [], "text": text,
            "previous_response_id": None, "store": False}
