"""Anthropic's Messages API in: its request bodies, pydantic models with Anthropic's field names and ranges.

Fields Anthropic's clients send that change nothing here (`cache_control` on a block: the slots
reuse any shared prefix anyway) are ignored, as on the OpenAI routes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, Tag

from ..fields import FUNCTION_NAME, MAX_CALL_ID, MAX_TOOLS, Speculative, Unserved, kind_of

# Anthropic's least `thinking.budget_tokens`.
MIN_THINKING = 1024


class TextBlock(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ToolUseBlock(BaseModel):
    """A call an assistant made: its id, function and arguments (an object, not JSON text as OpenAI's)."""

    type: Literal["tool_use"]
    id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    input: dict[str, Any]


class ThinkingBlock(BaseModel):
    """An earlier answer's thinking: dropped from the history, as Anthropic's API lets a client do."""

    model_config = ConfigDict(extra="allow")
    type: Literal["thinking", "redacted_thinking"]


class ImageSource(BaseModel):
    """Where an image block's bytes are: `base64` (its `media_type` and `data`), or by `url` or `file_id`
    (refused: nothing is downloaded)."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr
    media_type: StrictStr | None = None
    data: StrictStr | None = None


class ImageBlock(BaseModel):
    type: Literal["image"]
    source: ImageSource


ResultBlock = Annotated[Union[Annotated[TextBlock, Tag("text")], Annotated[ImageBlock, Tag("image")],
                              Annotated[Unserved, Tag("other")]],
                        Discriminator(kind_of(("text", "image")))]


class ToolResultBlock(BaseModel):
    """A tool's answer to the call `tool_use_id`; `is_error`: the tool failed."""

    type: Literal["tool_result"]
    tool_use_id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    content: Union[StrictStr, list[ResultBlock], None] = None
    is_error: StrictBool = False


BLOCKS = {"text": TextBlock, "tool_use": ToolUseBlock, "tool_result": ToolResultBlock, "thinking": ThinkingBlock,
          "redacted_thinking": ThinkingBlock, "image": ImageBlock}
Block = Annotated[Union[tuple(Annotated[model, Tag(kind)] for kind, model in BLOCKS.items())
                        + (Annotated[Unserved, Tag("other")],)], Discriminator(kind_of(tuple(BLOCKS)))]


class AnthropicMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[Block]]  # at least one block (`turns`)

    def blocks(self) -> list:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else self.content


class AnthropicTool(BaseModel):
    """A function the model may call; `input_schema` a JSON schema of its arguments (an object). A `type` other
    than `custom` is one of Anthropic's own tools (`web_search_20250305`, `bash_20250124`...), refused by its
    place (`chat_tool`): an answer without the tool asked for is not the answer asked for."""

    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    input_schema: dict[str, Any] | None = None  # required of a custom tool (`chat_tool`)
    type: StrictStr | None = None


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: StrictStr | None = Field(default=None, pattern=FUNCTION_NAME)  # `tool`'s function
    disable_parallel_tool_use: StrictBool = False


class Thinking(BaseModel):
    """Extended thinking: checked as Anthropic checks it. Enabled (or adaptive), it turns a thinking
    model's template on (`enable_thinking`) and its reasoning comes back as thinking blocks; else off."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: StrictInt | None = None  # required when enabled: at least `MIN_THINKING`, under max_tokens


class CountTokensRequest(BaseModel):
    """What `/v1/messages/count_tokens` reads: the fields that make the prompt."""

    model: StrictStr
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: Union[StrictStr, list[TextBlock], None] = None
    tools: list[AnthropicTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None  # the template's switch: counted as the answer's prompt is rendered


class OutputFormat(BaseModel):
    """Anthropic's structured outputs: the answer is JSON that `schema` validates (as chat's `json_schema`)."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    """Where the SDK's `beta.messages.parse(output_format=...)` puts the format; other settings are ignored."""

    model_config = ConfigDict(extra="allow")
    format: OutputFormat | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: StrictInt = Field(ge=1)  # required, as Anthropic has it
    # Anthropic's ranges; strict numbers, as on the OpenAI routes.
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0)
    stop_sequences: list[StrictStr] | None = None  # at most `openai.protocol.MAX_STOP`, as chat's `stop`
    stream: StrictBool = False
    metadata: dict[str, Any] | None = None  # accepted, ignored
    output_format: OutputFormat | None = None  # structured outputs, as first published
    output_config: OutputConfig | None = None  # ... and as the SDK sends them now (`format`)
    speculative: Speculative = Field(default_factory=Speculative)
