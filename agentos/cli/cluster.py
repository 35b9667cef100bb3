"""``agentos cluster``: the Ray cluster agents run on: its nodes, and the line that joins one."""

from __future__ import annotations

import subprocess

import click

from agentos.cli._common import console, json_option, print_json, table, workspace


@click.group()
def cluster() -> None:
    """The Ray cluster a run's agents, an eval's and a workflow's tasks run on with
    --backend ray (cluster: in agentos.yaml; docs/cluster.md)."""


@cluster.command()
@json_option
def status(as_json: bool) -> None:
    """Each node of the cluster at cluster.address: its slots (busy of all), the
    runtimes it offers, and the agents running there now."""
    from agentos.cluster.status import cluster_status

    found = cluster_status(workspace())
    if as_json:
        print_json(found)
        return
    rows = [
        [
            n["node"],
            n["address"],
            f"{n['busy']}/{n['slots']}",
            ", ".join(n["runtimes"]) or "-",
            "; ".join(f"{a['run']}/{a['agent']} ({a['status']})" for a in n["agents"]) or "-",
        ]
        for n in found["nodes"]
    ]
    table(None, ["node", "address", "slots", "runtimes", "agents"], rows)
    busy = sum(n["busy"] for n in found["nodes"])
    slots = sum(n["slots"] for n in found["nodes"])
    console.print(f"{len(rows)} nodes; {busy} of {slots} slots busy", markup=False)


@cluster.command()
@click.argument("address", required=False)
@click.option("--head", is_flag=True, help="Start the cluster's head here (no ADDRESS).")
@click.option("--port", type=click.IntRange(1, 65535), default=6379, show_default=True)
@click.option(
    "--slots",
    type=click.IntRange(1, 1024),
    default=None,
    help="Agents this machine runs at once (default: its cores).",
)
@click.option("--dry-run", is_flag=True, help="Print the ray start line; start nothing.")
@json_option
def join(
    address: str | None, head: bool, port: int, slots: int | None, dry_run: bool, as_json: bool
) -> None:
    """Make this machine a node of the cluster at ADDRESS (HOST:PORT of the head), or its
    head with --head: `ray start` with the resources AgentOS schedules by (agentos_slot,
    and the runtimes and sandbox found here: claude, gemini, codex, bwrap). Bind Ray to a
    private network only: its ports are unauthenticated (docs/cluster.md)."""
    from agentos.cluster.status import join_line
    from agentos.errors import BadInput, OperationFailed

    if head == bool(address):
        raise BadInput("give the head's ADDRESS, or --head (not both)", field="ADDRESS")
    if address is not None:
        from pydantic import ValidationError

        from agentos.workspace.settings import ClusterSettings

        try:
            ClusterSettings(address=address)
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise BadInput(message, field="ADDRESS") from None
    line = join_line(address, head=head, port=port, slots=slots)
    if dry_run:
        if as_json:
            print_json({"argv": line.argv, "env": line.env})
        else:
            click.echo(line.shell())
        return
    import os

    done = subprocess.run(line.argv, env={**os.environ, **line.env}, check=False)
    if done.returncode != 0:
        raise OperationFailed(f"ray start exited {done.returncode}", field="cluster join")
