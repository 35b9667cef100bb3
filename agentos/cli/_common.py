"""What every command group shares: the workspace, --json, and printing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from agentos.workspace import Workspace, find_workspace

F = TypeVar("F", bound=Callable[..., Any])

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def workspace(ctx: click.Context | None = None) -> Workspace:
    """The workspace for this invocation, created on first use."""
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    ws = obj.get("_ws")
    if ws is None:
        ws = obj["_ws"] = find_workspace(obj.get("workspace"))
        ws.settings  # noqa: B018 -- a broken agentos.yaml fails every command, up front
        ws.ensure()
    assert isinstance(ws, Workspace)
    return ws


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document on stdout."
    )(func)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console.print(t)


def fail(ctx: click.Context, code: int = 1) -> None:
    """End the command with ``code`` after its output has been printed."""
    ctx.exit(code)
