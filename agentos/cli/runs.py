"""``agentos run``, ``runs``, ``status``, ``attach`` and ``gc``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentos.cli._common import (
    backend_option,
    console,
    err_console,
    fail,
    json_option,
    print_json,
)
from agentos.cli._common import workspace as current_workspace
from agentos.cli.output import printable
from agentos.errors import BadInput, OperationFailed
from agentos.run.events import event_line
from agentos.run.store import ACTIVE, AgentStatus, RunRecord, RunStatus
from agentos.runtimes.usage import describe
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.run.events import RunEvent
    from agentos.run.values import RunReport


def escape(text: str) -> str:
    """rich markup escaped; rich is imported only when a command prints for people."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def ensure_guardian(ws: Workspace) -> bool:
    """The guardian watches a run's agents: the library is handed it, never imports it."""
    from agentos.guardian.daemon import ensure_running

    return ensure_running(ws)


@click.command()
@click.argument("request")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The git repository the agents work on.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Start even when the interview blocks the request (the receipt records the override).",
)
@click.option(
    "--agent",
    metavar="NAME[@VERSION]",
    help="This hub package takes the request instead of the routing cards (the receipt says so).",
)
@click.option(
    "--no-merge",
    is_flag=True,
    help="Leave the passing work on its branches for review (runs diff, runs merge, "
    "runs discard) instead of merging it.",
)
@click.option(
    "--allow-test-changes",
    is_flag=True,
    help="Let the agents change the base's tests (update them for a new API): the gate "
    "records what changed instead of refusing it. A request can say so in words too "
    '("update the tests for ...").',
)
@click.option("--detach", is_flag=True, help="Start the run in the background and print its id.")
@click.option(
    "--no-input", is_flag=True, help="Never ask the interview's questions, even in a terminal."
)
@click.option("--run-id", hidden=True)
@backend_option
@json_option
@click.pass_context
def run(
    ctx: click.Context,
    request: str,
    repo: Path,
    force: bool,
    agent: str | None,
    no_merge: bool,
    allow_test_changes: bool,
    detach: bool,
    no_input: bool,
    run_id: str | None,
    backend: str | None,
    as_json: bool,
) -> None:
    """Run REQUEST as a task force: interview, route, agents in tmux sessions on their own
    git worktrees, the gate, then merge into the current branch.

    In a terminal, a request the interview blocks gets its questions asked, and the run
    goes on with the answers (as `agentos interview` does). Exit code 0 only when every
    agent's checks passed and the work merged (or, with --no-merge, waits for review);
    1 when the run failed or the request is blocked; 2 for bad input or an environment
    that cannot run the repository's tests. With --backend ray (or cluster.backend: ray)
    the agents work on the nodes of the Ray cluster; the merge and every receipt are
    made here."""
    from agentos.cluster import backend_of, dispatch_for
    from agentos.guardian import RAY_DISPATCH, REMOTE_WATCH
    from agentos.run.orchestrator import RunOptions, start_run

    ws = current_workspace()
    if not force and not as_json and not no_input and run_id is None and sys.stdin.isatty():
        request = _interview_in_terminal(ctx, ws, request)
    options = RunOptions(
        force=force,
        agent=agent,
        merge=not no_merge,
        run_id=run_id,
        allow_test_changes=allow_test_changes,
    )
    if detach:
        from agentos.errors import RequestBlocked
        from agentos.guardian import SUPERVISOR
        from agentos.run.control import start_detached

        try:
            run_id, log = start_detached(
                ws,
                request,
                repo,
                options,
                supervisor=SUPERVISOR,
                dispatch=RAY_DISPATCH if backend_of(ws, backend) == "ray" else None,
            )
        except RequestBlocked as exc:
            _blocked(ctx, exc.questions, as_json)
            return
        if as_json:
            print_json({"run": run_id, "status": "started", "log": str(log)})
        else:
            console.print(
                f"run {run_id} started in the background; follow it with "
                f"`agentos runs logs {run_id} --follow` or `agentos status`"
            )
        return

    def event(event: RunEvent) -> None:
        if not as_json:  # the run's events as they go into the stream
            err_console.print(event_line(event.as_dict(), stamp=False, where=False), markup=False)

    report = start_run(
        ws,
        request,
        repo,
        options,
        on_event=event,
        supervise=ensure_guardian,
        dispatch=dispatch_for(ws, backend, watch=REMOTE_WATCH),
    )
    if as_json:
        print_json(report.as_dict())
    else:
        _print_report(report)
    if report.exit_code:
        fail(ctx, report.exit_code)


