"""``agentos receipts``: list, show and verify the hash-chained receipts."""

from __future__ import annotations

import click

from agentos.cli import views
from agentos.cli._common import console, fail, json_option, print_json, table, workspace
from agentos.receipts import list_receipts, load_receipt, read_receipt


@click.group()
def receipts() -> None:
    """Receipts: the plain-text, hash-chained record of every decision and event."""


@receipts.command("list")
@click.option("--run", "run_id", metavar="RUN_ID", help="Only the receipts of this run.")
@click.option("--last", "-n", type=click.IntRange(min=1), help="Only the newest N.")
@json_option
def list_(run_id: str | None, last: int | None, as_json: bool) -> None:
    """List receipts in chain order (oldest first): id, time, kind, run."""
    data = views.receipts(workspace(), run_id, last)
    if as_json:
        print_json(data)
        return
    table(
        None,
        ["id", "time", "kind", "run"],
        [(r["id"], r["time"], r["kind"], r["run_id"]) for r in data["receipts"]],
    )


@receipts.command()
@click.argument("receipt_id", metavar="ID")
@json_option
def show(receipt_id: str, as_json: bool) -> None:
    """Print receipt ID (e.g. 00000042, or 42) exactly as written. With --json: its header,
    request and fields parsed (nested as written), its chain link, and its text."""
    ws = workspace()
    if as_json:
        print_json(load_receipt(ws, receipt_id).as_dict())
    else:
        click.echo(read_receipt(ws, receipt_id), nl=False)


@receipts.command()
@json_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Walk the chain: recompute every receipt's sha256 and every link. Any edited,
    removed, reordered or moved receipt is reported by id, and the exit status is 1."""
    ws = workspace()
    data = views.receipts_verified(ws)
    problems = data["problems"]
    if as_json:
        print_json(data)
    elif problems:
        for line in problems:
            click.echo(f"tampered: {line}")
    else:
        count = len(list_receipts(ws))
        console.print(f"receipts verified: {count} receipt{'s' * (count != 1)}, chain intact")
    if problems:
        fail(ctx)
