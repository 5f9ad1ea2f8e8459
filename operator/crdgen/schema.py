"""Pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

Structural schemas need every node typed and inline: $refs are resolved, Optional (anyOf with null) becomes
the plain type left out of `required`, JSON Schema 2020 numeric exclusiveMinimum becomes OpenAPI v3's
boolean form, titles and `additionalProperties: false` go (the API server prunes unknown fields instead)."""

from typing import Any

_DROP = {"title", "$defs"}


def _non_null(any_of: list[dict]) -> dict:
    branches = [b for b in any_of if b.get("type") != "null"]
    if len(branches) != 1:
        raise ValueError(f"cannot express a union of {branches} in a structural schema")
    return branches[0]


def structural(node: dict, defs: dict[str, dict]) -> dict[str, Any]:
    node = dict(node)
    if "anyOf" in node:
        node = {**_non_null(node.pop("anyOf")), **node}
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **node}  # the property's own description and default win over the model's
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
        elif key == "properties":
            out[key] = {name: structural(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    if "type" not in out and "properties" in out:
        out["type"] = "object"
    return out


def model_schema(model_cls) -> dict[str, Any]:
    schema = model_cls.model_json_schema(by_alias=True, mode="validation")
    return structural(schema, schema.get("$defs", {}))
