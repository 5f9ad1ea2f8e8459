"""The overflow filter's field sets are the official spec's request fields (the vendored subset), no more, no less."""

import json
from pathlib import Path

import pytest
from floodway.operator.gateway.payload import OPENAI_REQUEST_FIELDS

SCHEMAS = json.loads((Path(__file__).parents[2] / "data" / "openai-openapi" / "schemas.json").read_text())
SCHEMAS = SCHEMAS["components"]["schemas"]


def fields(name: str) -> set[str]:
    """Top-level property names of a request schema, through allOf and $ref."""
    schema = SCHEMAS[name]
    out = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        out |= fields(part["$ref"].rsplit("/", 1)[1]) if "$ref" in part else set(part.get("properties", {}))
    return out


@pytest.mark.parametrize("path,schema", [("/v1/completions", "CreateCompletionRequest"),
                                         ("/v1/chat/completions", "CreateChatCompletionRequest")])
def test_the_overflow_fields_are_the_specs(path, schema):
    assert OPENAI_REQUEST_FIELDS[path] == fields(schema)
