"""Printing for people and programs, without click or rich: lines, styles, tables and JSON.

The commands typed most (:mod:`agentos.cli.fast`) print through here without importing
click, and every command's tables and JSON documents do too, so a command reads the same
whichever path served it. Styles are ANSI SGR codes, written only to a terminal, as click
decides for its own ``echo``: piped or captured, the same output is plain text.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

# The SGR codes of the styles AgentOS prints (click.style's names): bold, and the colours.
_SGR = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _stream(err: bool) -> TextIO:
    return sys.stderr if err else sys.stdout


def coloured(err: bool = False) -> bool:
    """Whether styles reach the stream: a terminal (as click's ``echo`` decides), unless
    ``NO_COLOR`` is set (no-color.org) or the terminal is ``TERM=dumb``, as rich decided."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = _stream(err)
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def style(text: str, *, bold: bool = False, fg: str | None = None, err: bool = False) -> str:
    """``text`` in bold and/or a colour when the stream it goes to is a terminal."""
    codes = [_SGR[name] for name, on in (("bold", bold), (fg or "", fg is not None)) if on]
    if not codes or not text or not coloured(err):
        return text
    return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def echo(text: str = "", *, err: bool = False) -> None:
    """A line on stdout (stderr with ``err``), flushed, as click's ``echo`` writes it."""
    stream = _stream(err)
    stream.write(f"{text}\n")
    stream.flush()


def print_json(data: Any) -> None:
    echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


@dataclass(frozen=True)
class Styled:
    """A table cell shown in a colour on a terminal (``fg``: red, green, yellow, cyan), as
    plain text elsewhere."""

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
    header: list[_Cell] = [(printable(str(c)), None) for c in columns]
    lines = [header] + [line for row in rows for line in _physical_lines([_cell(v) for v in row])]
    width = _cell_width(lines)
    widths = [max(width(line[i][0]) for line in lines) for i in range(len(header))]
    if title:
        echo(style(printable(title), bold=True))
    for n, line in enumerate(lines):
        out = [
            style(text, bold=n == 0, fg=fg) + " " * (widths[i] - width(text))
            for i, (text, fg) in enumerate(line)
        ]
        echo("  ".join(out).rstrip())


_Cell = tuple[str, str | None]  # a cell's text, and its colour on a terminal


def _cell(value: Any) -> _Cell:
    if isinstance(value, Styled):
        return printable(value.text), value.fg
    return printable("" if value is None else str(value)), None


# Control characters (but the line break, which makes a cell's lines) written as escapes: a
# request, a package's source or an agent's message cannot move the cursor, clear the screen
# or retitle the terminal of whoever lists it.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x0A}


def printable(text: str) -> str:
    """``text`` with its control characters (but line breaks) written as escapes: what
    anyone wrote, safe to print to a terminal."""
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
