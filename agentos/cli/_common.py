"""What every command group shares: the workspace, --json, and printing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Styled:
    """A table cell shown in a colour on a terminal (``click.style``'s ``fg``), as plain text
    elsewhere."""

    text: str
    fg: str


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table of ``rows`` as plain aligned columns, the way ``git``, ``docker ps`` and
    ``kubectl get`` print theirs: the header in bold on a terminal, two spaces between
    columns, nothing but text when piped.

    A cell is text, shown as it is (``pip install 'agentos-kit[ollama]'`` keeps its
    brackets); a cell that wants a colour is a :class:`Styled`. Not rich's table: the
    listings people type most (``hub list``, ``runs list``, ``status``) answer within
    100 ms, and rich's import and layout cost 25-35 ms of that (issue 33).
    """
    header: list[_Cell] = [(_printable(str(c)), None) for c in columns]
    lines = [header] + [line for row in rows for line in _physical_lines([_cell(v) for v in row])]
    width = _cell_width(lines)
    widths = [max(width(line[i][0]) for line in lines) for i in range(len(header))]
    if title:
        click.echo(click.style(_printable(title), bold=True))
    for n, line in enumerate(lines):
        out = []
        for i, (text, fg) in enumerate(line):
            styled = text and (n == 0 or fg)
            shown = click.style(text, bold=n == 0 or None, fg=fg) if styled else text
            out.append(shown + " " * (widths[i] - width(text)))
        click.echo("  ".join(out).rstrip())


_Cell = tuple[str, str | None]  # a cell's text, and its colour on a terminal


def _cell(value: Any) -> _Cell:
    if isinstance(value, Styled):
        return _printable(value.text), value.fg
    return _printable("" if value is None else str(value)), None


# Control characters (but the line break, which makes a cell's lines) written as escapes: a
# request, a package's source or an agent's message cannot move the cursor, clear the screen
# or retitle the terminal of whoever lists it.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x0A}


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    text = text.translate(_CONTROLS)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates


def _physical_lines(row: list[_Cell]) -> list[list[_Cell]]:
    """A row whose cells hold line breaks, as several lines: a cell's lines one under the
    other in its column."""
    split = [(text.splitlines() or [""], fg) for text, fg in row]
    height = max((len(parts) for parts, _ in split), default=1)
    return [
        [(parts[k] if k < len(parts) else "", fg) for parts, fg in split] for k in range(height)
    ]


def _cell_width(rows: list[list[_Cell]]) -> Callable[[str], int]:
    """How many terminal cells a text takes: its length when every cell is ASCII, else rich's
    measure (wide CJK characters take two cells, combining marks none)."""
    if all(text.isascii() for row in rows for text, _ in row):
        return len
    from rich.cells import cell_len

    return cell_len


def fail(ctx: click.Context, code: int = 1) -> None:
    """End the command with ``code`` after its output has been printed."""
    ctx.exit(code)
