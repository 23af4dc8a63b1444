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
- `gemma4` (Gemma 4's): `<|tool_call>call:f{key:<|"|>text<|"|>,n:3}<tool_call|>`: `Gemma4Calls`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import SpecmlxError
from ..grammar import LAID_OUT
from ..schema_bounds import ANY_NAME


class CallSyntax(Protocol):
    """Around each call (`begin`, `end`: Lark expressions with the markers `{start}` and `{end}`),
    between calls (`between`), the rules of a call of function `name` (`function`: its rule is
    `f{k}`, its arguments valid against `schema`, an object's), and the rules they share (`shared`)."""

    begin: str
    end: str
    between: str
    shared: tuple[str, ...]

    def function(self, k: int, name: str, schema: dict) -> list[str]: ...

    def bind(self, tokenizer: Any) -> "CallSyntax":
        """The syntax as `tokenizer` writes its markers (a marker that is a token is matched by its id)."""


def literal(text: str) -> str:
    """A Lark string literal of `text`."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class JsonCalls:
    begin: str = '{start} "\\n"'
    end: str = '"\\n" {end}'
    between: str = '"\\n"'
    shared: tuple[str, ...] = ()

    def bind(self, tokenizer: Any) -> CallSyntax:
        return self

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

    def bind(self, tokenizer: Any) -> CallSyntax:
        return self

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


QUOTE = '<|"|>'  # Gemma 4's string delimiter, a token of its own
KEY = re.compile(r"\w+")  # the keys mlx-lm's parser quotes back to JSON: others would not read back
NOT_QUOTE = '& ~/(?s:.*)<\\|"\\|>(?s:.*)/'  # a string's text holds no delimiter
OPEN = ANY_NAME.format("")  # `schema_bounds`'s names of an open value's schema
MAX_REFS = 8
NUMBER = "/-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,10})?/"  # as bounded as `schema_bounds` bounds an open number


@dataclass(frozen=True)
class Gemma4Calls:
    """Gemma 4's: `<|tool_call>call:f{key:value,...}<tool_call|>`, calls back to back, as its template writes
    an earlier turn's. Keys are bare and in the template's order (`dictsort`: case-blind), strings
    between `<|"|>` delimiters, numbers and booleans as JSON writes them; an object and a list nest
    the same form, and a value of any type (an open schema's) is any of these. mlx-lm's parser turns
    it back into JSON. A null cannot be written (the template writes Python's `None`, which it cannot read)."""

    quote: str = literal(QUOTE)  # the delimiter in Lark: by its token id where it is one (`bind`)
    begin: str = "{start}"
    end: str = "{end}"
    between: str = ""

    @property
    def shared(self) -> tuple[str, ...]:
        q = self.quote
        return (f"QUOTED: /(?s:.+)/ {NOT_QUOTE}", f"BARE: /\\w+/", f"NUMBER: {NUMBER}",
                f'any: {q} QUOTED? {q} | NUMBER | "true" | "false" | "[" (any ("," any)*)? "]" '
                f'| "{{" (BARE ":" any ("," BARE ":" any)*)? "}}"')

    def bind(self, tokenizer: Any) -> "Gemma4Calls":
        return Gemma4Calls(quote=marker(tokenizer, QUOTE))

    def function(self, k: int, name: str, schema: dict) -> list[str]:
        rules: list[str] = []
        defs = schema.get("$defs", {})
        return [f"f{k}: " + literal(f"call:{name}") + " " + self._object(schema, f"{k}", rules, defs), *rules]

    def _value(self, sub: Any, at: str, rules: list[str], defs: dict) -> str:
        """A value of schema `sub` in Gemma's form; its rules, named after its place `at`, go to `rules`;
        a reference is to the function's own `defs`, or to an open value (`schema_bounds`'s)."""
        sub = sub if isinstance(sub, dict) else {}
        ref = sub.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if name.startswith(OPEN):
                return "any"
            if name in defs and at.count("r") < MAX_REFS:  # a schema that refers to itself stops somewhere
                return self._value(defs[name], f"{at}r", rules, defs)
        choices = sub.get("enum", [sub["const"]] if "const" in sub else None)
        if choices is not None and all(isinstance(c, (str, int, float, bool)) for c in choices):
            return "(" + " | ".join(self._literal(c) for c in choices) + ")"
        kinds = sub.get("type")
        if isinstance(kinds, list):
            return "(" + " | ".join(self._value(sub | {"type": t}, f"{at}t{j}", rules, defs)
                                    for j, t in enumerate(kinds) if t != "null") + ")"
        if kinds == "string":
            bound = sub.get("maxLength")
            if not isinstance(bound, int):
                return f"{self.quote} QUOTED? {self.quote}"
            rules.append(f"S{at}: /(?s:.{{1,{bound}}})/ {NOT_QUOTE}")
            return f"{self.quote} S{at}? {self.quote}"
        if kinds in ("integer", "number", "boolean"):  # as JSON writes them
            return "%json " + json.dumps(sub | {"x-guidance": {"whitespace_flexible": False}})
        if kinds == "object":  # its keys as the schema lists them, else any keys
            return self._object(sub, at, rules, defs) if sub.get("properties") else (
                '"{" (BARE ":" any ("," BARE ":" any)*)? "}"')
        if kinds == "array":
            rules.append(f"l{at}: " + self._value(sub.get("items"), f"{at}i", rules, defs))
            return f'"[" (l{at} ("," l{at})*)? "]"'
        if kinds is not None or set(sub) - {"description", "title", "default"}:  # null, anyOf, a reference too deep
            raise SpecmlxError(f"a value of schema {json.dumps(sub)[:80]} cannot be held to Gemma 4's call form")
        return "any"  # an open value

    def _object(self, schema: dict, at: str, rules: list[str], defs: dict) -> str:
        """`{key:value,...}`: its required keys always, the others where the model writes them, in the
        template's order. Rule `o{at}_{j}` writes the keys from the j-th on, `c{at}_{j}` the same after a comma."""
        keys = sorted(schema.get("properties", {}).items(), key=lambda item: item[0].lower())
        required = set(schema.get("required", []))
        for key, _ in keys:
            if not KEY.fullmatch(key):
                raise SpecmlxError(f"parameter {key!r}: Gemma 4's calls carry keys of letters, digits and _ alone")
        if not keys:
            return '"{}"'
        for j in reversed(range(len(keys))):
            key, sub = keys[j]
            item = literal(f"{key}:") + " " + self._value(sub, f"{at}_{j}", rules, defs)
            later = required & {k for k, _ in keys[j + 1:]}
            rest = "" if j + 1 == len(keys) else f" c{at}_{j + 1}" + ("" if later else "?")
            skip = key not in required and j + 1 < len(keys)  # or begin at the next key
            rules += [f"o{at}_{j}: {item}{rest}" + (f" | o{at}_{j + 1}" if skip else ""),
                      f'c{at}_{j}: "," {item}{rest}' + (f" | c{at}_{j + 1}" if skip else "")]
        return '"{" o' + f"{at}_0" + ("" if required & {k for k, _ in keys} else "?") + ' "}"'

    def _literal(self, choice: Any) -> str:
        return f"{self.quote} {literal(choice)} {self.quote}" if isinstance(choice, str) else literal(json.dumps(choice))


def marker(tokenizer: Any, text: str) -> str:
    """A marker in Lark: by its token id when it is one token, as the template's prompt encodes it
    (llguidance matches an added token by id, never as text), else as text."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return f"<[{ids[0]}]>" if len(ids) == 1 else json.dumps(text)


SYNTAXES: dict[str, CallSyntax] = {"json_tools": JsonCalls(), "qwen3_coder": XmlCalls(), "gemma4": Gemma4Calls()}
