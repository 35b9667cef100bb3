"""``agentos route``: decide which agents handle a request, and write the receipt (or, with
``--dry-run``, only decide)."""

from __future__ import annotations

import click

from agentos.cli._common import fail, json_option, print_json, table, workspace
from agentos.errors import BadInput
from agentos.routing.router import ROUTE, Decision, decide
from agentos.routing.router import route as route_request


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
    receipt: str | None = None
    if dry_run:
        if run_id is not None:
            raise BadInput("a dry run writes no receipt to link to a run", field="--run")
        decision = decide(workspace(), request)
    else:
        decision, written = route_request(workspace(), request, run_id=run_id)
        receipt = written.id
    if as_json:
        print_json({**decision.as_dict(), "dry_run": dry_run, "receipt": receipt})
    else:
        _show(decision, receipt)
    if decision.decision != ROUTE:
        fail(ctx, 1)


def _show(decision: Decision, receipt: str | None) -> None:
    click.echo("decision: " + click.style(decision.decision, bold=True))
    if decision.tied:
        click.echo(
            "tied (make one card more specific, or give it a higher priority): "
            + ", ".join(decision.tied)
        )
    if decision.selected:
        table(
            None,
            ["card", "agent", "score", "group", "fired"],
            [(s.card, s.ref, s.score, s.group, ", ".join(s.fired)) for s in decision.selected],
        )
    if decision.rejected:
        click.echo("rejected:")
        table(
            None,
            ["card", "reason"],
            [(r.card, r.reason) for r in decision.rejected],
        )
    click.echo(f"receipt: {receipt}" if receipt else "receipt: none (dry run)")