def _interview_in_terminal(ctx: click.Context, ws: Workspace, request: str) -> str:
    """Ask a blocked request's questions; return the request with the answers. A request
    still blocked after the conversation ends the command (exit 1)."""
    from agentos.cli.interview import converse
    from agentos.interview.engine import interview_in

    result = interview_in(ws, request)
    if result.passed:
        return request
    result = converse(ws, result)
    if not result.passed:
        _blocked(ctx, [f"{q.axis}: {q.text}" for q in result.questions], False)
    console.print(f"[green]the request passes[/] (ambiguity {result.ambiguity:.3f}); starting")
    return result.request


def _blocked(ctx: click.Context, questions: list[str], as_json: bool) -> None:
    if as_json:
        print_json({"status": RunStatus.BLOCKED, "questions": questions})
    else:
        err_console.print(
            "blocked: the request is too vague to start; answer these in the request "
            "(or use --force):"
        )
        for q in questions:
            err_console.print(f"  {escape(q)}")
    fail(ctx, 1)


def _print_report(report: RunReport) -> None:
    colour = "green" if report.exit_code == 0 else "red"
    console.print(
        f"run [bold]{report.run_id}[/]: [{colour}]{report.status}[/] — {escape(report.message)}"
    )
    for agent in report.agents:
        gate = agent.gate.summary() if agent.gate else "no gate"
        via = agent.card if not agent.card.startswith("(") else agent.card[1:-1]
        used = describe(agent.usage.as_dict() if agent.usage else None)
        console.print(
            f"  {agent.agent}@{agent.version} via {escape(via)}: "
            f"{agent.status} after {agent.attempts} attempt(s); {escape(gate)}"
            + (f"; used {used}" if used else "")
            + (f"; limit: {agent.limit}" if agent.limit else "")
        )
        if agent.status is not AgentStatus.PASSED and agent.gate:
            _print_failures(agent.gate.as_dict()["checks"])
    for name, stat in report.diffstat.items():
        console.print(f"  {name}:", markup=False)
        for line in stat.rstrip().splitlines() or ["(no changes)"]:
            console.print(f"    {line.strip()}", markup=False)
    console.print(f"  receipts: {', '.join(report.receipts)}")


def _print_failures(checks: list[dict[str, Any]], indent: str = "    ") -> None:
    """Each failing check's name and the tail of its output."""
    for c in checks:
        if c.get("passed"):
            continue
        console.print(f"{indent}[red]FAILED[/] {escape(c['name'])}: {escape(c['definition'])}")
        tail = (c.get("output_tail") or "").rstrip("\n").splitlines()[-15:]
        for line in tail or ["(no output)"]:
            console.print(f"{indent}  {line}", markup=False, highlight=False)


@click.group()
def runs() -> None:
    """Runs recorded in state.db: list, show, cancel, logs."""


@runs.command("list")
@click.option("--limit", default=20, show_default=True)
@json_option
def list_(limit: int, as_json: bool) -> None:
    """List recent runs, newest first."""
    from agentos.cli import fast

    fast.runs_list(current_workspace(), limit, as_json)


@runs.command()
@click.argument("run_id", metavar="ID")
@json_option
def show(run_id: str, as_json: bool) -> None:
    """Show a run: status, agents, branches, exit codes, receipts."""
    from agentos.cli import views
    from agentos.run.control import status as run_status

    ws = current_workspace()
    record = run_status(ws, run_id)
    data = views.run_of(ws, record)
    if as_json:
        print_json(data)
        return
    _print_run(record)
    console.print(f"  receipts: {', '.join(data['receipts']) or '(none)'}")


def _print_run(record: RunRecord) -> None:
    # The request and the message are anyone's text: printed as written, never as markup
    # or escape sequences for the terminal.
    console.print(
        f"run [bold]{record.id}[/]: {record.status}"
        + (f" — {escape(printable(record.message))}" if record.message else "")
    )
    console.print(f"  request: {printable(record.request)}", markup=False)
    if record.usage:
        console.print(f"  used:    {describe(record.usage)} (all its agents)")
    console.print(
        f"  repo:    {record.repo} ({record.target_branch} at {(record.base_commit or '')[:12]})"
    )
    for a in record.agents:
        console.print(
            f"  {a.agent}@{a.version}: {a.status}, attempts {a.attempts}, exit "
            f"{a.exit_code}, branch {a.branch}"
            + (f", passing commit {a.gated_commit[:12]}" if a.gated_commit else "")
            + (f", used {describe(a.usage)}" if a.usage else "")
        )
        if a.gate:
            console.print(f"    {escape(a.gate.get('summary', ''))}")
            _print_failures(a.failing_checks, indent="    ")


