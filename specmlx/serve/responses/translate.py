"""OpenAI's Responses API in the chat the engine answers: a Responses request as a chat request.

A Responses request becomes the `ChatRequest` the chat route would get for the same conversation,
so it is rendered by the model's own chat template, queued, decoded and its calls read back
(`calls.py`) by the one chat path (`serving.py`, `tools.py`); only the answer's shape differs
(`render.py`). The translation:

- `instructions` is the system message, first; `input` a user's message (a string) or items:
  `message` items of any role (a string, or `input_text` / `output_text` parts, joined; `input_image`
  parts, data URLs, are chat's `image_url` parts in their place, for a model that reads images),
  `function_call` items (an assistant's call: its `call_id`, `name`, `arguments` as JSON text)
  and `function_call_output` items (a `tool` message answering that `call_id`). Calls right
  after an assistant's message, or after each other, are that one assistant turn, as the model
  wrote them. `reasoning` items are dropped: templates have no place for them.
- Flat function tools (`{"type": "function", "name", "description", "parameters", "strict"}`)
  are chat's tools; `tool_choice` (`auto`, `none`, `required`, a named function) and
  `parallel_tool_calls` keep their meaning. `text.format` (`json_object`, `json_schema`) is
  chat's `response_format`; `max_output_tokens` its `max_tokens`; `reasoning.effort` its
  `reasoning_effort` (handed to a template that reads it).
- What a request leaves unset is the server's default (`--temp`), as on chat; the
  `speculative` object is the chat route's.

The server keeps no response once it is sent, so what points at one (`previous_response_id`,
`conversation`) or asks for one to be kept (`background`) is refused, as is any tool or item
that is not a function's or a message's: each refusal names its field. Fields that change
nothing here (`store`, `include`, `reasoning.summary`, `prompt_cache_key`, `metadata`, `truncation`,
`user`, `service_tier`...) are ignored, as on the other routes.
"""

from __future__ import annotations

import json
from typing import Any, Union

from pydantic import BaseModel, ValidationError

from ..chat import as_chat, chat_call, chat_tool_of, named_choice
from ..errors import APIError, not_served, validation_error
from ..images import picture_bytes
from ..openai.protocol import ChatRequest
from ..tools import check_parameters, refuse_duplicates
from .protocol import (ITEMS, PARTS, SEEN_PARTS, STATEFUL, FunctionCallItem, FunctionCallOutputItem, FunctionChoice,
                       FunctionTool, ImagePart, MessageItem, ResponsesRequest, TextConfig)


def to_chat(request: ResponsesRequest, images: bool = False) -> ChatRequest:
    """The chat request of the same conversation, tools and sampling; refused (400) where the request needs
    state this server does not keep, or cannot be one conversation (an output for no earlier call). `images`:
    the model reads images (else an image part is refused by its place)."""
    refuse_stateful(request)
    fields: dict[str, Any] = {
        "model": request.model, "messages": chat_messages(request, images), "parallel_tool_calls": request.parallel_tool_calls,
        "max_tokens": request.max_output_tokens, "temperature": request.temperature, "top_p": request.top_p,
        "top_logprobs": request.top_logprobs, "stream": request.stream, "speculative": request.speculative,
        "response_format": response_format(request.text),
        "reasoning_effort": request.reasoning.effort if request.reasoning is not None else None}
    if request.tools:
        fields["tools"] = [chat_tool(tool, i) for i, tool in enumerate(request.tools)]
        refuse_duplicates([tool["function"]["name"] for tool in fields["tools"]], "tools.{}.name")
    if isinstance(request.tool_choice, FunctionChoice):
        fields["tool_choice"] = named_choice(request.tool_choice.name)
    else:
        fields["tool_choice"] = request.tool_choice
    return as_chat(fields)


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
    return chat_tool_of(function.model_dump(exclude_none=True, exclude={"type"}))


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


def text_of(content: Union[str, list[dict[str, Any]]], where: str, images: bool = False) -> Union[str, list[dict]]:
    """A string, or text parts' text as one (a part of another kind, a file, or an image where the model reads
    none, is refused); with images, text and image parts in order, as chat's content."""
    if isinstance(content, str):
        return content
    kinds, served = (SEEN_PARTS, "text and image parts (input_text, output_text, input_image)") if images else (
        PARTS, "text parts (input_text, output_text)")
    parts = [typed(part, kinds, f"{where}.{j}", served) for j, part in enumerate(content)]
    if not any(isinstance(part, ImagePart) for part in parts):
        return "".join(part.text for part in parts)
    return [image_part(part, f"{where}.{j}") if isinstance(part, ImagePart) else {"type": "text", "text": part.text}
            for j, part in enumerate(parts)]


def image_part(part: ImagePart, where: str) -> dict:
    """An `input_image` as chat's image part (its data URL is read there, `serve/images.py`)."""
    if part.image_url is None:
        raise APIError(400, f"{where}: an image is read from its image_url, a data URL; this server keeps no files",
                       "invalid_value", f"{where}.image_url")
    picture_bytes(part.image_url, f"{where}.image_url")  # a URL or bad base64 refused here, by its own place
    return {"type": "image_url", "image_url": {"url": part.image_url}}


def chat_messages(request: ResponsesRequest, images: bool = False) -> list[dict]:
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
            messages.append({"role": item.role, "content": text_of(item.content, f"{where}.content", images)})
        elif isinstance(item, FunctionCallItem):
            add_call(messages, item, where)
            called.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(call_output(item, called, where, images))
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
    call = chat_call(item.call_id, item.name, item.arguments)
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    messages[-1].setdefault("tool_calls", []).append(call)


def call_output(item: FunctionCallOutputItem, called: set[str], where: str, images: bool = False) -> dict:
    if item.call_id not in called:
        raise APIError(400, f"{where}: this function_call_output answers call_id {item.call_id!r}, which no earlier "
                       "function_call item made", "invalid_value", f"{where}.call_id")
    return {"role": "tool", "tool_call_id": item.call_id, "content": text_of(item.output, f"{where}.output", images)}


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
