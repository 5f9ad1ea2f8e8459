"""Extract the component schemas our tests need from the official OpenAI OpenAPI spec.

Usage: python -P tests/data/openai-openapi/extract.py PATH/TO/openapi.json
Writes schemas.json beside this file: the roots below and every schema they reach through $ref, with
OpenAPI 3.0's `nullable: true` turned into a union with null (an OAS 3.1 validator ignores the marker, and
OpenAI itself sends null there) and documentation-only keys dropped.
"""

import json
import sys
from pathlib import Path

ROOTS = (
    "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "CreateCompletionResponse",
    "ErrorResponse", "ListModelsResponse", "Model", "CreateCompletionRequest", "CreateChatCompletionRequest",
)
DOC_KEYS = {"description", "example", "examples", "title", "deprecated"}
SCHEMA_MAPS = {"properties", "patternProperties", "$defs"}
SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
SCHEMA_ONE = {"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
              "unevaluatedProperties", "unevaluatedItems"}
PREFIX = "#/components/schemas/"


def clean(schema):
    """One schema, nullable resolved, documentation keys and x-* extensions dropped."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in DOC_KEYS or key.startswith("x-") or key == "nullable":
            continue
        if key in SCHEMA_MAPS:
            out[key] = {name: clean(sub) for name, sub in value.items()}
        elif key in SCHEMA_LISTS:
            out[key] = [clean(sub) for sub in value]
        elif key in SCHEMA_ONE:
            out[key] = clean(value)
        else:
            out[key] = value
    if schema.get("nullable") is True:
        out = nullable(out)
    return out


def nullable(schema):
    if isinstance(schema.get("type"), str) and not ({"$ref"} | SCHEMA_LISTS) & schema.keys():
        schema = {**schema, "type": [schema["type"], "null"]}
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def refs(schema):
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(PREFIX):
            yield ref[len(PREFIX):]
        for value in schema.values():
            yield from refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from refs(value)


def closure(components: dict) -> dict:
    todo, seen = list(ROOTS), {}
    while todo:
        name = todo.pop()
        if name not in seen:
            seen[name] = clean(components[name])
            todo.extend(refs(seen[name]))
    return dict(sorted(seen.items()))


def main(path: str) -> None:
    spec = json.loads(Path(path).read_text())
    out = {"openapi": spec["openapi"], "info": {"version": spec["info"]["version"]},
           "components": {"schemas": closure(spec["components"]["schemas"])}}
    target = Path(__file__).with_name("schemas.json")
    target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(out['components']['schemas'])} schemas, {target.stat().st_size} bytes -> {target}")


if __name__ == "__main__":
    main(sys.argv[1])
