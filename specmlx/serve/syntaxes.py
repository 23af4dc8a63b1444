"""The call syntaxes a grammar can hold an answer to, in llguidance's Lark: how a model writes a call,
as its chat template writes the calls of earlier turns, so that what the grammar allows is what
mlx-lm's parser for that template reads back (`calls.py`).

- `json_tools` (Qwen2.5's): `<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>`, calls
  one after another with a new line between them; the arguments are JSON valid against the
  function's parameters.
- `qwen3_coder` (Qwen3-Coder's, Qwen3.5's and Qwen3.6's XML):
  `<tool_call>\\n<function=f>\\n<parameter=p>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>`. Each
  parameter's value is written as the template writes it and the parser reads it: a string as its
  text (anything up to the first `\\n</parameter>`, within its `maxLength`), a number, boolean (`True`, as the template
  writes Python's, or `true`) or enumerated value as its literal, an object or array as JSON valid against its schema. Parameters come in the order the
  schema lists them, the required ones always and the others where the model writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..grammar import LAID_OUT


class CallSyntax(Protocol):
    """Around each call (`begin`, `end`: Lark expressions with the markers `{start}` and `{end}`),
    between calls (`between`), the rules of a call of function `name` (`function`: its rule is
    `f{k}`, its arguments valid against `schema`, an object's), and the rules they share (`shared`)."""

    begin: str
    end: str
    between: str
    shared: tuple[str, ...]

    def function(self, k: int, name: str, schema: dict) -> list[str]: ...


def literal(text: str) -> str:
    """A Lark string literal of `text`."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class JsonCalls:
    begin: str = '{start} "\\n"'
    end: str = '"\\n" {end}'
    between: str = '"\\n"'
    shared: tuple[str, ...] = ()

    def function(self, k: int, name: str, schema: dict) -> list[str]:
        return [f"f{k}: " + literal(f'{{"name": "{name}", "arguments": ') + f" a{k} " + literal("}"),
                f"a{k}: %json " + json.dumps(schema)]


CLOSE = "\n</parameter>\n"
# A string parameter's text and the end of its parameter, in one lexeme: text up to the first
# `\n</parameter>` and no further (a lexeme that stopped before it would be read greedily past it).
# Nothing past its first close: the parser ends a value at the first `</parameter>`, and the call reader a call
# at the first `</tool_call>`, wherever they stand.
CLOSED_ONCE = "~/(?s:.*)<\\/parameter>(?s:.+)/ & ~/(?s:.*)<\\/tool_call>(?s:.*)/"
TEXT = "PARAMETER_TEXT: /(?s:.*)\\n<\\/parameter>/ & " + CLOSED_ONCE


@dataclass(frozen=True)
class XmlCalls:
    begin: str = '{start} "\\n"'
    end: str = "{end}"
    between: str = '"\\n"'
    shared: tuple[str, ...] = (TEXT,)

    def function(self, k: int, name: str, schema: dict) -> list[str]:
        required = set(schema.get("required", []))
        parts, rules = [], []
        for j, (param, sub) in enumerate(schema.get("properties", {}).items()):
            written, more = value(sub, schema, f"{k}_{j}")
            rules += [f"p{k}_{j}: " + literal(f"<parameter={param}>\n") + " " + written, *more]
            parts.append(f"p{k}_{j}" + ("" if param in required else "?"))
        head = f"f{k}: " + literal(f"<function={name}>\n")
        return [" ".join([head, *parts, literal("</function>\n")]), *rules]


def value(sub: Any, schema: dict, at: str) -> tuple[str, list[str]]:
    """A parameter's value and its close, as the template writes it and the parser reads it back, and the
    rules it needs (a bounded string's own lexeme, named after the parameter's place `at`)."""
    sub = sub if isinstance(sub, dict) else {}
    choices = sub.get("enum", [sub["const"]] if "const" in sub else None)
    if choices is not None and all(isinstance(c, (str, int, float, bool)) for c in choices):
        written = [c if isinstance(c, str) else json.dumps(c) for c in choices]  # as `| string` writes them
        return "(" + " | ".join(literal(w) for w in written) + ") " + literal(CLOSE), []
    kind = sub.get("type")
    if kind == "boolean":  # the template writes Python's `True` (`| string`); the parser reads either case
        return '("true" | "false" | "True" | "False") ' + literal(CLOSE), []
    if kind in ("integer", "number", "object", "array"):
        refers = "$ref" in json.dumps(sub) and "$defs" in schema
        defs = {"$defs": schema["$defs"]} if refers else {}  # what its references point at
        return "%json " + json.dumps(sub | defs | {"x-guidance": dict(LAID_OUT)}) + " " + literal(CLOSE), []
    if kind == "string" and isinstance(sub.get("maxLength"), int):  # its length held as the schema holds it
        name = f"PARAMETER_TEXT_{at}"
        return f'{name} "\\n"', [f"{name}: /(?s:.{{0,{sub['maxLength']}}})\\n<\\/parameter>/ & {CLOSED_ONCE}"]
    return 'PARAMETER_TEXT "\\n"', []  # a string, or a value of no one type: the parser takes its text


SYNTAXES: dict[str, CallSyntax] = {"json_tools": JsonCalls(), "qwen3_coder": XmlCalls()}
