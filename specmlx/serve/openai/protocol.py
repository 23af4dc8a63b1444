"""OpenAI's chat completions and completions in: the request bodies, pydantic models with OpenAI's field
names and ranges. Anthropic's messages and OpenAI's responses become the `ChatRequest` here (`chat.py`).

Fields some clients always send but that change nothing here (`user`, `store`, `metadata`...) are
ignored, as OpenAI's own servers and vLLM do; fields that would change the answer and are not
supported (`n` > 1, logprobs, penalties, the legacy `functions`) are accepted as types and refused
as values by `unsupported`, so each refusal names its field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Discriminator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, Tag

from ...config import MAX_SEED, RANDOM_SEED
from ..errors import not_served
from ..fields import FUNCTION_NAME, MAX_CALL_ID, MAX_TOOLS, Speculative, Unserved, kind_of

# OpenAI allows 4 stop strings; editors send more to other hosts (Continue's FIM templates
# for Qwen-coder have 9), and llama.cpp and vLLM set no cap. This bounds the work per token.
MAX_STOP = 64


class JsonSchema(BaseModel):
    """OpenAI's `response_format.json_schema`: a named schema. `strict` is accepted either way:
    the answer is always constrained to the schema (what OpenAI's strict mode promises)."""

    name: StrictStr = Field(default="response", max_length=64)
    description: StrictStr | None = None
    schema_: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: text (the default), any JSON object, or JSON that a schema validates."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ImageURL(BaseModel):
    url: StrictStr  # a data URL (`serve/images.py`: nothing is downloaded)
    detail: Literal["auto", "low", "high"] | None = None  # accepted; the checkpoint's processor sizes the image


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


Part = Annotated[Union[Annotated[TextPart, Tag("text")], Annotated[ImagePart, Tag("image_url")],
                       Annotated[Unserved, Tag("other")]],
                 Discriminator(kind_of(("text", "image_url")))]


def joined(content: Union[str, list[TextPart], list[Part], None], where: str = "content") -> str:
    """A content field's text: a string, or its text parts joined; a part of another kind is refused (400)
    by its place, `where`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    for j, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise not_served(f"{where}.{j}", part.type, "text parts")
    return "".join(part.text for part in content)


class FunctionCall(BaseModel):
    """A call an assistant made: its function's name, and its arguments as JSON text (OpenAI's form)."""

    name: StrictStr = Field(pattern=FUNCTION_NAME)
    arguments: StrictStr


class ToolCall(BaseModel):
    id: StrictStr = Field(min_length=1, max_length=MAX_CALL_ID)
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[StrictStr, list[Part], None] = None
    name: StrictStr | None = None
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=MAX_TOOLS)  # an assistant's
    tool_call_id: StrictStr | None = Field(default=None, max_length=MAX_CALL_ID)  # a tool's answer to that call

    def text(self, where: str = "content") -> str:
        """Its text; a part not served is refused naming `where`, its content's place."""
        return joined(self.content, where)

    def written(self) -> str:
        """The text of its text parts (what bounds its length; `text` refuses other parts)."""
        if not isinstance(self.content, list):
            return self.content or ""
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def seen(self, where: str = "content") -> Union[str, list[dict]]:
        """Its content as a template that reads images takes it: its text, or, with images, its text and image
        parts in order (`{"type": "image"}` where each image goes); another part is refused as by `text`."""
        if not isinstance(self.content, list) or not any(isinstance(p, ImagePart) for p in self.content):
            return self.text(where)
        for j, part in enumerate(self.content):
            if not isinstance(part, (TextPart, ImagePart)):
                raise not_served(f"{where}.{j}", part.type, "text and image_url parts")
        return [{"type": "text", "text": part.text} if isinstance(part, TextPart) else {"type": "image"}
                for part in self.content]


class FunctionDef(BaseModel):
    """A function the model may call; `parameters` a JSON schema of its arguments (an object)."""

    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None  # None: no arguments
    strict: StrictBool | None = None  # accepted either way: see `tools.py` for what is enforced


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(BaseModel):
    name: StrictStr = Field(pattern=FUNCTION_NAME)


