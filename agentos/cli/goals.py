"""``agentos goals``: what to work on next."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import json_option, print_json, table, workspace


@click.group()
def goals() -> None:
    """Goals: concrete requests proposed from what failed (evals, gates, TODOs)."""


@goals.command()
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    help="Only this repository's failing checks and TODOs.",
)
@click.option("--suite", help="Only this eval suite's failing tasks.")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@json_option
def propose(repo: Path | None, suite: str | None, limit: int, as_json: bool) -> None:
    """Ranked requests a run could start on: eval tasks an agent got wrong, gate checks
    failing in the newest receipts, TODO and FIXME lines in the knowledge store. Each says
    what to fix, where, and when it is done; only those the interview lets through are
    shown. The same state gives the same list."""
    from agentos.evolve.goals import propose as propose_goals

    found = propose_goals(workspace(), repo=repo, suite=suite, limit=limit)
    if as_json:
        print_json([g.as_dict() for g in found])
        return
    table(
        "proposed goals",
        ["#", "source", "where", "request"],
        [(i, g.source, g.where, g.request) for i, g in enumerate(found, start=1)],
    )
