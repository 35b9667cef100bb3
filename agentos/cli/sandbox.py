"""``agentos sandbox``: run a command confined as agents are, and prove the sandbox here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from agentos.cli._common import console, fail, json_option, print_json, table, workspace
from agentos.errors import BadInput


@click.group()
def sandbox() -> None:
    """The sandbox every agent and check runs in (bubblewrap, unshare, or limits only)."""


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from agentos.sandbox import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise BadInput(str(exc), field=f"--{param.name}") from None


@sandbox.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--network", is_flag=True, help="Allow the network (default: loopback only).")
@click.option("--memory", callback=_size, metavar="SIZE", help="Memory cap, e.g. 512M.")
@click.option("--cpu", type=click.FloatRange(min=0, min_open=True), help="CPU seconds.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Wall seconds.")
@click.option(
    "--write",
    "writes",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="A path the command may write (repeatable); everything else is read-only.",
)
@click.option(
    "--env",
    "passed",
    multiple=True,
    metavar="NAME",
    help="A variable of yours COMMAND gets (repeatable); it gets PATH, HOME, LANG, TERM.",
)
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    network: bool,
    memory: int | None,
    cpu: float | None,
    timeout: float | None,
    writes: tuple[Path, ...],
    passed: tuple[str, ...],
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND confined as an agent is: nothing of the file system but the system
    (read-only), the current directory (read-only) and what it needs to run, an empty
    /tmp and home, no network, none of your variables but those named, the workspace's
    limits (or these). Exits with COMMAND's exit code; --json prints the exit code, the
    limit hit if any, wall and CPU time (COMMAND's own output then goes to stderr)."""
    from agentos.sandbox import Limits, PackageSandbox, choose, policy, runtime_paths
    from agentos.sandbox.probe import run_confined

    names = ("PATH", "HOME", "LANG", "TERM", *passed)
    env = {k: os.environ[k] for k in names if k in os.environ}

    ws = workspace()
    settings = ws.settings.sandbox
    home = Path(os.environ.get("HOME", "/"))
    cwd = Path.cwd()
    chosen = choose(settings)
    pol = policy(
        settings=settings,
        package=PackageSandbox(network=network),
        hidden=[ws.root],
        writable=[p.resolve() for p in writes],
        readable=[cwd, *runtime_paths(os.environ.get("PATH", ""), home)],
        home=home,
        home_dir=None,
        cwd=cwd,
        limits=Limits.model_validate(
            {k: v for k, v in (("memory", memory), ("cpu", cpu)) if v is not None}
        ),
    )
    if as_json:
        result, output = run_confined(
            chosen, pol, list(command), timeout=timeout, capture=True, env=env
        )
        sys.stderr.write(output)
        print_json(result.as_dict())
    else:
        result, _ = run_confined(chosen, pol, list(command), timeout=timeout, env=env)
        if result.limit:
            click.echo(f"agentos sandbox: stopped at its limit: {result.limit}", err=True)
    fail(ctx, result.exit_code if result.exit_code >= 0 else 128 - result.exit_code)


@sandbox.command()
@json_option
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Which backend confines agents here, what a confined process sees of the file
    system (every path, and how), and a self-test: the network is blocked, the memory cap
    kills, a hidden directory is empty and read-only, no capability is held inside
    (nothing can be unmounted), a double-forked process does not outlive the sandbox.
    Exit code 1 when a test fails or no backend is usable."""
    from agentos.sandbox import choose
    from agentos.sandbox.probe import self_test, view_here

    ws = workspace()
    chosen = choose(ws.settings.sandbox)
    view = view_here(ws.settings.sandbox, ws.root)
    probes = self_test(chosen)
    ok = chosen.confined and all(p.passed for p in probes)
    if as_json:
        print_json(
            {**chosen.as_dict(), "ok": ok, "view": view, "probes": [p.as_dict() for p in probes]}
        )
    else:
        console.print(f"sandbox: {chosen.reason}; control groups: {chosen.as_dict()['cgroups']}")
        console.print(
            "what a confined process sees (besides its worktree, its package and its run's "
            "files; nothing else is there):"
        )
        table(None, ["path", "seen as"], [(v["path"], v["seen"]) for v in view])
        table(None, ["test", "passed", "detail"], [(p.name, p.passed, p.detail) for p in probes])
        console.print("the sandbox works here" if ok else "the sandbox does NOT confine here")
    if not ok:
        fail(ctx, 1)