class NamedToolChoice(BaseModel):
    """`tool_choice` naming the one function the answer calls."""

    type: Literal["function"]
    function: FunctionName


class PredictedContent(BaseModel):
    """OpenAI's `prediction` (Predicted Outputs): the text the answer is expected to be, mostly."""

    type: Literal["content"]
    content: Union[StrictStr, list[TextPart]]

    def text(self) -> str:
        return joined(self.content)


class Sampling(BaseModel):
    """The fields chat and completion requests share."""

    model: StrictStr
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    # Strict numbers, as the integer fields: "0.5" and true are type errors, not values.
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=2.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0)  # vLLM's and llama.cpp's extension
    min_p: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    stop: Union[StrictStr, list[StrictStr], None] = None
    seed: StrictInt | None = Field(default=None, ge=RANDOM_SEED, le=MAX_SEED)  # -1: a random seed
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    speculative: Speculative = Field(default_factory=Speculative)
    prediction: PredictedContent | None = None
    response_format: ResponseFormat | None = None
    # Accepted so that a refusal can name them (see `unsupported`).
    n: StrictInt | None = None
    logprobs: Any = None
    top_logprobs: Any = None
    presence_penalty: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    logit_bias: dict[str, Any] | None = None

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return tuple(s for s in stops if s)

    def unsupported(self) -> tuple[str, str] | None:
        """(param, sentence) for the first field whose value this server cannot honour."""
        if self.n not in (None, 1):
            return "n", "only n=1 is supported: one choice per request"
        if self.logprobs not in (None, False, 0):
            return "logprobs", "logprobs are not supported"
        if self.top_logprobs not in (None, 0):
            return "top_logprobs", "logprobs are not supported"
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                return name, f"{name} is not supported: penalties would change the target's distribution"
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported"
        if len(self.stops()) > MAX_STOP:
            return "stop", f"at most {MAX_STOP} stop sequences are allowed"
        return None


# What the server hands the chat template itself: a request's `chat_template_kwargs` may not set these.
TEMPLATE_OWN = frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
                          "tokenize", "return_dict", "chat_template"})


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: StrictBool | None = None
    # The template's own switches, vLLM's and llama.cpp's name (`{"enable_thinking": false}` for Qwen3's and
    # Qwen3.5's), and OpenAI's `reasoning_effort`, handed to a template that reads it (gpt-oss's does).
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: StrictStr | None = None
    # OpenAI's legacy form of tools: accepted so that a refusal can name them.
    functions: list[Any] | None = None
    function_call: Any = None

    def unsupported(self) -> tuple[str, str] | None:
        if self.functions or self.function_call is not None:
            return ("functions" if self.functions else "function_call",
                    "the legacy functions and function_call are not supported: send tools and tool_choice")
        return super().unsupported()

    def template_kwargs(self) -> dict[str, Any]:
        """What the chat template reads beyond the messages and tools (`prompts.chat_prompt` refuses first
        what the server sets itself, `TEMPLATE_OWN`)."""
        effort = {"reasoning_effort": self.reasoning_effort} if self.reasoning_effort is not None else {}
        return effort | dict(self.chat_template_kwargs or {})

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Sampling):
    prompt: Union[StrictStr, list[StrictInt], list[StrictStr]]
    echo: StrictBool = False
    suffix: StrictStr | None = None  # fill in the middle: the text after the gap ("" too); None: a plain completion
    best_of: StrictInt | None = None

    def unsupported(self) -> tuple[str, str] | None:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) and len(self.prompt) > 1:
            return "prompt", "one prompt per request: a list of strings must hold one"
        if self.echo:
            return "echo", "echo is not supported"
        if self.best_of not in (None, 1):
            return "best_of", "only best_of=1 is supported"
        return super().unsupported()

    def token_limit(self) -> int | None:
        return self.max_tokens
