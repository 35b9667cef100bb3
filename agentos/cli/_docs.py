"""The CLI reference in README.md, generated from ``--help``.

``python -m agentos.cli._docs`` rewrites the part of README.md between the markers;
``tests/test_docs.py`` fails when it is out of date.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from agentos.cli import cli

START = "<!-- cli-reference:start -->"
END = "<!-- cli-reference:end -->"
WIDTH = 100


def _walk(
    command: click.Command, path: list[str], parent: click.Context | None
) -> Iterator[tuple[str, str]]:
    ctx = click.Context(
        command, info_name=path[-1], parent=parent, terminal_width=WIDTH, max_content_width=WIDTH
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


def update(readme: Path) -> bool:
    """Rewrite the reference in ``readme``; return whether it changed."""
    text = readme.read_text(encoding="utf-8")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    new = head + reference() + tail
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("README.md")
    print(f"{target}: {'updated' if update(target) else 'up to date'}")
