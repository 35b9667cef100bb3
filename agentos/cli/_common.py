"""What every command group shares: the workspace, --json, and printing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agentos.workspace.layout import Located, Workspace, locate_workspace

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


class _LazyConsole:
    """A rich Console made on first use, so that commands printing JSON never import rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def reset(self) -> None:
        """Forget the console: the next print makes one for the terminal as it is now (each
        invocation of the CLI starts with a fresh one, as a new process would)."""
        self._console = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


console: Console = _LazyConsole(highlight=False, soft_wrap=True)  # type: ignore[assignment]
err_console: Console = _LazyConsole(  # type: ignore[assignment]
    stderr=True, highlight=False, soft_wrap=True
)


def located(ctx: click.Context | None = None) -> Located:
    """Where this invocation's workspace is and how it was found, looked up once.

    When AgentOS falls back to its own checkout (nothing named a workspace and the command
    runs outside the checkout), it says so on stderr, once per invocation, never on stdout.
    """
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    found = obj.get("_located")
    if found is None:
        found = obj["_located"] = locate_workspace(obj.get("workspace"))
        if found.notice is not None:
            click.echo(f"agentos: {found.notice}", err=True)
    assert isinstance(found, Located)
    return found


def workspace(ctx: click.Context | None = None) -> Workspace:
    """The workspace for this invocation, created on first use."""
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    ws = obj.get("_ws")
    if ws is None:
        ws = obj["_ws"] = located(ctx).workspace
        ws.check_settings()  # a broken agentos.yaml fails every command, up front
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
    """A table of ``rows``. A cell is text, shown as it is: ``pip install 'agentos-kit[ollama]'``
    keeps its brackets (rich would read them as markup); a cell that wants a style is given
    as a ``rich.text.Text``."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in row))
    console.print(t)


def fail(ctx: click.Context, code: int = 1) -> None:
    """End the command with ``code`` after its output has been printed."""
    ctx.exit(code)
