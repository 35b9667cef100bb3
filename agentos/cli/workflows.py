"""``agentos workflows``: multi-phase workflow definitions (list, show, lint)."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import backend_option, fail, json_option, print_json, table, workspace


@click.group()
def workflows() -> None:
    """Workflows: phases with done definitions and checks, launched from a template."""


@workflows.command("list")
@json_option
def list_(as_json: bool) -> None:
    """The workspace's workflows (workflows/*.yaml) and the bundled ones."""
    from agentos.cli import views

    rows = views.workflows(workspace())
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


@workflows.command()
@click.argument("workflow_id", metavar="WORKFLOW")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A launch parameter.")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The repository the tasks work on.",
)
@click.option("--detach", is_flag=True, help="Run the tasks in the background; print the id.")
@backend_option
@json_option
@click.pass_context
def launch(
    ctx: click.Context,
    workflow_id: str,
    params: tuple[str, ...],
    repo: Path,
    detach: bool,
    backend: str | None,
    as_json: bool,
) -> None:
    """Start an execution of WORKFLOW: its launch template filled with the parameters is
    the first task; agents add the rest. Without --detach it runs here until every task
    has ended (exit 1 when one failed)."""
    from agentos.errors import BadInput
    from agentos.workflows.executions import launch as launch_execution
    from agentos.workflows.executions import start_detached

    values: dict[str, str] = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise BadInput(f"{item!r} is not NAME=VALUE", field="--param")
        values[name] = value
    ws = workspace()
    execution, first = launch_execution(ws, workflow_id, repo, values)
    if detach:
        from agentos.guardian import REMOTE_WATCH

        log = start_detached(ws, execution, backend, REMOTE_WATCH)
        if as_json:
            print_json({"execution": execution, "task": first.id, "log": str(log)})
        else:
            click.echo(execution)
        return
    from agentos.cluster import backend_of
    from agentos.workflows.scheduler import Scheduler
    from agentos.workflows.store import TaskStatus, WorkflowStore

    if not as_json:
        click.echo(f"execution {execution}: task {first.id} in phase {first.phase}")
    say = None if as_json else click.echo
    from agentos.guardian import REMOTE_WATCH

    status = Scheduler(
        ws, execution, on_event=say, backend=backend_of(ws, backend), watch=REMOTE_WATCH
    ).run()
    store = WorkflowStore(ws)
    try:
        tasks = store.tasks(execution)
    finally:
        store.close()
    if as_json:
        print_json(
            {"execution": execution, "status": status, "tasks": [t.as_dict() for t in tasks]}
        )
    else:
        click.echo(f"execution {execution}: {status}")
    failed = [t for t in tasks if t.status == TaskStatus.FAILED]
    if failed:
        from agentos.cli.tasks import say_failed

        say_failed(failed)
        fail(ctx, 1)
