"""The commands typed most, served without click: ``route``, ``runs list``, ``status`` and
``hub list``.

Hooks and scripts call ``agentos route --json`` on every request and people type the
listings all day; importing click and building its command tree costs 15-20 ms of each.
Here those commands' arguments are read by a parser that knows only their own options
(:data:`COMMANDS`), and their bodies (below) are the ones their click commands call too.

The parser serves an argument list only when it can read it the way click would, and hands
anything else to click (help, an unknown option, a missing value, a value that is not a
number): errors and help stay click's. ``tests/test_cli_fast.py`` compares :data:`COMMANDS`
with the click commands' own parameters, and the parse of generated argument lists with
click's, so the two paths cannot drift.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentos.cli.output import echo, print_json, style, table
from agentos.errors import AgentOSError
from agentos.workspace.layout import Workspace


@dataclass(frozen=True)
class Spec:
    """What a command takes: its positional arguments in order, its options with a value
    (``--run`` -> ``run_id``), its flags (``--json`` -> ``as_json``), which values are
    whole numbers, and the defaults of the options not given."""

    arguments: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    flags: Mapping[str, str] = field(default_factory=dict)
    integers: frozenset[str] = frozenset()
    defaults: Mapping[str, Any] = field(default_factory=dict)


JSON = {"--json": "as_json"}

# The group's own option, before the command's name: -w/--workspace DIR.
WORKSPACE_OPTIONS = ("--workspace", "-w")

COMMANDS: dict[tuple[str, ...], Spec] = {
    ("route",): Spec(
        arguments=("request",),
        options={"--run": "run_id"},
        flags={"--dry-run": "dry_run", **JSON},
        defaults={"run_id": None},
    ),
    ("runs", "list"): Spec(
        options={"--limit": "limit"},
        flags=JSON,
        integers=frozenset({"limit"}),
        defaults={"limit": 20},
    ),
    ("status",): Spec(flags=JSON),
    ("hub", "list"): Spec(flags=JSON),
}


@dataclass(frozen=True)
class Parsed:
    """An argument list read: the command, the ``--workspace`` given (or None) and the
    values of the command's parameters by name."""

    command: tuple[str, ...]
    workspace: str | None
    params: dict[str, Any]


def parse(args: list[str]) -> Parsed | None:
    """``agentos ARGS`` read as click reads it, for the commands of :data:`COMMANDS`; None
    for anything else, or anything click might read otherwise (click then decides)."""
    rest = list(args)
    workspace = None
    while rest and rest[0].startswith("-"):  # the group's options come before the command
        given, value = _option(rest, WORKSPACE_OPTIONS)
        if given is None or value is None:
            return None
        workspace = value
    command = next((c for c in COMMANDS if tuple(rest[: len(c)]) == c), None)
    if command is None:
        return None
    spec = COMMANDS[command]
    rest = rest[len(command) :]
    params: dict[str, Any] = {name: False for name in spec.flags.values()}
    params.update(spec.defaults)
    positional: list[str] = []
    while rest:
        token = rest[0]
        if token == "--":
            positional += rest[1:]
            break
        if not token.startswith("-") or token == "-":
            positional.append(rest.pop(0))
            continue
        if token in spec.flags:
            params[spec.flags[token]] = True
            rest.pop(0)
            continue
        given, value = _option(rest, tuple(spec.options))
        if given is None or value is None:
            return None  # -h, --help, an unknown option, a flag given a value, no value
        name = spec.options[given]
        if name in spec.integers:
            try:
                params[name] = int(value)
            except ValueError:
                return None
        else:
            params[name] = value
    if len(positional) != len(spec.arguments):
        return None
    params.update(zip(spec.arguments, positional, strict=True))
    return Parsed(command, workspace, params)


