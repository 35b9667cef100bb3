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

The first command of a workspace starts its server and runs in its own process; the server
ends after ``AGENTOS_FORKSERVER_IDLE`` seconds without a request (600). A server is shared
only by callers with the same namespaces, credentials, control groups, nice value, limits
and interpreter settings (:func:`agentos.shared.forkserver.socket_path`): a child has its
server's, not its caller's. ``AGENTOS_CLI_SERVER=0`` turns it off; the command runs in its
own process too whenever no server takes it within seconds (one that does not is replaced),
or a standard stream is closed. The caller's signals are passed on to the child (those that
come before it is known, once it is); a child ended by one ends its caller the same way;
Ctrl-Z stops both; a caller killed ends its child. Only what this module imports at its top
is paid before the hop: the client half is the standard library's.

    python -m agentos.cli.server --service cli|mcp [--idle SECONDS] --fd FD --socket PATH
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing is not imported on the hop's path: ~5 ms)
if TYPE_CHECKING:
    import _socket
    import socket
    from typing import Any

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
        for fd in (0, 1, 2):  # a stream closed: the socket would take its number
            os.fstat(fd)
    except OSError:  # (its directory removed, a stream closed: the command says so itself)
        return None
    root = _workspace_root(given)
    if root is None:
        return None
    from agentos.shared import forkserver

    state = os.path.join(root, STATE_DIR)
    start = [sys.executable, "-m", "agentos.cli.server", "--service", service]
    start += ["--idle", forkserver.idle()]
    with _Caller() as caller:  # its signals are the child's from the start
        try:
            # The first command of a workspace starts the server and runs itself.
            sent = forkserver.request(
                forkserver.socket_path(state, service), start, {"argv": args}, [0, 1, 2],
                wait=False,
            )  # fmt: skip
        except OSError:
            return None
        if sent is None:  # started for the next one
            return None
        conn, first = sent
        try:  # (the C module's socket: no `with`)
            return None if first is None else caller.wait(conn, first)
        finally:
            conn.close()


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


class _Caller:
    """The calling process while a child works for it: the signals it gets are passed on
    to the child (those that come before the child is known, once it is); Ctrl-Z stops
    both and ``fg`` continues both; a child ended by a signal passed on ends it the same
    way."""

    PASSED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGCONT")

    def __init__(self) -> None:
        import signal

        self.signal = signal
        self.pidfd: int | None = None
        self.pending: list[int] = []  # got before the child was known
        self.passed: list[int] = []
        self.old: dict[int, Any] = {}

    def __enter__(self) -> _Caller:
        signal = self.signal
        for name in self.PASSED:
            self.old[getattr(signal, name)] = signal.signal(getattr(signal, name), self._got)
        self.old[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._stop)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.old.items():
            self.signal.signal(sig, handler)
        if self.pidfd is not None:
            os.close(self.pidfd)
        for sig in self.pending:  # never passed on: the command (run here) gets it
            if sig != self.signal.SIGCONT:
                os.kill(os.getpid(), sig)

    def _send(self, sig: int) -> None:
        assert self.pidfd is not None
        try:  # noqa: SIM105 (contextlib is not imported on the hop's path)
            self.signal.pidfd_send_signal(self.pidfd, sig)
        except ProcessLookupError:
            pass
        self.passed.append(sig)

    def _got(self, sig: int, _frame: object) -> None:
        if self.pidfd is None:
            self.pending.append(sig)
        else:
            self._send(sig)

    def _stop(self, sig: int, _frame: object) -> None:
        """Ctrl-Z: the child stops, then this process (``fg`` sends both SIGCONT)."""
        signal = self.signal
        if self.pidfd is not None:
            try:  # noqa: SIM105 (as above)
                signal.pidfd_send_signal(self.pidfd, signal.SIGTSTP)
            except ProcessLookupError:
                pass
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until continued
        signal.signal(signal.SIGTSTP, self._stop)

    def wait(self, conn: _socket.socket, first: tuple[bytes, list[int]]) -> int:
        """The child's exit status."""
        from agentos.shared import forkserver

        self._take(first[1])
        while self.pending:
            self._send(self.pending.pop(0))
        while True:
            try:
                data, fds = forkserver.answer(conn, None)
            except OSError:
                data, fds = b"", []
            self._take(fds)
            if not data:  # it ended without saying how: killed
                fatal = [s for s in self.passed if s != self.signal.SIGCONT]
                if fatal:  # by what was passed on: this process ends the same way
                    self.signal.signal(fatal[-1], self.signal.SIG_DFL)
                    os.kill(os.getpid(), fatal[-1])
                return 1
            code = forkserver.said(data, "exit")
            if code is not None:
                return code

    def _take(self, fds: list[int]) -> None:
        for fd in fds:
            if self.pidfd is None:
                self.pidfd = fd
            else:
                os.close(fd)


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
    import threading

    threading.Thread(target=_end_with_caller, args=(conn,), daemon=True).start()
    try:
        code = entry(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: as agentos.cli.run ends then
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    return code


def _end_with_caller(conn: socket.socket) -> None:
    """The caller gone (killed), the command ends as a process of its own would with it."""
    import signal

    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


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
