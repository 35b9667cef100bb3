"""The commands served without click (agentos.cli.fast) read their arguments as click does,
or leave them to click: compared with click's own parse on every short argument list of
their options and values, and on seeded random longer ones."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from conftest import CliRunner, wait_until

from agentos.cli import fast
from agentos.cli._main import cli as agentos_cli
from agentos.receipts import list_receipts, verify_chain
from agentos.workspace.layout import Workspace


def _click_command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = agentos_cli
    ctx = click.Context(agentos_cli)
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, name)
        assert found is not None, path
        command = found
    return command


def _spec_of(command: click.Command) -> fast.Spec:
    """A click command's parameters, as :class:`fast.Spec` writes them (help aside)."""
    arguments, options, flags, integers, defaults = [], {}, {}, set(), {}
    # What click gives each parameter when the command is called with its arguments alone;
    # under the group's context, as click makes it: a context of its own would give the
    # command a help option without -h, which click keeps for the command's later help.
    required = sum(isinstance(p, click.Argument) for p in command.params)
    group = agentos_cli.make_context("agentos", [], resilient_parsing=True)
    given = command.make_context("command", ["word"] * required, parent=group).params
    for param in command.params:
        assert param.name is not None
        if isinstance(param, click.Argument):
            assert (param.nargs, param.required, param.type) == (1, True, click.STRING)
            arguments.append(param.name)
            continue
        assert isinstance(param, click.Option)
        if param.name == "help":
            continue
        assert not param.multiple and not param.count and param.envvar is None
        assert not param.secondary_opts and len(param.opts) == 1, param.opts
        if param.is_flag:
            assert given[param.name] is False
            flags[param.opts[0]] = param.name
            continue
        assert param.type in (click.STRING, click.INT), param.type
        options[param.opts[0]] = param.name
        defaults[param.name] = given[param.name]
        if param.type is click.INT:
            integers.add(param.name)
    return fast.Spec(tuple(arguments), options, flags, frozenset(integers), defaults)


@pytest.mark.parametrize("path", list(fast.COMMANDS), ids=" ".join)
def test_each_fast_command_takes_exactly_its_click_commands_parameters(
    path: tuple[str, ...],
) -> None:
    assert fast.COMMANDS[path] == _spec_of(_click_command(path))
    assert path in fast.BODIES


def test_the_fast_path_takes_the_groups_workspace_option_as_click_does() -> None:
    (workspace,) = [p for p in agentos_cli.params if p.name == "workspace"]
    assert isinstance(workspace, click.Option)
    assert sorted(workspace.opts) == sorted(fast.WORKSPACE_OPTIONS)


