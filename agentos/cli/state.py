"""``agentos state``: where the workspace's state is (SQLite or PostgreSQL), and moving it
to PostgreSQL."""

from __future__ import annotations

import click

from agentos.cli._common import console, json_option, print_json, workspace


@click.group()
def state() -> None:
    """The state: runs, agents, events, tasks, the guardian's memory (and, on PostgreSQL,
    the receipts), in .agentos/state.db or a PostgreSQL database that many machines share
    (state: in agentos.yaml, or AGENTOS_STATE_URL; see docs/state.md)."""


@state.command()
@json_option
def show(as_json: bool) -> None:
    """Where the state is (its URL with the password masked), its schema, this machine's
    host id, and the heartbeats of the hosts that share it."""
    from agentos.state.database import describe

    data = describe(workspace().state)
    if as_json:
        print_json(data)
        return
    click.echo(f"state: {data['where']} ({data['backend']}, from {data['source']})")
    click.echo(f"schema: {data['schema']}")
    click.echo(f"this host: {data['host']}")
    for host, ago in data["hosts"].items():
        click.echo(f"host {host}: last heartbeat {ago:g}s ago")


@state.command()
@click.option(
    "--to",
    "url",
    required=True,
    metavar="URL",
    help="The empty PostgreSQL database: postgresql://USER@HOST:PORT/DB (the password from "
    "PGPASSWORD or ~/.pgpass).",
)
@json_option
def migrate(url: str, as_json: bool) -> None:
    """Copy this workspace's SQLite state and receipt files into an empty PostgreSQL
    database, in one transaction: every table's rows are counted again there and the copied
    receipt chain is verified before anything is committed. A database that already holds
    AgentOS state is refused. The workspace keeps using SQLite until state: in agentos.yaml
    (or AGENTOS_STATE_URL) names the database."""
    from agentos.receipts.transfer import migrate_state

    done = migrate_state(workspace(), url)
    if as_json:
        print_json(done.as_dict())
        return
    counts = ", ".join(f"{table} {n}" for table, n in done.counts.items())
    console.print(f"migrated to {done.target}: {counts}", markup=False)
    macs = "hashes, links and MACs" if done.checked.get("macs_checked") else "hashes and links"
    click.echo(
        f"the receipt chain verifies there ({done.checked.get('receipts_verified', 0)} receipts, "
        f"{macs}); set state: {done.target} in agentos.yaml (or AGENTOS_STATE_URL) to use it"
    )
