"""What every command group shares: the workspace, --json, and printing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agentos.cli.output import Styled, print_json, table
from agentos.workspace.layout import Located, Workspace, locate_workspace

__all__ = [
    "Styled",
    "console",
    "err_console",
    "fail",
    "json_option",
    "located",
    "print_json",
    "table",
    "workspace",
]

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


def backend_option(func: F) -> F:
    """``--backend local|ray``: where the agents run (agentos.cluster)."""
    return click.option(
        "--backend",
        type=click.Choice(["local", "ray"]),
        default=None,
        help="Where the agents run: this machine, or the Ray cluster at cluster.address "
        "(default: cluster.backend in agentos.yaml, else local).",
    )(func)


def fail(ctx: click.Context, code: int = 1) -> None:
    """End the command with ``code`` after its output has been printed."""
    ctx.exit(code)
