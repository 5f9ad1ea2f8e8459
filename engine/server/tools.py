"""Tool calling for chat (torch-free): tools rendered into the prompt by the model's own chat template, a
forced call (`tool_choice` required or named) enforced through a JSON-schema grammar, and the model's output
turned into OpenAI `tool_calls`, whole or as stream deltas.

What the model writes: with a named function, the arguments object (the grammar allows nothing else); with
`required`, a JSON array of {"name", "parameters"} objects, one per call (as vLLM forces it); with `auto`, free
text in which calls are read in the Hermes syntax that Qwen2.5, Hermes and SmolLM3 templates teach:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. A template that never reads `tools` cannot show
the model its tools: such a request is refused.
"""

import functools
import json
import uuid
from dataclasses import dataclass, field

import jinja2
import jinja2.meta
from floodway.engine.server.errors import bad_request
from floodway.engine.server.responses import DeltaFunctionCall, DeltaToolCall, FunctionCall, ToolCall
from floodway.engine.structured import StructuredSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NO_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolMode:
    kind: str  # "auto" | "required" | "named"
    name: str | None = None  # the function, when named


def mode_of(req) -> ToolMode | None:
    """How the request's output is read for tool calls; None: plain content (no tools, or tool_choice none)."""
    if not getattr(req, "tools", None) or req.tool_choice == "none":
        return None
    choice = req.tool_choice or "auto"
    return ToolMode(choice) if isinstance(choice, str) else ToolMode("named", choice.function.name)


def forced_spec(req) -> StructuredSpec | None:
    """The grammar a required or named tool_choice puts on the output."""
    mode = mode_of(req)
    if mode is None or mode.kind == "auto":
        return None
    params = {t.function.name: t.function.parameters or NO_PARAMETERS for t in req.tools}
    if mode.kind == "named":
        return StructuredSpec("json_schema", params[mode.name])
    calls = [{"type": "object", "properties": {"name": {"enum": [name]}, "parameters": schema},
              "required": ["name", "parameters"], "additionalProperties": False} for name, schema in params.items()]
    array = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if req.parallel_tool_calls is False:
        array["maxItems"] = 1
    return StructuredSpec("json_schema", array)


@functools.lru_cache(maxsize=8)
def supports_tools(template: str | None) -> bool:
    """Whether a chat template reads the `tools` variable (the only way the model learns of them)."""
    if not template:
        return False
    try:
        return "tools" in jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template))
    except jinja2.TemplateSyntaxError:
        return False


def template_kwargs(req, tokenizer) -> dict:
    """apply_chat_template's extra arguments for the request's tools; 400 when the template has no tool support."""
    if not getattr(req, "tools", None):
        return {}
    template = tokenizer.chat_template
    if isinstance(template, dict):  # named templates: transformers picks "tool_use" when tools are given
        template = template.get("tool_use") or template.get("default")
    if not supports_tools(template):
        raise bad_request("This model's chat template has no tool support (it never reads `tools`), so the model "
                          "cannot be shown them: send the request without tools, or serve a model whose template "
                          "supports tools.", "tools", code="tools_not_supported")
    return {"tools": [t.model_dump(exclude_none=True) for t in req.tools]}


def template_message(m) -> dict:
    """A request message as chat templates read it: tool calls' arguments as objects where they parse."""
    msg = {"role": m.role, "content": m.text()}
    if m.name is not None:
        msg["name"] = m.name
    if m.tool_call_id is not None:
        msg["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": _loads(c.function.arguments)}}
                             for c in m.tool_calls]
    return msg


def _loads(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=FunctionCall(name=name, arguments=arguments))


def parse(mode: ToolMode, text: str) -> tuple[str | None, list[ToolCall]]:
    """A finished output -> (content, tool calls). Output that does not parse stays content, with no calls."""
    if mode.kind == "named":
        return None, [_call(mode.name, text)]
    if mode.kind == "required":
        try:
            return None, [_call(c["name"], json.dumps(c["parameters"])) for c in json.loads(text)]
        except (json.JSONDecodeError, TypeError, KeyError):
            return text, []  # cut short by max_tokens
    head, _, rest = text.partition(OPEN)
    if not rest:
        return text, []
    calls = []
    for block in (OPEN + rest).split(OPEN)[1:]:
        body = block.split(CLOSE, 1)[0]
        try:
            call = json.loads(body)
            args = call.get("arguments", call.get("parameters", {}))
            calls.append(_call(call["name"], args if isinstance(args, str) else json.dumps(args)))
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
            return text, []
    return head.strip() or None, calls


@dataclass
class ToolStream:
    """One choice's stream: content goes out as it comes until a call may have begun; calls go out as deltas
    (a named call's arguments as they are generated, the others whole once the output is finished)."""

    mode: ToolMode
    text: str = ""
    sent: int = 0  # characters of text already sent as content (or as a named call's arguments)
    calls: list[ToolCall] = field(default_factory=list)

    def feed(self, piece: str, finished: bool) -> tuple[str, list[DeltaToolCall]]:
        """The next piece of output -> (content to send now, tool call deltas to send now)."""
        self.text += piece
        if self.mode.kind == "named":
            first = not self.calls
            if first:
                self.calls = parse(self.mode, "")[1]
            c = self.calls[0]
            fn = DeltaFunctionCall(name=c.function.name if first else None, arguments=piece)
            return "", [DeltaToolCall(index=0, id=c.id if first else None, type="function" if first else None,
                                      function=fn)]
        if not finished:
            if self.mode.kind == "required":
                return "", []
            return self._take(_safe_end(self.text)), []
        content, self.calls = parse(self.mode, self.text)
        if not self.calls:
            return self._take(len(self.text)), []
        deltas = [DeltaToolCall(index=i, id=c.id, type="function", function=DeltaFunctionCall(
            name=c.function.name, arguments=c.function.arguments)) for i, c in enumerate(self.calls)]
        return self._take(self.text.index(OPEN)) if self.mode.kind == "auto" else "", deltas

    def _take(self, end: int) -> str:
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out


def _safe_end(text: str) -> int:
    """How much of unfinished auto-mode output is surely content: up to a call's start, less any tail that may
    be the start of one."""
    at = text.find(OPEN)
    if at >= 0:
        return at
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-k:]):
            return len(text) - k
    return len(text)
