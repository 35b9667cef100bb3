"""``agentos route`` and ``agentos mcp serve`` answered by a fork of the workspace's command
server (:mod:`agentos.shared.forkserver`), which has imported what the command needs.

Hooks and scripts call ``agentos route`` on every request. A new Python process spends
most of its ~80 ms importing (the standard modules, the stemmer, RE2, AgentOS's router and
CLI), and ~5 ms deciding and writing the receipt. So the command, as a process of its own,
sends its arguments and its standard input, output and error to this server, which forks a
child that runs the same :func:`agentos.cli.dispatch.entry` on the caller's own
descriptors, with the caller's environment, directory and umask, and says its exit status.
The child finds the workspace again as any ``agentos`` does: where the server lives only
says which process forks, never which workspace the command works in.

``mcp serve`` over stdio is served the same way by a server of its own that has ``mcp``
imported (~0.6 s of CPU that Claude Code and Gemini CLI waited for at every session's
start); ``mcp serve --http`` runs in its own process.

The first command of a workspace starts its server and waits for it; it ends after
``AGENTOS_FORKSERVER_IDLE`` seconds without a request (600). ``AGENTOS_CLI_SERVER=0`` turns
it off: the command then runs in its own process, as it does whenever no server can be
reached. Ctrl-C and SIGTERM are passed on to the child. Only what this module imports at
its top is paid before the hop: the client half is the standard library's.

    python -m agentos.cli.server --service cli|mcp [--idle SECONDS] --fd FD --socket PATH
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

OFF_ENV = "AGENTOS_CLI_SERVER"
# The commands a server answers, and which server: `route` a light one; `mcp serve` over
# stdio (what Claude Code and Gemini CLI start for every session) one that has `mcp` imported.
SERVICES = {("route",): "cli", ("mcp", "serve"): "mcp"}
STATE_DIR = ".agentos"  # (agentos.workspace.layout's; not imported: its import is the cost)
_GLOBAL_WITH_VALUE = ("--workspace", "-w")


def hop(args: list[str]) -> int | None:
    """``agentos ARGS`` answered by a fork of the workspace's command server: its exit
    status; None when it is not a command served so, or no server could take it (the
    caller then runs it itself)."""
    if os.environ.get(OFF_ENV, "").strip() == "0":
        return None
    given, command = _command(args)
    service = SERVICES.get(command[:2]) or SERVICES.get(command[:1])
    if service is None or (service == "mcp" and any(a.startswith("--http") for a in args)):
        return None  # (`mcp serve --http` is a server of its own, not a session)
    try:
        os.getcwd()
    except OSError:  # its directory removed: the command says so itself
        return None
    root = _workspace_root(given)
    if root is None:
        return None
    from pathlib import Path

    from agentos.shared import forkserver

    state = Path(root) / STATE_DIR
    start = [sys.executable, "-m", "agentos.cli.server", "--service", service]
    start += ["--idle", forkserver.idle()]
    try:
        conn, first = forkserver.request(
            forkserver.socket_path(state, service), start, {"argv": args}, [0, 1, 2]
        )
    except OSError:
        return None
    with conn:
        return _wait(conn, first)


def _command(args: list[str]) -> tuple[str | None, tuple[str, ...]]:
    """The ``--workspace`` given and the command's names (its first two words), past the
    global options; no names when an option that is not one of these comes first."""
    given: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GLOBAL_WITH_VALUE and i + 1 < len(args):
            given, i = args[i + 1], i + 2
        elif arg.startswith("--workspace="):
            given, i = arg.partition("=")[2], i + 1
        elif arg.startswith("-"):
            return given, ()  # not for the hop
        else:
            return given, tuple(args[i : i + 2])
    return given, ()


def _workspace_root(given: str | None) -> str | None:
    """Where the command server would be: the workspace ``--workspace`` or
    ``AGENTOS_HOME`` names, else the nearest folder up from here holding ``.agentos``
    (the order of agentos.workspace.layout.locate_workspace). A wrong guess costs only
    the hop: the child finds the workspace itself."""
    for value in (given, os.environ.get("AGENTOS_HOME")):
        if value:
            path = os.path.realpath(os.path.expanduser(value))
            return path if os.path.isdir(os.path.join(path, STATE_DIR)) else None
    here = os.path.realpath(os.getcwd())
    while True:
        if os.path.isdir(os.path.join(here, STATE_DIR)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _wait(conn: socket.socket, first: tuple[bytes, list[int]] | None) -> int | None:
    """The child's exit status, passing Ctrl-C and SIGTERM on to it (None when it never
    started: the caller runs the command itself)."""
    import json
    import signal

    from agentos.shared import forkserver

    pidfd: int | None = None

    def take(fds: list[int]) -> None:
        nonlocal pidfd
        for fd in fds:
            if pidfd is None:
                pidfd = fd
            else:
                os.close(fd)

    def forward(sig: int, _frame: object) -> None:
        if pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, sig)

    if first is not None:
        take(first[1])
    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                data, fds = forkserver.answer(conn, None)
            except OSError:
                data, fds = b"", []
            take(fds)
            if not data:  # it ended without saying how (killed)
                return None if pidfd is None else 1
            said = json.loads(data)
            if "exit" in said:
                return int(said["exit"])
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if pidfd is not None:
            os.close(pidfd)


# --- the server ------------------------------------------------------------------------


# What `agentos route` imports (python -X importtime), imported once by the server; nothing
# of the workspace is read there (a child that inherited a watch on the cards folder would
# share its events with every other child).
PRELOADED = (
    "agentos.cli.fast",
    "agentos.receipts.chain",
    "agentos.receipts.place",
    "agentos.receipts.sign",
    "agentos.routing.cardfiles",
    "agentos.routing.index",
    "agentos.routing.router",
    "agentos.shared.limits",
    "agentos.shared.patterns",
    "agentos.shared.text",
    "agentos.state.location",
    "apsw",
    "re2",
)


def _preload_route() -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)


def _preload_mcp() -> None:
    """What ``mcp serve`` imports over stdio, and its tool families."""
    import importlib
    import pkgutil

    import click
    import mcp.server.stdio  # noqa: F401

    import agentos.mcp_server.tools as tools
    from agentos.cli._main import cli

    cli.get_command(click.Context(cli), "mcp")
    for name in ("agentos.mcp_server.server", "agentos.mcp_server.transport"):
        importlib.import_module(name)
    for module in pkgutil.iter_modules(tools.__path__):
        importlib.import_module(f"{tools.__name__}.{module.name}")


PRELOADS = {"cli": _preload_route, "mcp": _preload_mcp}


def _handle(conn: socket.socket, fields: dict[str, Any], fds: list[int]) -> int:
    """``agentos ARGV`` on the caller's descriptors (0, 1, 2), as its own process runs it."""
    from agentos.cli.dispatch import entry

    argv = fields.get("argv")
    if len(fds) != 3 or not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("a request without its arguments and three descriptors")
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    sys.argv = ["agentos", *argv]
    try:
        code = entry(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: as agentos.cli.run ends then
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    return code


def main(argv: list[str] | None = None) -> int:
    import argparse

    from agentos.shared import forkserver

    parser = argparse.ArgumentParser(prog="python -m agentos.cli.server", add_help=False)
    parser.add_argument("--service", choices=sorted(PRELOADS), required=True)
    known, rest = parser.parse_known_args(argv)
    return forkserver.main(
        rest, f"agentos-{known.service}-server", PRELOADS[known.service], _handle
    )


if __name__ == "__main__":
    sys.exit(main())