@runs.command()
@click.argument("run_id", metavar="ID")
@click.argument("agent", required=False)
@click.option("--stat", is_flag=True, help="Only the diffstat.")
@json_option
def diff(run_id: str, agent: str | None, stat: bool, as_json: bool) -> None:
    """Show what a run's agents changed (every agent's, unless AGENT is given): the commit
    their passing gate judged, else the last state of their branch, against the run's
    base."""
    from agentos.run.review import run_diff

    diffs = run_diff(current_workspace(), run_id, agent)
    if as_json:
        print_json({"run": run_id, "agents": [d.as_dict() for d in diffs]})
        return
    for d in diffs:
        where = d.commit[:12] if d.commit else "nothing committed"
        click.echo(f"== {d.agent} ({d.base[:12]}..{where})")
        click.echo((d.stat if stat else d.stat + "\n" + d.patch).rstrip("\n") or "(no changes)")


@runs.command()
@click.argument("run_id", metavar="ID")
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="NAME",
    help="Land only this agent's passing work (repeatable), also from a failed run; the "
    "others' branches are kept.",
)
@json_option
@click.pass_context
def merge(ctx: click.Context, run_id: str, agents: tuple[str, ...], as_json: bool) -> None:
    """Merge a run that waits for review (`run --no-merge`, status ready): exactly the
    commits its gates passed, one squashed commit per agent, all or nothing, once the
    run's checks pass on the tree that would land (the target may have moved since the
    run). A conflict, or checks that fail on the combination, merge nothing (exit 1).
    With --agent, a ready, conflict or failed run lands only the agents named, and the run
    is then marked succeeded."""
    from agentos.run.review import merge_run

    outcome = merge_run(current_workspace(), run_id, agents)
    if as_json:
        print_json(outcome.as_dict())
    else:
        colour = "green" if outcome.result.merged else "red"
        console.print(
            f"run {outcome.run_id}: [{colour}]{outcome.status}[/] — "
            f"{escape(outcome.result.message)} (receipt {outcome.receipt})"
        )
    if not outcome.result.merged:
        fail(ctx, 1)


@runs.command()
@click.argument("run_id", metavar="ID")
@json_option
def discard(run_id: str, as_json: bool) -> None:
    """Drop a finished run's kept work: its branches go (their commits stay reachable
    under refs/agentos/runs/ID/ until `agentos runs prune`)."""
    from agentos.run.review import discard_run

    dropped = discard_run(current_workspace(), run_id)
    if as_json:
        print_json({"run": run_id, "dropped": dropped})
    elif dropped:
        for branch in dropped:
            console.print(f"dropped {branch}")
    else:
        console.print(f"run {run_id} kept no branch; nothing to drop")


@runs.command()
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    metavar="DAYS",
    help="Age in days (default: run.keep_days in agentos.yaml, 14).",
)
@json_option
def prune(days: float | None, as_json: bool) -> None:
    """Remove the branches and hidden refs that finished runs kept, once the run ended
    more than DAYS ago. Younger work, and live runs, are never touched."""
    from agentos.run.review import prune as prune_runs

    report = prune_runs(current_workspace(), older_than_days=days)
    if as_json:
        print_json(report.as_dict())
        return
    for line in report.removed:
        console.print(f"removed {line}", markup=False)
    if not report.removed:
        console.print("nothing to prune")


@runs.command()
@click.argument("run_id", metavar="ID")
@click.option(
    "--wait",
    "wait_s",
    default=30.0,
    show_default=True,
    help="Seconds to wait for the run to tear down.",
)
@json_option
def cancel(run_id: str, wait_s: float, as_json: bool) -> None:
    """Cancel a running run: its orchestrator tears down and keeps the agents' work on
    their branches. A run whose orchestrator is gone is marked aborted by gc."""
    from agentos.run.control import cancel as cancel_run
    from agentos.run.control import status as run_status

    ws = current_workspace()
    run_id = run_status(ws, run_id).id
    try:
        status = cancel_run(ws, run_id, wait=wait_s)
    except BadInput as exc:
        raise exc.with_context(field="ID") from None
    if as_json:
        print_json({"run": run_id, "status": status})
    else:
        console.print(f"run {run_id}: {status}")


