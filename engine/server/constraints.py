"""The one output constraint a request asks for -> StructuredSpec (torch-free).

Sources: OpenAI's `response_format` (json_object, json_schema), vLLM's `guided_json`, `guided_regex`,
`guided_choice`, `guided_grammar` and `structured_outputs`, and a forced tool call (`tool_choice` required or
named, engine/server/tools.py). At most one of them: two would need their intersection, which no grammar
compiler here builds.
"""

import json

from floodway.engine.server import tools
from floodway.engine.server.errors import bad_request
from floodway.engine.structured import StructuredSpec


def _response_format(rf) -> StructuredSpec | None:
    if rf.type == "text":
        return None
    if rf.type == "json_object" or rf.json_schema.schema_ is None:
        return StructuredSpec("json_object")
    return StructuredSpec("json_schema", rf.json_schema.schema_)


def _guided_json(value) -> StructuredSpec:
    if isinstance(value, str):  # vLLM takes the schema as a JSON string too
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON schema object")
    return StructuredSpec("json_schema", value)


def _structured_outputs(so) -> StructuredSpec | None:
    found = {k: v for k, v in (("json", so.json_), ("regex", so.regex), ("choice", so.choice),
                               ("grammar", so.grammar)) if v is not None}
    if so.json_object:
        found["json_object"] = True
    if len(found) > 1:
        raise ValueError(f"sets {' and '.join(found)}; give one")
    if not found:
        return None
    kind, value = next(iter(found.items()))
    if kind == "json":
        return _guided_json(value)
    return StructuredSpec("json_object") if kind == "json_object" else StructuredSpec(kind, value)


def sources(req) -> dict[str, StructuredSpec]:
    """Each field of the request that constrains the output, with the spec it asks for (400 if malformed)."""
    makers = {
        "response_format": _response_format,
        "guided_json": _guided_json,
        "guided_regex": lambda v: StructuredSpec("regex", v),
        "guided_choice": lambda v: StructuredSpec("choice", v),
        "guided_grammar": lambda v: StructuredSpec("grammar", v),
        "structured_outputs": _structured_outputs,
    }
    found = {}
    for name, make in makers.items():
        value = getattr(req, name, None)
        if value is None:
            continue
        try:
            spec = make(value)
            if spec is not None:
                spec.validate()
        except ValueError as e:
            raise bad_request(f"{name}: {e}", name) from None
        if spec is not None:
            found[name] = spec
    forced = tools.forced_spec(req)
    if forced is not None:
        found["tool_choice"] = forced
    return found


def structured_spec(req) -> StructuredSpec | None:
    found = sources(req)
    if len(found) > 1:
        raise bad_request(f"{' and '.join(found)} each constrain the output; give only one of them",
                          next(iter(found)))
    return next(iter(found.values()), None)


def constraint_param(req) -> str | None:
    """The field a compile error points at."""
    return next(iter(sources(req)), None)


def check_compiles(grammars, req, spec: StructuredSpec) -> None:
    """Compiles the spec (cached for the engine): a schema or pattern the compiler refuses is a 400 naming its field."""
    try:
        grammars.compile(spec)
    except ValueError as e:
        raise bad_request(str(e), constraint_param(req)) from None
