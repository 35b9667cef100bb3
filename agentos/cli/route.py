"""``agentos route``: decide which agents handle a request, and write the receipt (or, with
``--dry-run``, only decide)."""

from __future__ import annotations

import click

from agentos.cli._common import fail, json_option, workspace


@click.command()
@click.argument("request")
@click.option("--run", "run_id", metavar="RUN_ID", help="Link the receipt to this run.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Decide without writing a receipt (the JSON says dry_run: true, receipt: null).",
)
@json_option
@click.pass_context
def route(
    ctx: click.Context, request: str, run_id: str | None, dry_run: bool, as_json: bool
) -> None:
    """Match REQUEST against the routing cards and print the decision and its receipt id.

    Exit status: 0 when the request is routed; 1 when the router asks to clarify (cards
    tie) or no card matches; 2 for bad input (an empty request, an invalid card)."""
    from agentos.cli import fast

    fail(ctx, fast.route(workspace(), request, run_id, dry_run, as_json))
