"""``agentos cards``: lint and list the routing cards."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import fail, json_option, print_json, table, workspace
from agentos.routing.cards import lint_cards, load_cards


@click.group()
def cards() -> None:
    """Routing cards: the YAML rules the router matches requests against."""


@cards.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@json_option
@click.pass_context
def lint(ctx: click.Context, path: Path | None, as_json: bool) -> None:
    """Check every card in PATH (a card file or a directory; default: the workspace's
    routing_cards/) and report each problem as `file: field: message`. Exits 2 when any
    card is invalid: bad YAML, an unknown field, a bad regex, a duplicate id, an agent the
    hub does not have. Warnings (a version no installed agent meets, triggers that repeat
    after stemming, a regex that matches everything or would backtrack catastrophically
    outside RE2) do not fail."""
    ws = workspace()
    report = lint_cards(path or ws.cards_dir, ws.hub_dir)
    if as_json:
        print_json(
            {
                "ok": not report.errors,
                "files": len(report.files),
                "problems": [p.as_dict() for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            prefix = "warning: " if p.severity == "warning" else ""
            click.echo(f"{p.file}: {p.field}: {prefix}{p.message}")
        files, errors, warnings = len(report.files), len(report.errors), len(report.warnings)
        click.echo(
            f"{files} card file{'s' * (files != 1)} checked: "
            f"{errors} error{'s' * (errors != 1)}, "
            f"{warnings} warning{'s' * (warnings != 1)}"
        )
    if report.errors:
        fail(ctx, 2)


@cards.command("list")
@json_option
def list_(as_json: bool) -> None:
    """List the workspace's cards: agent, version constraint, group, priority, min_score
    (--json adds descriptions, triggers and checks)."""
    card_set = load_cards(workspace().cards_dir)
    if as_json:
        print_json(
            {
                "revision": card_set.revision,
                "cards": [
                    {**c.model_dump(mode="json", exclude_none=True), "file": str(f)}
                    for c, f in zip(card_set.cards, card_set.files, strict=True)
                ],
            }
        )
        return
    table(
        None,
        ["id", "agent", "version", "group", "priority", "min_score"],
        [
            (c.id, c.agent, c.version or "active", c.group, c.priority, c.min_score)
            for c in card_set.cards
        ],
    )


@cards.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace the card that already has this id.")
@json_option
def add(file: Path, force: bool, as_json: bool) -> None:
    """Add a hand-written card: FILE is checked as `cards lint` checks a card, then copied
    into the workspace's routing_cards/ as ID.yaml. A card id already in use is refused
    (--force replaces that card, unless a package's cards hold it)."""
    from agentos.routing.package_cards import add_card

    target, card, replaced = add_card(workspace(), file, force=force)
    if as_json:
        print_json({"id": card.id, "agent": card.agent, "file": str(target), "replaced": replaced})
    else:
        click.echo(f"card {card.id} ({card.agent}) {'replaced' if replaced else 'added'}: {target}")
