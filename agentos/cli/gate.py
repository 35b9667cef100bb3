"""``agentos gate``: run the gate checks, and the Claude Code ``Stop`` hook."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from agentos.cli._common import Styled, console, fail, json_option, print_json, table, workspace
from agentos.errors import AgentOSError
from agentos.gate.environment import gate_confiner, gate_environment
from agentos.gate.hook import (
    HookOutcome,
    hook_command,
    install_stop_hook,
    parse_hook_input,
    repo_root,
    stop_hook,
)
from agentos.gate.repo import tree_profile
from agentos.gate.results import GateResult, write_gate_receipt
from agentos.gate.runner import gate_judging, run_gate
from agentos.gate.selection import describe, gate_checks, select_checks
from agentos.workspace.layout import Workspace

_repo_option = click.option(
    "--repo",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Repository to check (default: the git repository holding the current directory).",
)
_base_option = click.option(
    "--base",
    metavar="REV",
    help="Revision the diff checks compare against (default: HEAD, i.e. uncommitted and "
    "untracked changes).",
)
_package_option = click.option(
    "--package",
    "package",
    metavar="NAME[@VERSION]",
    help="Also run this hub package's checks (read from the hub, never from the repo).",
)
_allow_option = click.option(
    "--allow-test-changes",
    is_flag=True,
    help="Allow changes to the base's tests (deleted, skipped, rewritten): recorded in the "
    "receipt instead of failing the tests check.",
)
_card_option = click.option(
    "--card",
    "card",
    metavar="ID",
    help="Also run this routing card's checks, and its agent's unless --package is given: "
    "the checks a run routed through the card gets.",
)


@click.group()
def gate() -> None:
    """The gate: deterministic checks that must pass before work is done.

    Checks come from the agent package (hub), the routing card and the workspace's
    agentos.yaml, never from the repository being checked."""


@gate.command("list")
@_package_option
@_card_option
@json_option
def list_(package: str | None, card: str | None, as_json: bool) -> None:
    """List the checks the gate would run: the package's, the card's, then the
    workspace's."""
    ws = workspace()
    checks = gate_checks(ws, package=package, card=card)
    if as_json:
        print_json(
            {
                "checks": [
                    {"name": c.name, "kind": c.kind, "definition": describe(c)} for c in checks
                ]
            }
        )
        return
    if not checks:
        console.print(
            "no checks configured: add them to agentos.yaml (checks:), "
            "an agent package or a routing card"
        )
    for c in checks:
        console.print(f"[bold]{escape(c.name)}[/]  {c.kind}  {escape(describe(c))}")


def _print_report(result: GateResult) -> None:
    rows = []
    for r in result.results:
        mark = (
            Styled("PASS", "green")
            if r.passed
            else Styled("TIMEOUT" if r.timed_out else "FAIL", "red")
        )
        exit_code = "" if r.exit_code is None else str(r.exit_code)
        rows.append((mark, r.name, r.kind, f"{r.duration:.2f}s", exit_code))
    if rows:
        table(None, ["result", "check", "kind", "time", "exit"], rows)
    for r in result.failures:
        console.print()
        console.print(f"[red bold]{escape(r.name)}[/] -- {escape(r.definition)}")
        console.print(r.output_tail.rstrip("\n") or "(no output)", markup=False)
    console.print()
    console.print(f"[{'green' if result.passed else 'red'} bold]{escape(result.summary())}[/]")


