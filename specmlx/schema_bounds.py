"""JSON schemas with their numbers bounded, as llama.cpp's schema grammars bound them.

A JSON number's grammar has no end of its own: a model unsure how to end one writes `8888...` until
max_tokens. llama.cpp's grammars allow 16 digits before the point and 16 after. llguidance has no
option for it, so the schema says it: every number it allows gets a `minimum` and `maximum` (16
digits, no exponent) and a `multipleOf` of 1e-10 (10 digits after the point: llguidance reads no
finer step exactly). A bound the schema sets itself is kept. A value the schema leaves open (`{}`,
an object's other properties, an array's items) becomes one of `ANY`'s, the same JSON with
bounded numbers.
"""

from __future__ import annotations

import copy
from typing import Any

INTEGRAL_DIGITS = 16
FRACTION_STEP = 1e-10  # at most 10 digits after the point
LIMIT = 10 ** INTEGRAL_DIGITS - 1
ANY_NAME = "specmlx-any"
ANY_REF = {"$ref": f"#/$defs/{ANY_NAME}"}
# Any JSON value, its numbers bounded (`bounded` bounds the number's schema here too).
ANY = {"anyOf": [{"type": ["null", "boolean", "string"]}, {"type": "number"},
                 {"type": "array", "items": ANY_REF}, {"type": "object", "additionalProperties": ANY_REF}]}

# Keywords whose value is a schema, a list of schemas, or a dict of them.
ONE = ("additionalProperties", "items", "additionalItems", "contains", "not", "if", "then", "else",
       "propertyNames", "unevaluatedItems", "unevaluatedProperties")
MANY = ("anyOf", "allOf", "oneOf", "prefixItems")
NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Keywords that say nothing of a value: a schema of these alone takes any value.
ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}


def bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (unchanged) with every number it allows bounded, and every value it leaves open one of `ANY`'s."""
    out = _walk(copy.deepcopy(schema))
    out.setdefault("$defs", {}).setdefault(ANY_NAME, _walk(copy.deepcopy(ANY)))
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


def _bound(schema: dict[str, Any], fractions: bool) -> None:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    past = [b for b in (low, high) if isinstance(b, (int, float)) and abs(b) > LIMIT]
    if past:  # the schema asks for numbers past the bound itself: its own range is kept as it is
        return
    if low is None:
        schema["minimum"] = -LIMIT
    if high is None:
        schema["maximum"] = LIMIT
    if fractions and "multipleOf" not in schema:
        schema["multipleOf"] = FRACTION_STEP