def click_parse(argv: list[str]) -> fast.Parsed | None:
    """What click makes of ``agentos ARGV``: the command reached, the workspace given and
    the command's parameters; None when click stops (an error, help)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ctx = agentos_cli.make_context("agentos", list(argv))
            workspace = ctx.params["workspace"]
            args = [*ctx._protected_args, *ctx.args]
            path: list[str] = []
            command: click.Command = agentos_cli
            while isinstance(command, click.Group):
                if not args:
                    return None
                name, sub, args = command.resolve_command(ctx, args)
                if sub is None or name is None:
                    return None
                path.append(name)
                ctx = sub.make_context(name, args, parent=ctx)
                args = [*ctx._protected_args, *ctx.args] if isinstance(sub, click.Group) else []
                command = sub
            return fast.Parsed(tuple(path), workspace, dict(ctx.params))
    except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
        return None


# Tokens each command's argument lists are made of: its own options, others', values that
# look like options or numbers, the end of options, help, and plain words.
VOCABULARY = [
    "--json",
    "--dry-run",
    "--run",
    "--run=r1",
    "--limit",
    "--limit=3",
    "7",
    "-5",
    "x",
    "fix the bug",
    "--",
    "-",
    "-h",
    "--help",
    "--jso",
    "--json=1",
    "-w",
]


def _argument_lists(path: tuple[str, ...]) -> list[list[str]]:
    lists = []
    for prefix in ([], ["-w", "/tmp/w"], ["--workspace=/tmp/w"], ["-w/tmp/w"], ["--workspace"]):
        for n in range(4):
            for tail in itertools.product(VOCABULARY, repeat=n):
                lists.append([*prefix, *path, *tail])
    rng = random.Random(20261127)
    for _ in range(3000):
        lists.append([*path, *rng.choices(VOCABULARY, k=rng.randint(4, 7))])
    return lists


@pytest.mark.parametrize("path", list(fast.COMMANDS), ids=" ".join)
def test_whatever_the_fast_path_reads_click_reads_the_same(path: tuple[str, ...]) -> None:
    served = 0
    for argv in _argument_lists(path):
        mine = fast.parse(argv)
        if mine is None:
            continue  # left to click
        served += 1
        assert mine == click_parse(argv), argv
    assert served > 10  # and it serves the common forms (next test), not nothing


@pytest.mark.parametrize(
    "argv",
    [
        ["route", "fix the bug"],
        ["route", "--json", "fix the bug"],
        ["route", "fix the bug", "--json"],
        ["route", "--dry-run", "--json", "--", "-x"],
        ["-w", "/tmp/w", "route", "--run", "r1", "fix the bug"],
        ["--workspace=/tmp/w", "route", "--run=r1", "x"],
        ["runs", "list"],
        ["runs", "list", "--limit", "5", "--json"],
        ["status", "--json"],
        ["hub", "list"],
    ],
    ids=" ".join,
)
def test_the_forms_people_and_hooks_type_are_served_without_click(argv: list[str]) -> None:
    parsed = fast.parse(argv)
    assert parsed is not None
    assert parsed == click_parse(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["route"],
        ["route", "--help"],
        ["route", "-h", "x"],
        ["route", "--limit", "3", "x"],
        ["runs", "list", "--limit", "many"],
        ["runs", "list", "--limit"],
        ["route", "a", "b"],
        ["runs"],
        ["runs", "show", "x"],
        ["--workspace"],
        ["-x", "route", "y"],
    ],
    ids=" ".join,
)
def test_errors_and_help_are_left_to_click(argv: list[str]) -> None:
    assert fast.parse(argv) is None


def test_a_fast_command_says_what_click_would_of_a_missing_workspace(
    cli: CliRunner, tmp_path: Any
) -> None:
    gone = tmp_path / "gone"
    out = cli("runs", "list", workspace=gone)
    assert (out.returncode, out.stdout, out.stderr) == (
        2,
        "",
        f"error: --workspace: workspace {gone} does not exist (run `agentos init {gone}`)\n",
    )


def test_a_fast_command_refuses_a_broken_settings_file_up_front(
    cli: CliRunner, ws: Workspace
) -> None:
    ws.settings_file.write_text("run: [\n")
    out = cli("route", "fix the lint errors", "--json")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith(f"error: {ws.settings_file}: ")
    assert len(out.stderr.splitlines()) == 1


@pytest.mark.process  # what a new process imports
@pytest.mark.parametrize(
    "argv",
    [["route", "--json", "fix the lint errors"], ["runs", "list"], ["status"], ["hub", "list"]],
    ids=" ".join,
)
def test_the_commands_typed_most_import_neither_click_nor_rich(
    ws: Workspace, argv: list[str]
) -> None:
    def imported() -> set[str]:
        out = subprocess.run(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), *argv],
            capture_output=True,
            text=True,
            # In its own process (route is answered by a fork of the command server
            # otherwise: tested below).
            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "AGENTOS_CLI_SERVER": "0"},
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()}

    first = imported()
    assert "agentos" in first and not first & {"click", "rich"}
    if argv[0] == "route":  # the card's constraint, resolved once for this hub, is kept
        assert "packaging" not in imported()


@pytest.mark.process  # a reader that went away: only a real process's stdout can say so
@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["hub", "list"],
        ["hub", "list", "--json"],
        ["route", "--dry-run", "--json", "fix the lint errors"],
        ["status", "--json"],
        ["--help"],
        ["cards", "list"],  # a command click serves: what the others must do alike
    ],
    ids=" ".join,
)
def test_a_reader_gone_ends_every_command_quietly_with_status_1(
    ws: Workspace, argv: list[str]
) -> None:
    """``agentos runs list | head -1``: the reader is gone before the output is written;
    the command ends as click ends one, with status 1 and nothing on stderr (no traceback,
    no complaint of Python's at exit)."""
    read, write = os.pipe()
    os.close(read)  # gone before anything is written: every write fails at once
    try:
        out = subprocess.run(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "100"},
            timeout=60,
        )
    finally:
        os.close(write)
    assert (out.returncode, out.stderr) == (1, "")


