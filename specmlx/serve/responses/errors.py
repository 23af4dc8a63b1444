"""The Responses API's errors: OpenAI's shape (`openai/errors.py`), naming the Responses API's own fields.

A Responses request takes the chat path from its prompt to its answer, and that path's refusals name chat's
fields (`messages`, `response_format`); `in_responses_terms` names them as the request did.
"""

from __future__ import annotations

from ..errors import APIError

# Chat's fields that a refusal from the chat path may name, as a Responses request names them, the longer
# paths first. A chat message's index is not an item's: any message is `input`.
RESPONSES_FIELDS = {"messages": "input", "prompt": "input", "response_format.json_schema.schema": "text.format.schema",
                    "response_format.json_schema": "text.format", "response_format": "text.format"}
WHOLE = {"messages", "prompt"}  # renamed with what follows them


def in_responses_terms(err: APIError) -> APIError:
    """A refusal from the chat path (`serving.py`, `tools.py`), naming the Responses API's own field."""
    for chat, ours in RESPONSES_FIELDS.items():
        if err.param is not None and (err.param == chat or err.param.startswith(chat + ".")):
            param = ours if chat in WHOLE else ours + err.param[len(chat):]
            return APIError(err.status, err.message, err.code, param, err.headers)
    return err