@runs.command()
@click.argument("run_id", metavar="ID")
@click.argument("agent", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep printing output as it comes.")
def logs(run_id: str, agent: str | None, follow: bool) -> None:
    """Print an agent's pane output (every agent's, when AGENT is not given)."""
    from agentos.cli import views
    from agentos.run.control import status
    from agentos.run.store import require_here

    ws = current_workspace()
    record = status(ws, run_id)
    require_here(ws, record, "its agents' logs are")
    names = [agent] if agent else [a.agent for a in record.agents]
    if agent and not (ws.logs_dir / record.id / f"{agent}.log").exists():
        raise BadInput(f"no log for agent {agent!r} in run {record.id}", field="AGENT")
    offsets = dict.fromkeys(names, 0)
    while True:
        for name in names:
            while True:  # a long log comes in chunks
                chunk = views.agent_log(ws, record.id, name, offsets[name])
                if chunk["offset"] == offsets[name]:
                    break
                offsets[name] = chunk["offset"]
                prefix = f"[{name}] " if len(names) > 1 else ""
                sys.stdout.write(
                    "".join(prefix + line for line in chunk["text"].splitlines(keepends=True))
                )
                sys.stdout.flush()
        if not follow or status(ws, record.id).status not in ACTIVE:
            return
        time.sleep(0.25)


@click.command()
@json_option
def status(as_json: bool) -> None:
    """Live runs and the health of each agent."""
    from agentos.cli import fast

    fast.status(current_workspace(), as_json)


@click.command()
@click.argument("run_id", metavar="ID")
@click.argument("agent", required=False)
def attach(run_id: str, agent: str | None) -> None:
    """Attach this terminal to an agent's tmux session, to watch or take over
    (detach with the tmux prefix, then d)."""
    from agentos.run.control import status
    from agentos.run.sessions import Sessions
    from agentos.run.store import require_here

    ws = current_workspace()
    record = status(ws, run_id)
    require_here(ws, record, "attach")
    agents = [a for a in record.agents if agent is None or a.agent == agent]
    remote = (record.options or {}).get("cluster") or {}
    if agents and agents[0].agent in remote and not agents[0].session:
        where = remote[agents[0].agent]
        if "socket" not in where:
            raise OperationFailed(f"{agents[0].agent} has not started on a node yet")
        raise OperationFailed(
            f"{agents[0].agent} works on node {where['node']} ({where['address']}), not here: "
            f"on that machine run `tmux -L {where['socket']} attach-session "
            f"-t ={where['session']}`"
        )
    if not agents or not agents[0].session:
        raise BadInput(f"no agent {agent!r} in run {record.id}", field="AGENT")
    sessions = Sessions(ws.root)
    if not sessions.exists(agents[0].session):
        raise OperationFailed(
            f"the session of {agents[0].agent} is not running (run {record.id} is {record.status})"
        )
    argv = sessions.attach_argv(agents[0].session)
    os.execvp(argv[0], argv)


@click.command()
@click.option(
    "--branches",
    is_flag=True,
    help="Also remove the branches finished runs kept, once older than run.keep_days "
    "(as `agentos runs prune`).",
)
@json_option
def gc(branches: bool, as_json: bool) -> None:
    """Clean up after crashed runs: abort runs whose orchestrator died (their work is kept
    on branches), end orphaned tmux sessions, remove orphaned worktrees."""
    from agentos.run.gc import collect_garbage

    ws = current_workspace()
    report = collect_garbage(ws)
    pruned: list[str] = []
    if branches:
        from agentos.run.review import prune as prune_runs

        pruned = prune_runs(ws).removed
    if as_json:
        print_json({**report.as_dict(), **({"pruned_refs": pruned} if branches else {})})
        return
    for line in pruned:
        console.print(f"pruned {line}", markup=False)
    if report.empty and not pruned:
        console.print("nothing to clean up")
    for key, values in report.as_dict().items():
        for value in values:
            console.print(f"{key.replace('_', ' ')}: {value}")