@gate.command("run")
@_repo_option
@_base_option
@_package_option
@_card_option
@_allow_option
@click.argument("names", nargs=-1, metavar="[CHECK]...")
@json_option
@click.pass_context
def run(
    ctx: click.Context,
    repo: Path | None,
    base: str | None,
    package: str | None,
    card: str | None,
    allow_test_changes: bool,
    names: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run the gate's checks in a repository (only the CHECKs named, if any) and print a
    report. Exits 1 when a check fails. A gate with no checks passes, and says so.

    A tests check runs the tests of BASE (default HEAD) against the tree as it is, and
    refuses changes to those tests unless --allow-test-changes."""
    ws = workspace()
    checks = select_checks(gate_checks(ws, package=package, card=card), names)
    root = repo_root(repo or Path.cwd())
    profile = tree_profile(ws, root)
    env = gate_environment(profile, root)
    judging = None
    if any(c.kind == "tests" for c in checks):
        judging = gate_judging(ws, root, base, allow_test_changes)
    try:
        result = run_gate(
            checks,
            root,
            base=base,
            env=env,
            profile=profile,
            confiner=gate_confiner(ws, root, profile, env),
            judging=judging,
        )
    finally:
        if judging is not None:
            shutil.rmtree(judging.scratch, ignore_errors=True)
    context: dict[str, object] = {"via": "agentos gate run", "repo": str(root)}
    if package:
        context["package"] = package
    if card:
        context["card"] = card
    receipt = write_gate_receipt(ws, result, context=context)
    if as_json:
        print_json({**result.as_dict(), "receipt": receipt.id})
    else:
        _print_report(result)
        console.print(f"receipt {receipt.id}")
    if not result.passed:
        fail(ctx)


@gate.command("hook")
@_base_option
@_package_option
@_card_option
@_allow_option
@click.option(
    "--check",
    "names",
    multiple=True,
    metavar="NAME",
    help="Run only this check (repeatable; default: every check).",
)
@click.pass_context
def hook(
    ctx: click.Context,
    base: str | None,
    package: str | None,
    card: str | None,
    allow_test_changes: bool,
    names: tuple[str, ...],
) -> None:
    """A Claude Code Stop hook: reads the hook JSON on stdin and runs the checks in the
    repository at its `cwd`. While a check fails it exits 2 with the failing checks and
    their output on stderr, so Claude keeps working; once all pass it exits 0. When
    `stop_hook_active` is true it exits 0 at once, so the agent can never loop forever.
    Exits 1 (a non-blocking hook error) when it cannot run at all, e.g. on a broken
    agentos.yaml, so a configuration mistake never traps the agent."""
    try:
        payload = parse_hook_input(sys.stdin.read())
        if payload.get("stop_hook_active") is True:
            outcome = stop_hook(payload, ())
        else:
            ws = workspace()
            checks = select_checks(gate_checks(ws, package=package, card=card), names)
            outcome = stop_hook(
                payload, checks, base=base, ws=ws, allow_test_changes=allow_test_changes
            )
            _hook_receipt(ws, payload, outcome, package, card)
    except AgentOSError as exc:  # exit 2 would block the agent on our own error
        click.echo(f"agentos gate hook: {exc}", err=True)
        fail(ctx, 1)
        return
    if outcome.exit_code == 2:
        click.echo(outcome.message, err=True, nl=False)
    else:
        click.echo(outcome.message)
    fail(ctx, outcome.exit_code)


def _hook_receipt(
    ws: Workspace,
    payload: dict[str, Any],
    outcome: HookOutcome,
    package: str | None,
    card: str | None,
) -> None:
    if outcome.result is None:
        return
    context: dict[str, object] = {
        "via": "claude code stop hook",
        "session": str(payload.get("session_id") or ""),
        "repo": str(outcome.repo),
    }
    run_id = os.environ.get("AGENTOS_RUN_ID")
    if run_id:  # a field, not the receipt's run link: the run's own gate receipts count
        context["agentos_run"] = run_id
    if package:
        context["package"] = package
    if card:
        context["card"] = card
    try:
        write_gate_receipt(ws, outcome.result, context=context)
    except OSError as exc:  # the decision stands; the missing receipt is reported
        click.echo(f"agentos gate hook: could not write the gate receipt: {exc}", err=True)


@gate.command("install-hook")
@_repo_option
@_base_option
@_package_option
@_card_option
@_allow_option
@click.option(
    "--check",
    "names",
    multiple=True,
    metavar="NAME",
    help="Have the hook run only this check (repeatable).",
)
@click.option(
    "--local",
    is_flag=True,
    help="Write .claude/settings.local.json (kept out of git through "
    ".git/info/exclude) instead of .claude/settings.json.",
)
@click.option(
    "--timeout",
    type=click.IntRange(min=1),
    default=1800,
    show_default=True,
    help="Seconds Claude Code gives the hook.",
)
@json_option
def install_hook(
    repo: Path | None,
    base: str | None,
    package: str | None,
    card: str | None,
    allow_test_changes: bool,
    names: tuple[str, ...],
    local: bool,
    timeout: int,
    as_json: bool,
) -> None:
    """Add the gate's Stop hook to a repository's .claude/settings.json, keeping every
    setting and hook already there. Running it again changes nothing."""
    ws = workspace()
    checks = gate_checks(ws, package=package, card=card)
    select_checks(checks, names)  # an unknown check name is an error now, not in the hook
    command = hook_command(
        ws,
        package=package,
        card=card,
        names=names,
        base=base,
        allow_test_changes=allow_test_changes,
    )
    path, changed = install_stop_hook(repo or Path.cwd(), command, timeout=timeout, local=local)
    if as_json:
        print_json({"settings": str(path), "changed": changed, "command": command})
    elif changed:
        console.print(f"installed the gate's Stop hook in {path}", markup=False)
    else:
        console.print(
            f"the gate's Stop hook is already installed in {path}; nothing changed", markup=False
        )
