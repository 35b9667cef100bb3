"""``agentos events``: the one stream of what happened (the state's ``events``)."""

from __future__ import annotations

import json

import click

from agentos.cli._common import workspace
from agentos.run.events import event_line

# Seconds between looks for new events on SQLite; on PostgreSQL, the longest wait for one
# (the state announces each as it is written, and nothing is read in between).
FOLLOW_POLL = 0.2


@click.command()
@click.option("--run", "run_id", help="Only this run's events.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they come.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Without --follow: the newest this many (of a run: its first).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def events(run_id: str | None, follow: bool, limit: int, as_json: bool) -> None:
    """Events, oldest first: runs (phases, agents, notes) and whatever else writes to the
    stream. With --follow, new ones are printed as they are written (Ctrl-C stops)."""
    from agentos.cli import views
    from agentos.run.store import RunStore

    if not follow:
        for event in views.events(workspace(), run=run_id, limit=limit):
            click.echo(json.dumps(event) if as_json else event_line(event))
        return
    store = RunStore(workspace())
    try:
        # a run's whole story, then what comes; else from now on
        for found in store.follow(0 if run_id else None, run=run_id, poll=FOLLOW_POLL, limit=limit):
            for event in found:
                click.echo(json.dumps(event) if as_json else event_line(event))
    except KeyboardInterrupt:
        return
    finally:
        store.close()