# --- `agentos route` as a process, answered by the command server (agentos.cli.server) ------


SERVED = {"AGENTOS_CLI_SERVER": "1"}  # (off for the rest of the suite: tests/conftest.py)


def _agentos(
    ws: Workspace, *argv: str, env: dict[str, str] | None = None, flag: bool = True, **kw: Any
) -> subprocess.CompletedProcess[str]:
    prefix = ["--workspace", str(ws.root)] if flag else []
    return subprocess.run(
        [sys.executable, "-m", "agentos", *prefix, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **SERVED, **(env or {})},
        timeout=60,
        **kw,
    )


def _decision(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(out.stdout)
    found.pop("receipt")
    return found


@pytest.mark.process  # the hop is made by a process of its own
def test_route_as_a_process_is_answered_by_a_fork_of_the_command_server_as_its_own_would(
    ws: Workspace,
) -> None:
    request = ("route", "fix the lint errors", "--json")
    timed = {"PYTHONPROFILEIMPORTTIME": "1"}  # (its own server: PYTHON* variables are its key)

    def imported(out: subprocess.CompletedProcess[str]) -> set[str]:
        return {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}

    own = _agentos(ws, *request, env={"AGENTOS_CLI_SERVER": "0"})
    first = _agentos(ws, *request, env=timed)  # starts the server, and runs itself
    served = _agentos(ws, *request, env=timed)  # answered by a fork of it
    from_here = _agentos(ws, *request, flag=False, cwd=ws.root)  # found from its directory

    assert "agentos.routing.router" in imported(first)
    assert "agentos.cli.server" in imported(served)
    assert "agentos.routing.router" not in imported(served)
    outs = (own, first, served, from_here)
    assert [o.returncode for o in outs] == [0, 0, 0, 0], [o.stderr for o in outs]
    assert all(_decision(o) == _decision(own) for o in outs)
    receipts = [json.loads(o.stdout)["receipt"] for o in outs]
    assert len(set(receipts)) == 4
    assert {r.id for r in list_receipts(ws)} >= set(receipts)
    assert verify_chain(ws) == []
    logs = [log.read_text() for log in ws.state_dir.glob("cli-*.log")]
    assert logs and not any("refused" in log for log in logs)  # (a start is no request)


@pytest.mark.process
def test_a_forked_route_takes_its_callers_environment_and_exit_status(ws: Workspace) -> None:
    assert _agentos(ws, "route", "fix the lint errors").returncode == 0  # the server is up
    nothing = _agentos(ws, "route", "--json", "qqq zzz xyzzy")
    assert nothing.returncode == 1 and json.loads(nothing.stdout)["decision"] == "no_match"
    bad = _agentos(ws, "route", "--dry-run", "--run", "r1", "x")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == "error: --run: a dry run writes no receipt to link to a run\n"
    url = "postgresql://agentos@/agentos?host=/nonexistent-agentos-socket"
    elsewhere = _agentos(
        ws,
        "route",
        "fix the lint errors",
        env={"AGENTOS_STATE_URL": url, "AGENTOS_STATE_RETRY": "0"},
    )
    assert elsewhere.returncode == 2 and elsewhere.stdout == ""
    assert "/nonexistent-agentos-socket" in elsewhere.stderr
    assert len(elsewhere.stderr.splitlines()) == 1


@pytest.mark.process
def test_a_command_server_is_shared_only_by_processes_of_the_same_context(ws: Workspace) -> None:
    """A forked child keeps its server's limits, nice value and namespaces, not its
    caller's: a caller in another context gets a server of its own."""
    import resource

    def nofile(limit: int) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    contexts: list[Any] = [lambda: nofile(512), lambda: nofile(512), lambda: nofile(256)]
    contexts.append(lambda: os.nice(5))
    for context in contexts:
        out = _agentos(ws, "route", "fix the lint errors", preexec_fn=context)
        assert out.returncode == 0, out.stderr
    unshared = subprocess.run(
        ["unshare", "--mount", sys.executable, "-m", "agentos", "--workspace", str(ws.root),
         "route", "fix the lint errors"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **SERVED},
    )  # fmt: skip
    assert unshared.returncode == 0, unshared.stderr
    assert len(list(ws.state_dir.glob("cli-*.sock"))) == 4


@pytest.mark.process
def test_concurrent_routes_are_each_answered_once(ws: Workspace) -> None:
    assert _agentos(ws, "route", "fix the lint errors").returncode == 0  # the server is up
    before = len(list_receipts(ws))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentos",
                "--workspace",
                str(ws.root),
                "route",
                "--json",
                "fix the lint errors",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **SERVED},
        )
        for _ in range(40)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 40, [err for _, err in outs]
    assert all(out.count('"decision"') == 1 for out, _ in outs)
    assert len(list_receipts(ws)) == before + 40
    assert verify_chain(ws) == []


