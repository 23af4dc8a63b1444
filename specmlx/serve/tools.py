"""Tools on a chat request: the messages and tools its model's chat template reads, and the grammar
that holds an answer to the calls `tool_choice` demands.

The model's own template renders the tools and the conversation's calls and results, as mlx-lm's
server hands them to it: an assistant call's `arguments` arrive as JSON text (OpenAI's form) and
templates write `tool_call.function.arguments` as a value (Qwen's `| tojson`), so they are read
into one first. What the model writes back is read by mlx-lm's parser for its template
(`calls.py`).

`tool_choice`:
- `auto` (the default with tools): the model decides; its calls are parsed out of its answer.
- `none`: the tools are rendered all the same and calls are never parsed, as vLLM does by default
  (`--exclude-tools-when-tool-choice-none` is off): the prompt is the one `auto` gets, so a
  conversation that switches between them keeps its cached prefix.
- `required`, or a named function: a grammar holds the answer to one or more calls (one named
  call), each in the model's own call syntax with arguments valid against the function's
  parameters. Speculation under a grammar is exact (`grammar.py`): the answer is the target's
  distribution restricted to calls. Only for parsers whose syntax is written in `syntaxes.py`
  (Qwen2.5's JSON calls, and Qwen3-Coder's XML, which Qwen3.5 and Qwen3.6 write).

A function's `strict` is accepted either way: under `required` or a named function its arguments
always match its parameters; under `auto` the answer is the model's own, unconstrained, and a call
whose arguments miss the schema is passed on as the model wrote it (if it parses).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..errors import SpecmlxError
from ..grammar import LAID_OUT, Grammar
from ..schema_bounds import bounded
from .syntaxes import SYNTAXES, CallSyntax, marker
from .errors import APIError
from .openai.protocol import ChatRequest, NamedToolChoice, Tool


def has_tools(tokenizer: Any) -> bool:
    """Whether mlx-lm knows the model's tool-call syntax (from its template or vocabulary)."""
    return bool(getattr(tokenizer, "has_tool_calling", False))


def parser_name(tokenizer: Any) -> str:
    """The mlx-lm tool parser's module name (`json_tools` for Qwen2.5): its syntax's name."""
    return getattr(tokenizer.tool_parser, "__module__", "").rsplit(".", 1)[-1]


def parses_calls(request: ChatRequest, tokenizer: Any) -> bool:
    """Whether the answer's calls are read back as `tool_calls` (never under `none`)."""
    return bool(request.tools) and request.tool_choice != "none" and has_tools(tokenizer)


# -- the template's view of the request ----------------------------------------


def template_tools(request: ChatRequest, tokenizer: Any) -> list[dict] | None:
    """The request's tools as the template reads them; refused (400) for a model without tool calling,
    or a function whose parameters are not an object's schema."""
    if not request.tools:
        return None
    if not has_tools(tokenizer):
        raise APIError(400, "this model has no tool calling (its chat template has no tool-call syntax that "
                       "mlx-lm knows), so tools cannot be sent to it", "unsupported_parameter", "tools")
    refuse_duplicates([tool.function.name for tool in request.tools], "tools.{}.function.name")
    for i, tool in enumerate(request.tools):
        check_parameters(tool.function.parameters, tool.function.name, f"tools.{i}.function.parameters")
    return [tool.model_dump(exclude_none=True) for tool in request.tools]


def refuse_duplicates(names: Sequence[str], field: str) -> None:
    """Refuse (400) a function name that two tools have: a call names the one function it calls. `field`: the
    name's place, with `{}` for the tool's index."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise APIError(400, f"{field.format(i)}: tools.{first[name]} is named {name!r} too: each tool needs a "
                           "name of its own", "invalid_value", field.format(i))
        first[name] = i


def check_parameters(params: dict | None, name: str, param: str) -> None:
    """Refuse (400, naming `param`) a function's parameters that are not an object's schema (none: no arguments;
    a schema without a type: an object's)."""
    if params is not None and params.get("type", "object") != "object":
        raise APIError(400, f"the parameters of function {name!r} must be a JSON schema of an object "
                       f"(\"type\": \"object\"), not of {params.get('type')!r}", "invalid_value", param)


def template_messages(request: ChatRequest, tokenizer: Any, images: bool = False) -> list[dict]:
    """The messages as the template reads them: roles as it names them, each call's arguments as a value,
    each tool result after the call it answers (else 400); with `images` (a model that reads them), a
    content with images as its parts (`Message.seen`), else an image is refused by its place."""
    messages, calls = [], set()
    for i, m in enumerate(request.messages):
        where = f"messages.{i}.content"
        # OpenAI's newer `developer` role is the system message of older templates.
        message: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                                   "content": m.seen(where) if images else m.text(where)}
        if (m.tool_calls or m.role == "tool") and not has_tools(tokenizer):
            raise APIError(400, "this model has no tool calling, so a conversation cannot hold tool calls or "
                           "their results", "invalid_value", f"messages.{i}.role")
        if m.tool_calls:
            if m.role != "assistant":
                raise APIError(400, "only an assistant's message carries tool_calls", "invalid_value",
                               f"messages.{i}.tool_calls")
            message["tool_calls"] = [template_call(call, f"messages.{i}.tool_calls.{j}")
                                     for j, call in enumerate(m.tool_calls)]
            calls |= {call.id for call in m.tool_calls}
        if m.role == "tool":
            if m.tool_call_id not in calls:
                said = "has no tool_call_id" if m.tool_call_id is None else (
                    f"answers {m.tool_call_id!r}, which no earlier assistant message called")
                raise APIError(400, f"a tool message must answer an earlier call: this one {said}",
                               "invalid_value", f"messages.{i}.tool_call_id")
            message["tool_call_id"] = m.tool_call_id
        messages.append(message)
    return messages


