"""The chat the engine answers: what Anthropic's messages and OpenAI's responses become.

A request of either becomes the `ChatRequest` the chat route would get for the same conversation
(`anthropic/translate.py`, `responses/translate.py`), so that it takes the one chat path from its
prompt to its answer's calls. These are the parts of that translation the two share: the chat's
call, tool and named choice in OpenAI's form, and the chat request read from their fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .errors import APIError
from .openai.protocol import ChatRequest


def as_chat(fields: dict[str, Any]) -> ChatRequest:
    """The chat request of `fields`; the fields carry the same caps as the dialect's, so a miss here is
    ours to name (400)."""
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as err:
        raise APIError(400, f"the request cannot be read as a conversation: {err.errors()[0]['msg']}",
                       "invalid_value") from None


def chat_call(call_id: str, name: str, arguments: str) -> dict:
    """An assistant's call as chat's `tool_calls` holds it: its arguments as JSON text."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_tool_of(function: dict[str, Any]) -> dict:
    """A function the model may call, as chat's `tools` holds it."""
    return {"type": "function", "function": function}


def named_choice(name: str) -> dict:
    """Chat's `tool_choice` naming the one function the answer calls."""
    return {"type": "function", "function": {"name": name}}