def _option(rest: list[str], names: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The option at the head of ``rest`` among ``names``, and its value, taken off
    ``rest``: ``--name VALUE``, ``--name=VALUE``, ``-n VALUE`` or ``-nVALUE``. (None, None)
    when the head is none of them; (name, None) when its value is missing or looks like an
    option (click might read it otherwise)."""
    token = rest[0]
    for name in names:
        if token == name:
            if len(rest) < 2 or rest[1].startswith("-"):
                return name, None
            value = rest[1]
            del rest[:2]
            return name, value
        if name.startswith("--") and token.startswith(f"{name}="):
            rest.pop(0)
            return name, token[len(name) + 1 :]
        if not name.startswith("--") and token.startswith(name) and len(token) > len(name):
            rest.pop(0)
            return name, token[len(name) :]
    return None, None


# --- serving them ---------------------------------------------------------------------------


def serve(args: list[str]) -> int | None:
    """``agentos ARGS`` answered here when :func:`parse` reads it: its exit status. None when
    click must answer (this module then printed nothing)."""
    parsed = parse(args)
    if parsed is None:
        return None
    try:
        ws = open_workspace(parsed.workspace)
        return BODIES[parsed.command](ws, **parsed.params)
    except AgentOSError as exc:
        echo(f"error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def open_workspace(given: str | None) -> Workspace:
    """The workspace of this invocation (``--workspace``, else as :func:`locate_workspace`
    finds it), its settings checked and its folders made: what every command works in.
    Falling back to AgentOS's own checkout is said on stderr, never on stdout."""
    from agentos.workspace.layout import locate_workspace

    found = locate_workspace(given)
    if found.notice is not None:
        echo(f"agentos: {found.notice}", err=True)
    ws = found.workspace
    ws.check_settings()  # a broken agentos.yaml fails every command, up front
    ws.ensure()
    return ws


def route(ws: Workspace, request: str, run_id: str | None, dry_run: bool, as_json: bool) -> int:
    """``agentos route``: 0 when routed, 1 when the router asks to clarify or nothing
    matches."""
    from agentos.errors import BadInput
    from agentos.routing.router import ROUTE, decide
    from agentos.routing.router import route as route_request

    receipt: str | None = None
    if dry_run:
        if run_id is not None:
            raise BadInput("a dry run writes no receipt to link to a run", field="--run")
        decision = decide(ws, request)
    else:
        decision, written = route_request(ws, request, run_id=run_id)
        receipt = written.id
    if as_json:
        print_json({**decision.as_dict(), "dry_run": dry_run, "receipt": receipt})
        return 0 if decision.decision == ROUTE else 1
    echo("decision: " + style(decision.decision, bold=True))
    if decision.tied:
        echo(
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
        echo("rejected:")
        table(None, ["card", "reason"], [(r.card, r.reason) for r in decision.rejected])
    echo(f"receipt: {receipt}" if receipt else "receipt: none (dry run)")
    return 0 if decision.decision == ROUTE else 1


def runs_list(ws: Workspace, limit: int, as_json: bool) -> int:
    """``agentos runs list``: recent runs, newest first."""
    from agentos.cli import views
    from agentos.runtimes.usage import describe

    data = views.runs(ws, limit)
    if as_json:
        print_json(data)
        return 0
    hosts = ws.state.shared  # many machines: which one runs each
    table(
        None,
        ["run", "status", *(["host"] if hosts else []), "agents", "used", "started", "request"],
        [
            (
                r["id"],
                r["status"],
                *([r["host"] or ""] if hosts else []),
                ", ".join(a["agent"] for a in r["agents"]),
                describe(r["usage"]),
                when(r["created_at"]),
                r["request"][:60],
            )
            for r in data["runs"]
        ],
    )
    return 0


def status(ws: Workspace, as_json: bool) -> int:
    """``agentos status``: live runs and the health of each agent."""
    from agentos.cli import views

    data = views.live(ws)
    if as_json:
        print_json(data)
        return 0
    if not data["runs"]:
        echo("no run is in progress")
        return 0
    rows = []
    for r in data["runs"]:
        for a in r["agents"]:
            h = r["health"].get(a["agent"]) or {}
            rows.append(
                (
                    r["id"],
                    a["agent"],
                    a["status"],
                    h.get("health", "unknown"),
                    h.get("output_age", ""),
                    a["attempts"],
                )
            )
    table(None, ["run", "agent", "status", "health", "last output", "attempt"], rows)
    return 0


def hub_list(ws: Workspace, as_json: bool) -> int:
    """``agentos hub list``: installed packages, every version, and which is active."""
    from agentos.cli import views

    data = views.packages(ws)
    if as_json:
        print_json(data)
        return 0
    table(
        None,
        ["name", "version", "active", "sha256", "source"],
        [
            (v["name"], v["version"], "*" if v["active"] else "", v["sha256"][:12], v["source"])
            for v in data["packages"]
        ],
    )
    return 0


def when(ts: float | None) -> str:
    """A time as the listings show it: local, to the second."""
    if ts is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


BODIES: dict[tuple[str, ...], Callable[..., int]] = {
    ("route",): route,
    ("runs", "list"): runs_list,
    ("status",): status,
    ("hub", "list"): hub_list,
}
