"""``agentos init``."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import console, json_option, print_json
from agentos.workspace.layout import init_workspace


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@json_option
def init(directory: Path, as_json: bool) -> None:
    """Create a workspace in DIRECTORY (default: here), seeded with the bundled agents
    and routing cards. Existing files are kept."""
    ws, created = init_workspace(directory)
    if as_json:
        print_json({"workspace": str(ws.root), "created": created})
        return
    console.print(f"workspace [bold]{ws.root}[/]")
    for item in created:
        console.print(f"  created {item}")
    if not created:
        console.print("  already initialised; nothing changed")
