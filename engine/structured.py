"""What a request's output must match (torch-free: the server builds and checks it before loading anything).

`StructuredSpec` names one constraint: any JSON object, a JSON schema, a regular expression, one of a list of
strings, or an EBNF grammar. engine/structured_grammar.py compiles it into per-sequence grammar state.
"""

import json
from dataclasses import dataclass
from typing import Any

KINDS = ("json_object", "json_schema", "regex", "choice", "grammar")
MAX_SPEC_CHARS = 200_000  # a schema or grammar larger than this is refused before the compiler sees it


@dataclass(frozen=True)
class StructuredSpec:
    kind: str
    # json_object: None; json_schema: the schema (dict); regex and grammar: the pattern or EBNF text;
    # choice: the non-empty strings allowed.
    payload: Any = None

    def validate(self) -> None:
        """Raises ValueError naming the problem; what needs the grammar compiler is checked when compiling."""
        if self.kind not in KINDS:
            raise ValueError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        p = self.payload
        if self.kind == "json_object":
            ok = p is None
        elif self.kind == "json_schema":
            ok = isinstance(p, dict)
        elif self.kind == "choice":
            ok = isinstance(p, list) and bool(p) and all(isinstance(c, str) and c for c in p)
        else:
            ok = isinstance(p, str) and bool(p)
        if not ok:
            what = {"json_object": "no payload", "json_schema": "a JSON schema object",
                    "choice": "a non-empty list of non-empty strings"}.get(self.kind, "a non-empty string")
            raise ValueError(f"{self.kind} needs {what}, got {p!r:.80}")
        if len(self.payload_text()) > MAX_SPEC_CHARS:
            raise ValueError(f"the {self.kind} is longer than {MAX_SPEC_CHARS} characters")

    def payload_text(self) -> str:
        """The payload as the compiler takes it (and as a cache key)."""
        p = self.payload
        return p if isinstance(p, str) else json.dumps(p)  # key order kept: properties come out in it
