"""``agentos workflows``: multi-phase workflow definitions (list, show, lint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agentos.cli._common import fail, json_option, print_json, table, workspace


@click.group()
def workflows() -> None:
    """Workflows: phases with done definitions and checks, launched from a template."""


@workflows.command("list")
@json_option
def list_(as_json: bool) -> None:
    """The workspace's workflows (workflows/*.yaml) and the bundled ones."""
    from agentos.errors import AgentOSError
    from agentos.workflows.definitions import BUNDLED, load_workflow, workflow_files

    rows: list[dict[str, Any]] = []
    for path in workflow_files(workspace()):
        try:
            found = load_workflow(path)
        except AgentOSError:
            continue  # `workflows lint` names its problem
        rows.append(
            {
                "id": found.id,
                "name": found.name,
                "phases": [p.name for p in found.phases],
                "bundled": path.parent == BUNDLED,
                "path": str(path),
            }
        )
    if as_json:
        print_json(rows)
        return
    table(
        "workflows",
        ["id", "name", "phases", "from"],
        [
            (
                r["id"],
                r["name"],
                " → ".join(r["phases"]),
                "bundled" if r["bundled"] else "workspace",
            )
            for r in rows
        ],
    )


@workflows.command()
@click.argument("workflow_id", metavar="WORKFLOW")
@json_option
def show(workflow_id: str, as_json: bool) -> None:
    """A workflow whole: its phases, done definitions, checks, result and template."""
    from agentos.workflows.definitions import find_workflow

    found, path = find_workflow(workspace(), workflow_id)
    if as_json:
        print_json({**found.model_dump(mode="json", exclude_defaults=False), "path": str(path)})
        return
    click.echo(f"{found.id}: {found.name} ({path})")
    if found.description:
        click.echo(found.description)
    for phase in found.phases:
        taker = phase.agent or (f"card {phase.card}" if phase.card else "routed")
        click.echo(f"\nphase {phase.id} {phase.name} ({taker}): {phase.description}")
        for done in phase.done_definitions:
            click.echo(f"  [ ] {done}")
        for check in phase.checks:
            click.echo(f"  check: {check.name}")
    if found.config.has_result:
        click.echo(f"\nresult: {found.config.result_criteria} ({found.config.on_result_found})")
    if found.launch_template:
        params = ", ".join(
            f"{p.name}{'*' if p.required else ''}:{p.type}"
            for p in found.launch_template.parameters
        )
        click.echo(f"\nlaunch parameters: {params}")


@workflows.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.pass_context
def lint(ctx: click.Context, paths: tuple[Path, ...]) -> None:
    """Check workflow files (default: the workspace's and the bundled ones): one line per
    problem naming the file and field; exit 2 when there is one."""
    from agentos.workflows.definitions import lint as lint_files
    from agentos.workflows.definitions import workflow_files

    files = [p for arg in paths for p in (sorted(arg.glob("*.yaml")) if arg.is_dir() else [arg])]
    problems = lint_files(workspace(), files or workflow_files(workspace()))
    for line in problems:
        click.echo(line)
    if problems:
        fail(ctx, 2)
    click.echo(f"{len(files or workflow_files(workspace()))} workflow(s): no problems")
