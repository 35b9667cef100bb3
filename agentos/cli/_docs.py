"""The generated parts of docs/: the CLI reference (docs/cli.md, from ``--help``) and the
field tables of the file formats (docs/formats.md, from the pydantic models and the
comments beside their fields).

``python -m agentos.cli._docs`` rewrites them; ``tests/test_cli.py`` fails when either is
out of date.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from agentos.cli import cli

START = "<!-- cli-reference:start -->"
END = "<!-- cli-reference:end -->"
WIDTH = 100


def _walk(
    command: click.Command, path: list[str], parent: click.Context | None
) -> Iterator[tuple[str, str]]:
    ctx = click.Context(  # with the command's own settings (-h), as `agentos ... --help` has
        command,
        info_name=path[-1],
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        **command.context_settings,
    )
    yield " ".join(path), command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name], ctx)


def commands() -> list[tuple[str, str]]:
    """Every command, as (``agentos hub install``, its help text)."""
    return list(_walk(cli, ["agentos"], None))


def reference() -> str:
    parts = [START, ""]
    for name, help_text in commands():
        parts += [f"### `{name}`", "", "```text", help_text.rstrip(), "```", ""]
    parts.append(END)
    return "\n".join(parts)


def update(doc: Path) -> bool:
    """Rewrite the CLI reference in ``doc``; return whether it changed."""
    text = doc.read_text(encoding="utf-8")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    new = head + reference() + tail
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


# --- docs/formats.md ------------------------------------------------------------------------

FIELDS = re.compile(r"<!-- fields: ([\w.]+):(\w+) -->\n.*?<!-- /fields -->", re.DOTALL)


def _comments(model: type[Any]) -> dict[str, str]:
    """Each field's comment in the model's source: on its line, or on the lines above."""
    out: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(model).splitlines()[1:]:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# "))
            continue
        match = re.match(r"(\w+): [^#]*?(?:#\s*(.*))?$", text)
        if match and not text.startswith(("def ", "@", "return", '"')):
            out[match[1]] = " ".join([*above, match[2] or ""]).strip()
        above = []
    return out


def _type(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    text = re.sub(r"Annotated\[(\w+), [^\]]*\]", r"\1", text)
    return re.sub(r"\b(?:agentos\.[\w.]+\.)", "", text)


def field_table(module: str, name: str) -> str:
    """The fields of one model: name, type, default (required when none), meaning."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    model = getattr(importlib.import_module(module), name)
    notes = _comments(model)
    for base in model.__mro__[1:]:
        if hasattr(base, "model_fields") and base.__module__.startswith("agentos"):
            notes = {**_comments(base), **notes}
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field_name, info in model.model_fields.items():
        if isinstance(info.default, BaseModel):
            default = "its defaults (below)"
        elif info.default is not PydanticUndefined:
            default = f"`{info.default!r}`" if info.default is not None else "none"
        elif info.default_factory is not None:
            default = f"`{info.default_factory()!r}`"
        else:
            default = "required"
        meaning = notes.get(field_name, "").replace("|", "\\|")
        kind = _type(info.annotation).replace("|", "\\|")
        rows.append(f"| `{field_name}` | `{kind}` | {default} | {meaning} |")
    return "\n".join(rows)


LIMITS = re.compile(r"<!-- limits -->\n.*?<!-- /limits -->", re.DOTALL)


def limits_table() -> str:
    """Every size limit of :mod:`agentos.shared.limits`: what, how much, and why that much."""
    from agentos.shared import limits

    rows = ["| what | at most | why this much |", "|---|---|---|"]
    for limit in limits.ALL:
        what = limit.of if limit.unit == "bytes" else f"{limit.unit} of {limit.of}"
        rows.append(f"| {what} | {limit.shown} | {limit.why} |")
    return "\n".join(rows)


def update_formats(doc: Path) -> bool:
    """Rewrite every field table and the limits table in ``doc``; return whether it
    changed."""
    text = doc.read_text(encoding="utf-8")
    new = FIELDS.sub(
        lambda m: f"<!-- fields: {m[1]}:{m[2]} -->\n{field_table(m[1], m[2])}\n<!-- /fields -->",
        text,
    )
    new = LIMITS.sub(lambda _m: f"<!-- limits -->\n{limits_table()}\n<!-- /limits -->", new)
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


# --- docs/architecture.md: the module map ---------------------------------------------------

MODULES = re.compile(r"<!-- modules -->\n.*?<!-- /modules -->", re.DOTALL)
# Code put on an agent's PYTHONPATH and bundled fixtures are not modules of the map.
_NOT_PACKAGES = ("site", "_bundled")