def template_call(call, param: str) -> dict:
    """An assistant's call with its arguments read from JSON text into a value (empty text: no arguments)."""
    try:
        arguments = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except json.JSONDecodeError as err:
        raise APIError(400, f"the arguments of call {call.id!r} are not JSON ({err.msg})", "invalid_value",
                       f"{param}.function.arguments") from None
    return {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}


# -- calls the answer must make -------------------------------------------------


def forced_calls(request: ChatRequest, tokenizer: Any, thinking: bool = False) -> Grammar | None:
    """The grammar `tool_choice` holds the answer to: one or more calls (`required`; one if
    `parallel_tool_calls` is false), one call of the named function, or None (`auto`, `none`).
    `thinking`: the prompt leaves the model inside a think block (`reasoning.opens_thinking`), which it
    closes before its calls: its reasoning is its own, the calls are held to the syntax."""
    choice = request.tool_choice
    if choice in (None, "none"):
        return None
    if not request.tools:
        raise APIError(400, "tool_choice needs tools to choose from", "invalid_value", "tool_choice")
    if choice == "auto":
        return None
    syntax = SYNTAXES.get(parser_name(tokenizer)) if has_tools(tokenizer) else None
    if syntax is None:
        raise APIError(400, f"tool_choice {describe(choice)} is not available for this model: its tool-call syntax "
                       f"({parser_name(tokenizer) or 'none'}) cannot be enforced here; use auto",
                       "unsupported_parameter", "tool_choice")
    if request.response_format is not None and request.response_format.type != "text":
        raise APIError(400, f"tool_choice {describe(choice)} decides the answer's form: it cannot also follow a "
                       "response_format", "invalid_value", "response_format")
    tools = chosen(request.tools, choice)
    one = isinstance(choice, NamedToolChoice) or request.parallel_tool_calls is False
    return call_grammar(syntax, tokenizer, tools, one, tokenizer.think_end if thinking else None)


def describe(choice) -> str:
    return repr(choice) if isinstance(choice, str) else f"naming {choice.function.name!r}"


def chosen(tools: Sequence[Tool], choice) -> list[tuple[int, Tool]]:
    """The tools (with their index in the request) an answer may call under `choice`."""
    indexed = list(enumerate(tools))
    if not isinstance(choice, NamedToolChoice):
        return indexed
    named = [(i, t) for i, t in indexed if t.function.name == choice.function.name]
    if not named:
        raise APIError(400, f"tool_choice names {choice.function.name!r}, which is not among the tools",
                       "invalid_value", "tool_choice")
    return named[:1]


def call_grammar(syntax: CallSyntax, tokenizer: Any, tools: Sequence[tuple[int, Tool]], one: bool,
                 think_end: str | None = None) -> Grammar:
    """Calls of `tools` in `syntax`, each function's arguments valid against its parameters; after the
    reasoning the model is in, up to `think_end` and the white space after it, if it is in one."""
    marks = {"start": marker(tokenizer, tokenizer.tool_call_start), "end": marker(tokenizer, tokenizer.tool_call_end)}
    syntax = syntax.bind(tokenizer)
    calls = "call" if one else f"call ({syntax.between} call)*"
    thought = [f"start: thought {calls}", *thought_rules(tokenizer, think_end)] if think_end else [f"start: {calls}"]
    rules = [*thought,
             f"call: {syntax.begin.format(**marks)} body {syntax.end.format(**marks)}",
             "body: " + " | ".join(f"f{k}" for k in range(len(tools))), *syntax.shared]
    try:
        for k, (i, tool) in enumerate(tools):
            rules += syntax.function(k, tool.function.name, arguments_schema(tool, i))
        return Grammar.lark("\n".join(rules) + "\n")
    except SpecmlxError as err:
        raise APIError(400, f"the tools' parameters cannot be enforced: {err}", "invalid_value", "tools") from None


def thought_rules(tokenizer: Any, think_end: str) -> list[str]:
    """The rule `thought`: the reasoning a prompt left the model in, up to its end marker (by its token,
    as `marker` writes it) and the white space after it, the model's own."""
    return [f"thought: THOUGHT? {marker(tokenizer, think_end)} AFTER_THOUGHT?",
            f"THOUGHT: /(?s:.+)/ & ~/(?s:.*){escaped(think_end)}(?s:.*)/", "AFTER_THOUGHT: /[ \\t\\n]+/"]


def json_after_thought(schema: dict, tokenizer: Any) -> Grammar:
    """JSON valid against `schema` (laid out and bounded as `Grammar.json_schema` has it), after the
    reasoning the prompt left the model in (`response_format` on a thinking model)."""
    answer = bounded(schema) | {"x-guidance": dict(LAID_OUT)}
    return Grammar.lark("\n".join(["start: thought answer", f"answer: %json {json.dumps(answer)}",
                                   *thought_rules(tokenizer, tokenizer.think_end)]) + "\n")


def escaped(text: str) -> str:
    """`text` as a Rust regex matches it: every character but a letter or digit by its code point."""
    return "".join(c if c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def arguments_schema(tool: Tool, index: int) -> dict:
    """A function's parameters, an object's (a schema without a type would take any value), with the
    answer's JSON laid out as `response_format` lays it out (bounded white space and numbers); a schema
    llguidance cannot compile is a 400 naming its tool."""
    try:
        schema = bounded({"type": "object", "properties": {}} | (tool.function.parameters or {}))
        schema["x-guidance"] = dict(LAID_OUT)
        Grammar.json_schema(schema)
    except SpecmlxError as err:
        raise APIError(400, str(err), "invalid_value", f"tools.{index}.function.parameters") from None
    return schema
