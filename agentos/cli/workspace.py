"""``agentos init``."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import console, json_option, print_json
from agentos.errors import BadInput
from agentos.workspace.layout import init_workspace


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), required=False)
@json_option
@click.pass_context
def init(ctx: click.Context, directory: Path | None, as_json: bool) -> None:
    """Create a workspace in DIRECTORY (default: the global --workspace, else here), seeded
    with the bundled agents and routing cards. Existing files are kept."""
    given = (ctx.obj or {}).get("workspace")
    if (
        given is not None
        and directory is not None
        and Path(given).absolute() != directory.absolute()
    ):
        raise BadInput(
            f"init was given two directories: --workspace {given} and {directory}",
            hint="give one of them",
        )
    ws, created = init_workspace(directory or Path(given or "."))
    if as_json:
        print_json({"workspace": str(ws.root), "created": created})
        return
    console.print(f"workspace [bold]{ws.root}[/]")
    for item in created:
        console.print(f"  created {item}")
    if not created:
        console.print("  already initialised; nothing changed")