def packages(root: Path) -> list[Path]:
    """Every package of AgentOS, the top one first, then its folders in order."""
    top = root / "agentos"
    found = [
        init.parent
        for init in top.rglob("__init__.py")
        if not set(init.relative_to(top).parts) & set(_NOT_PACKAGES)
    ]
    return sorted(found, key=lambda p: (p != top, p.relative_to(root).parts))


def _first_sentence(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph)[0]


def folder_table(root: Path) -> str:
    """The folders of ``agentos/``, each with the first sentence of its ``__init__``."""
    rows = ["| folder | what it is |", "|---|---|"]
    for package in packages(root)[1:]:
        if package.parent != root / "agentos":
            continue
        rows.append(f"| `{package.name}/` | {_first_sentence(package / '__init__.py')} |")
    return "\n".join(rows)


def module_map(root: Path) -> str:
    """Every module of the packages, with the first sentence of its docstring."""
    parts = []
    for package in packages(root):
        parts += [f"**`{'.'.join(package.relative_to(root).parts)}`**", ""]
        for path in sorted(package.glob("*.py")):
            first = _first_sentence(path)
            name = path.stem if path.stem != "__init__" else "(package)"
            parts.append(f"- `{name}`: {first}" if first else f"- `{name}`")
        parts.append("")
    return "\n".join(parts).rstrip()


FOLDERS = re.compile(r"<!-- folders -->\n.*?<!-- /folders -->", re.DOTALL)


def update_architecture(doc: Path) -> bool:
    text = doc.read_text(encoding="utf-8")
    root = doc.parent.parent
    new = MODULES.sub(lambda _m: f"<!-- modules -->\n{module_map(root)}\n<!-- /modules -->", text)
    new = FOLDERS.sub(lambda _m: f"<!-- folders -->\n{folder_table(root)}\n<!-- /folders -->", new)
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


# --- agentos/cli/help.json: every command's --help, for the fast path ------------------------


def click_help(path: list[str], flag: str = "--help") -> str:
    """What ``agentos PATH... --help`` prints through click (its own rendering, in this
    process), on a terminal at least 80 columns wide (click then wraps at 78)."""
    from click.testing import CliRunner

    from agentos.cli._main import main

    with CliRunner().isolation(env={"COLUMNS": "80"}) as (out, _err, _):
        main([*path, flag])
        return out.getvalue().decode("utf-8")


def help_texts() -> dict[str, str]:
    """Every command's ``--help`` as click prints it, by command path (``agentos hub``)."""
    return {name: click_help(name.split()[1:]) for name, _ in commands()}


def update_help(target: Path) -> bool:
    """Rewrite the stored help (:data:`agentos.cli.HELP_FILE`); return whether it changed."""
    import json

    new = json.dumps(help_texts(), indent=0, sort_keys=True) + "\n"
    if target.is_file() and target.read_text(encoding="utf-8") == new:
        return False
    target.write_text(new, encoding="utf-8")
    return True


# --- agentos/mcp_server/tools.json: what tools/list says before a family is built -----------


def tool_specs() -> list[dict[str, Any]]:
    """Every tool of AgentOS's own as tools/list gives it, with its family, in the order
    the server lists them (each family built in turn, in a workspace of no packages)."""
    import tempfile

    import anyio
    from mcp.server.fastmcp import FastMCP

    from agentos.mcp_server.server import FAMILIES, unbuilt_server
    from agentos.workspace.layout import Workspace

    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = unbuilt_server(Workspace(Path(tmp)))
        seen: set[str] = set()
        for family in FAMILIES:
            server.build_families([family])
            for listed in anyio.run(FastMCP.list_tools, server):
                if listed.name not in seen:
                    seen.add(listed.name)
                    tool = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
                    out.append({"family": family, "tool": tool})
    return out


def update_tools(target: Path) -> bool:
    """Rewrite :data:`agentos.mcp_server.server.TOOLS_FILE`; return whether it changed."""
    import json

    new = json.dumps({"tools": tool_specs()}, indent=1, sort_keys=True) + "\n"
    if target.is_file() and target.read_text(encoding="utf-8") == new:
        return False
    target.write_text(new, encoding="utf-8")
    return True


DOCS = Path(__file__).resolve().parents[2] / "docs"

if __name__ == "__main__":
    from agentos.cli import HELP_FILE
    from agentos.mcp_server.server import TOOLS_FILE

    for target, rewrite in (
        (DOCS / "cli.md", update),
        (DOCS / "formats.md", update_formats),
        (DOCS / "architecture.md", update_architecture),
        (HELP_FILE, update_help),
        (TOOLS_FILE, update_tools),
    ):
        print(f"{target}: {'updated' if rewrite(target) else 'up to date'}")
