"""``agentos tui``: the terminal UI (:mod:`agentos.cli._tui`), from the ``tui`` extra."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

from agentos.cli._common import workspace
from agentos.errors import MissingTool


@click.command()
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="The repository a workflow launched from the UI works "
              "on, unless its form names another.")  # fmt: skip
def tui(repo: Path) -> None:
    """A terminal UI: runs and their agents with health and output age, the selected
    agent's live output, recent events and receipts. Keys: a attach, c cancel the run,
    l its log, w launch a workflow, q quit."""
    if importlib.util.find_spec("textual") is None:
        raise MissingTool(
            "the terminal UI needs Textual: pip install 'agentos-kit[tui]' "
            "(scripts/setup installs every extra)",
            field="textual",
        )
    from agentos.cli._tui import AgentOSApp

    AgentOSApp(workspace(), repo.expanduser().resolve()).run()
