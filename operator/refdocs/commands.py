"""docs/reference/cli.md: every `floodway` command with its arguments and options, read from the typer app (the
engine's flags come from EngineConfig's fields through engine/server/cli.py)."""

import types
import typing

import typer
from floodway.operator.refdocs.table import cell, code, table


def _type_name(annotation) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _type_name(args[0])
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(str(a) for a in args)
    if typing.get_origin(annotation) is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    return getattr(annotation, "__name__", str(annotation)).lower()


def _param_row(param) -> tuple[str, ...]:
    if param.param_type_name == "argument":
        name = f"`{param.name.upper()}`"
    else:
        name = ", ".join(f"`{o}`" for o in param.opts + param.secondary_opts)
    is_flag = getattr(param, "is_flag", False)
    kind = "flag" if is_flag else _type_name(param.type_descriptor.annotation)
    if getattr(param, "multiple", False):
        kind += " (repeatable)"
    default = "" if param.required or param.default is None or callable(param.default) else param.default
    if is_flag and param.secondary_opts:
        default = param.opts[0] if param.default else param.secondary_opts[0]
    elif is_flag:
        default = "" if not param.default else "on"
    return name, cell(kind), code(default) if default not in ("", ()) else "", cell(param.help or "")


def _commands(cmd, path: list[str]):
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    if path[1:]:
        yield path, cmd
    for name in sorted(subs):
        if not subs[name].hidden:
            yield from _commands(subs[name], path + [name])


def render() -> str:
    from floodway.operator.cli import app  # the whole CLI: lazy, so that importing refdocs loads nothing heavy

    root = typer.main.get_command(app)
    out = ["# Command line reference\n",
           "Generated from the `floodway` command's own definitions; `floodway <command> --help` shows the same.\n"]
    for path, cmd in [(["floodway"], root), *_commands(root, ["floodway"])]:
        out.append(f"## {' '.join(path)}\n")
        if cmd.help:
            out.append(cell(cmd.help) + "\n")
        rows = [_param_row(p) for p in cmd.params if not getattr(p, "hidden", False)]
        if rows:
            out.append(table(("argument or option", "type", "default", "description"), rows))
    return "\n".join(out)
