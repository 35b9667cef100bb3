"""``agentos receipts``: list, show and verify the hash-chained receipts; rekey, and carry
the key to another writer."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli import views
from agentos.cli._common import console, fail, json_option, print_json, table, workspace
from agentos.receipts import (
    export_key,
    import_key,
    load_receipt,
    read_receipt,
    rekey,
)


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
@click.option(
    "--hashes-only",
    is_flag=True,
    help="Without the key (a machine that does not hold it): check hashes, links and which "
    "receipts must be signed, not the MACs or the anchor; the output says so.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Verify the chain `receipts export` wrote to this folder instead (offline), with "
    "this workspace's key unless --hashes-only.",
)
@json_option
@click.pass_context
def verify(ctx: click.Context, hashes_only: bool, directory: Path | None, as_json: bool) -> None:
    """Walk the chain: recompute every receipt's sha256, link and MAC. Any edited, removed,
    reordered, moved, forged receipt, or one whose MAC was stripped, is reported by id; a
    missing key or anchor by name. Where the state is PostgreSQL, the chain is its receipts
    table, and a machine without the key verifies hashes only and says so. Exit status 1
    when anything is wrong."""
    ws = workspace()
    data = views.receipts_verified(ws, hashes_only=hashes_only, directory=directory)
    problems = data["problems"]
    if as_json:
        print_json(data)
    elif problems:
        for line in problems:
            click.echo(f"problem: {line}")
    else:
        count = data["receipts"]
        console.print(f"receipts verified: {count} receipt{'s' * (count != 1)}, chain intact")
    if not as_json:
        for line in data["notes"]:
            click.echo(f"note: {line}")
    if problems:
        fail(ctx)


@receipts.command("export")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@json_option
def export_(directory: Path, as_json: bool) -> None:
    """Write the chain to DIR (new or empty) as the plain-text files a workspace on SQLite
    holds, with its head and anchor, so that it can be read with cat and verified offline
    (`agentos receipts verify --dir DIR`)."""
    from agentos.receipts import export_receipts

    count = export_receipts(workspace(), directory)
    if as_json:
        print_json({"directory": str(directory), "receipts": count})
    else:
        click.echo(f"{count} receipt{'s' * (count != 1)} written to {directory}")


@receipts.command("rekey")
@click.option("--reason", required=True, help="Why: written in the rekey receipt.")
@click.option(
    "--force", is_flag=True, help="Replace a key that is there and valid (one that leaked)."
)
@json_option
def rekey_(reason: str, force: bool, as_json: bool) -> None:
    """Start a new receipts key when the old one is lost or unreadable. The rekey receipt, the
    first the new key signs, records the reason, what became of the old key, which receipts
    it signed (they verify by hash and link only from now on) and what verify found."""
    done = rekey(workspace(), reason, force=force)
    if as_json:
        print_json(done.as_dict())
        return
    click.echo(f"new receipts key: it signs from receipt {done.receipt.id} (kind rekey) on")
    if done.previously_signed:
        click.echo(
            f"receipts {done.previously_signed} were signed with the previous key "
            f"({done.previous_key}): they verify by hash and link only"
        )
    for line in done.problems:
        click.echo(f"found before the new key: {line}")


@receipts.group()
def key() -> None:
    """The receipts key (.agentos/receipts.key): carry it to another writer of the chain."""


@key.command("export")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write it to this file (mode 0600, never over another file) instead of printing it.",
)
def export(out: Path | None) -> None:
    """Print the receipts key (a secret: it signs receipts), for `receipts key import` on
    another machine that writes to the same chain."""
    text = export_key(workspace(), out)
    if out is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"receipts key written to {out} (mode 0600)")


@key.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--force",
    is_flag=True,
    help="Replace another key, or import one that does not "
    "sign this chain's newest signed receipt.",
)
@json_option
def import_(file: Path, force: bool, as_json: bool) -> None:
    """Make the key in FILE (from `receipts key export`) this workspace's receipts key, mode
    0600. Refused when the workspace holds another key, or when the key does not sign the
    chain's newest signed receipt, unless --force."""
    done = import_key(workspace(), file, force=force)
    if as_json:
        print_json(done.as_dict())
    elif not done.changed:
        click.echo(f"{done.path}: already this key")
    else:
        checked = f"; it signs receipt {done.checked}" if done.checked else ""
        click.echo(
            f"receipts key imported into {done.path} (first signed {done.first_signed}{checked})"
        )
