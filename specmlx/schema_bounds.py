"""JSON schemas with their numbers bounded, as llama.cpp's schema grammars bound them.

A JSON number's grammar has no end of its own: a model unsure how to end one writes `8888...` until
max_tokens. llama.cpp's grammars allow 16 digits before the point and 16 after. llguidance has no
option for it, so the schema says it: every number it allows gets a `minimum` and `maximum` (16
digits, no exponent) and a `multipleOf` of 1e-10 (10 digits after the point: llguidance reads no
finer step exactly), unless the schema's own bounds are finer. A bound the schema sets itself is
kept. A value the schema leaves open (`{}`, an object's other properties, an array's items)
becomes any JSON with bounded numbers (`_any`).
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import SpecmlxError

INTEGRAL_DIGITS = 16
FRACTION_STEP = 1e-10  # at most 10 digits after the point
LIMIT = 10 ** INTEGRAL_DIGITS - 1
# Any JSON value, its numbers bounded, down to `OPEN_DEPTH` levels of arrays and objects (past them,
# any JSON). Not recursive: the grammar engine intersects `allOf`'s members, and cannot intersect a
# recursive schema with itself.
OPEN_DEPTH = 4
ANY_NAME = "specmlx-any-{}"
ANY_REF = {"$ref": "#/$defs/" + ANY_NAME.format(OPEN_DEPTH)}


def _any(depth: int) -> dict[str, Any]:
    inner = {"$ref": "#/$defs/" + ANY_NAME.format(depth - 1)} if depth > 1 else True
    return {"anyOf": [{"type": ["null", "boolean", "string"]}, {"type": "number"},
                      {"type": "array", "items": inner}, {"type": "object", "additionalProperties": inner}]}


# Keywords whose value is a schema, a list of schemas, or a dict of them. Not `not` and `if`: a bound
# there would widen what the schema accepts (more numbers fail a bounded `not`, or a bounded `if`).
ONE = ("additionalProperties", "items", "additionalItems", "contains", "then", "else",
       "propertyNames", "unevaluatedItems", "unevaluatedProperties")
# Deeper than this the grammar engine refuses a schema anyway (about 60 levels): refused here first,
# before the walk (and `deepcopy`) run out of Python's stack.
MAX_DEPTH = 200
MANY = ("anyOf", "allOf", "oneOf", "prefixItems")
NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Keywords that say nothing of a value: a schema of these alone takes any value.
ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}


def bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (unchanged) with every number it allows bounded, and every value it leaves open any JSON with
    bounded numbers; refused (SpecmlxError) if nested past `MAX_DEPTH`. One bounded already is returned as it is
    (a tool's arguments are bounded to be embedded, then compiled alone to check them)."""
    if ANY_NAME.format(OPEN_DEPTH) in schema.get("$defs", {}):
        return schema
    if _depth(schema) > MAX_DEPTH:
        raise SpecmlxError("the JSON schema cannot be used: it is nested too deeply for the grammar engine "
                           f"(more than {MAX_DEPTH} levels)")
    out = _walk(copy.deepcopy(schema))
    defs = out.setdefault("$defs", {})
    for depth in range(1, OPEN_DEPTH + 1):
        defs.setdefault(ANY_NAME.format(depth), _bound_any(_any(depth)))
    return out


def _walk(schema: Any) -> Any:
    if schema is True or (isinstance(schema, dict) and set(schema) <= ANNOTATIONS):
        return dict(ANY_REF)
    if not isinstance(schema, dict):
        return schema  # false, or what is not a schema: left to the grammar engine to judge
    for key in ONE:
        if key in schema:
            schema[key] = _walk(schema[key])
    for key in MANY:
        if isinstance(schema.get(key), list):
            schema[key] = [_walk(s) for s in schema[key]]
    for key in NAMED:
        if isinstance(schema.get(key), dict):
            schema[key] = {name: _walk(s) for name, s in schema[key].items()}
    types = schema.get("type")
    types = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    if "object" in types and "additionalProperties" not in schema and "unevaluatedProperties" not in schema:
        schema["additionalProperties"] = dict(ANY_REF)
    if "array" in types and "items" not in schema and "unevaluatedItems" not in schema:
        schema["items"] = dict(ANY_REF)
    if types & {"number", "integer"} and "const" not in schema and "enum" not in schema:
        _bound(schema, "number" in types)
    return schema


def _bound_any(schema: dict[str, Any]) -> dict[str, Any]:
    """One of `_any`'s levels with its number bounded (its open values left as they are)."""
    _bound(schema["anyOf"][1], fractions=True)
    return schema


def _depth(value: Any) -> int:
    """How deep `value` nests, walked without recursion (a body may nest past Python's stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _number(schema: dict[str, Any], *names: str) -> float | None:
    """The first of `names` the schema sets to a number (draft 4's boolean exclusive bounds are not)."""
    for name in names:
        value = schema.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def _bound(schema: dict[str, Any], fractions: bool) -> None:
    low = _number(schema, "minimum", "exclusiveMinimum")
    high = _number(schema, "maximum", "exclusiveMaximum")
    own = [b for b in (low, high) if b is not None]
    if any(abs(b) > LIMIT for b in own):  # the schema asks for numbers past the bound itself: kept as it is
        return
    if low is None:
        schema["minimum"] = -LIMIT
    if high is None:
        schema["maximum"] = LIMIT
    # a bound of the schema's own finer than the step would leave its range without a value on the step
    fine = any(abs(b / FRACTION_STEP - round(b / FRACTION_STEP)) > 1e-6 for b in own)
    if fractions and "multipleOf" not in schema and not fine:
        schema["multipleOf"] = FRACTION_STEP
