"""OpenAI's Responses API in: its request bodies, pydantic models with OpenAI's field names and ranges.

Items, parts and tools arrive as plain objects and are read one by one by their `type`
(`translate.py`), so that a refusal names each one's place. What points at state this server does
not keep is accepted as a type, to be refused by its name (`STATEFUL`).
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from ..fields import FUNCTION_NAME, MAX_CALL_ID, MAX_TOOLS, Speculative

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
class ImagePart(BaseModel):
    """A user's image: `image_url` a data URL (by `file_id` it is refused: nothing is kept or downloaded)."""

    type: Literal["input_image"]
    image_url: StrictStr | None = None
    file_id: StrictStr | None = None
    detail: Literal["auto", "low", "high"] | None = None  # accepted; the checkpoint's processor sizes the image


PARTS = {"input_text": TextPart, "output_text": TextPart}
SEEN_PARTS = PARTS | {"input_image": ImagePart}  # a model that reads images


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


class ReasoningConfig(BaseModel):
    effort: StrictStr | None = None  # handed to a template that reads it (`reasoning_effort`); `summary` changes nothing


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
    reasoning: ReasoningConfig | None = None
    speculative: Speculative = Field(default_factory=Speculative)
    # What needs state kept between requests: accepted as types so that a refusal names them (`STATEFUL`).
    previous_response_id: StrictStr | None = None
    conversation: Any = None
    background: StrictBool | None = None