@pytest.mark.process
def test_a_forked_command_ends_as_its_caller_is_ended(ws: Workspace) -> None:
    """``mcp serve`` (it waits on its standard input) through the mcp command server:
    SIGTERM ends the caller by SIGTERM, as in its own process; SIGKILL of the caller ends
    the child too."""
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "mcp", "serve"]

    def children() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
                parent = Path(f"/proc/{stat[1]}/cmdline").read_bytes()
                mine = str(ws.state_dir).encode() in parent  # (not another test's server)
                if stat[0] != "Z" and b"--service\0mcp" in parent and mine:
                    found.append(int(entry.name))
        return found

    def ended_by_sigterm(env: dict[str, str], forked: bool) -> int:
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, **env}) as proc:  # fmt: skip
            if forked:  # the child forked for it, serving: the signal is passed on to it
                wait_until(children, timeout=30, what="the forked mcp serve")
            proc.send_signal(signal.SIGTERM)
            return proc.wait(timeout=30)

    own = ended_by_sigterm({"AGENTOS_CLI_SERVER": "0"}, forked=False)
    # The first one starts the server and runs itself (its input ends at once).
    started = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                             env={**os.environ, **SERVED})  # fmt: skip
    assert started.returncode == 0, started.stderr
    forked = ended_by_sigterm(SERVED, forked=True)
    assert own == forked == -signal.SIGTERM
    wait_until(lambda: not children(), timeout=10, what="the child ended")
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **SERVED}
    ) as proc:
        child = wait_until(children, timeout=30, what="the forked mcp serve")
        proc.kill()
        proc.wait()
    wait_until(lambda: not children(), timeout=10, what=f"the child {child} ended with its caller")


@pytest.mark.process
def test_a_route_with_its_output_closed_ends_as_in_its_own_process(ws: Workspace) -> None:
    assert _agentos(ws, "route", "fix the lint errors").returncode == 0  # the server is up
    outs = [
        subprocess.run(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "route", "x"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, **env},
            preexec_fn=lambda: os.close(1),
        )
        for env in ({"AGENTOS_CLI_SERVER": "0"}, SERVED)
    ]
    assert outs[1].returncode == outs[0].returncode != 0
    assert outs[1].stderr.splitlines()[-1:] == outs[0].stderr.splitlines()[-1:]
