"""Markdown table cells: one line each, pipes escaped, so any docstring or help text fits a row."""

import json


def _one_line(text) -> str:
    return " ".join(str(text).split())


def cell(text) -> str:
    return _one_line(text).replace("|", "\\|")


def code(value) -> str:
    """A value as inline code (JSON for data, so defaults read as they are written in YAML or on a command line)."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    # Python-Markdown's tables do not split a row at a pipe inside a code span, and a backslash there would show.
    return f"`{_one_line(text)}`" if text != "" else '`""`'


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
