"""``agentos route``: decide which agents handle a request, and write the receipt."""

from __future__ import annotations

import click

from agentos.cli._common import console, fail, json_option, print_json, table, workspace
from agentos.routing.router import ROUTE, Decision
from agentos.routing.router import route as route_request


@click.command()
@click.argument("request")
@click.option("--run", "run_id", metavar="RUN_ID", help="Link the receipt to this run.")
@json_option
@click.pass_context
def route(ctx: click.Context, request: str, run_id: str | None, as_json: bool) -> None:
    """Match REQUEST against the routing cards and print the decision and its receipt id.

    Exit status: 0 when the request is routed; 1 when the router asks to clarify (cards
    tie) or no card matches; 2 for bad input (an empty request, an invalid card)."""
    decision, receipt = route_request(workspace(), request, run_id=run_id)
    if as_json:
        print_json({**decision.as_dict(), "receipt": receipt.id})
    else:
        _show(decision, receipt.id)
    if decision.decision != ROUTE:
        fail(ctx, 1)


def _show(decision: Decision, receipt: str) -> None:

    console.print(f"decision: [bold]{decision.decision}[/]")
    if decision.tied:
        console.print(
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
        console.print("rejected:")
        table(
            None,
            ["card", "reason"],
            [(r.card, r.reason) for r in decision.rejected],
        )
    console.print(f"receipt: {receipt}")
