"""tmux sessions for agents, on AgentOS's own tmux server (through libtmux).

Each workspace has its own tmux socket (``-L agentos-<hash>``), so AgentOS never touches
the user's own tmux sessions and tests never touch the user's AgentOS. Sessions are named
``agentos-<run-id>-<agent>``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import MissingTool, OperationFailed

if TYPE_CHECKING:
    import libtmux

SESSION_PREFIX = "agentos-"
_START_TRIES = 5


def _server_was_exiting(stderr: list[str]) -> bool:
    text = " ".join(stderr)
    return "server exited unexpectedly" in text or "lost server" in text


def socket_name(workspace_root: Path) -> str:
    """The tmux socket of a workspace (``AGENTOS_TMUX_SOCKET`` overrides it)."""
    override = os.environ.get("AGENTOS_TMUX_SOCKET")
    if override:
        return override
    digest = hashlib.sha256(str(workspace_root.resolve()).encode()).hexdigest()[:10]
    return f"agentos-{digest}"


def session_name(run_id: str, agent: str) -> str:
    return f"{SESSION_PREFIX}{run_id}-{agent}"


def require_tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        raise MissingTool(
            "tmux is not installed: AgentOS runs each agent in a tmux session "
            "(install it: apt-get install tmux, or brew install tmux)",
            field="tmux",
        )
    return path


@dataclass(frozen=True)
class PaneInfo:
    session: str
    pane_pid: int | None
    dead: bool
    current_command: str


class Sessions:
    """The AgentOS tmux server of one workspace."""

    def __init__(self, workspace_root: Path) -> None:
        self.socket = socket_name(workspace_root)
        self._server: libtmux.Server | None = None

    @property
    def server(self) -> libtmux.Server:
        if self._server is None:
            require_tmux()
            import libtmux

            self._server = libtmux.Server(socket_name=self.socket)
        return self._server

    def socket_path(self) -> Path | None:
        """Where tmux puts this server's socket (``-L``: in ``tmux-UID`` of ``$TMUX_TMPDIR``
        or ``/tmp``); None when only tmux can say. tmux passes over a ``TMUX_TMPDIR`` that is
        not an absolute path to a folder (3.x uses ``/tmp`` then; older ones fail)."""
        tmpdir = os.environ.get("TMUX_TMPDIR") or "/tmp"
        if not (os.path.isabs(tmpdir) and os.path.isdir(tmpdir)):
            return None
        return Path(tmpdir) / f"tmux-{os.getuid()}" / self.socket

    def start(self, name: str, command: list[str], cwd: Path) -> int | None:
        """Start a detached session running ``command`` in ``cwd``; returns the pane's pid.

        One ``new-session -P`` call: the command may end (and the session with it) before a
        second query could ask for its pid. A session left with that name (an earlier
        attempt's) is ended first, when tmux says it is there.
        """
        for attempt in range(_START_TRIES):
            result = self.server.cmd(
                "new-session",
                "-d",
                "-s",
                name,
                "-c",
                str(cwd),
                "-x",
                "200",
                "-y",
                "50",
                "-P",
                "-F",
                "#{pane_pid}",
                shlex.join(command),
            )
            if result.returncode != 0 and "duplicate session" in " ".join(result.stderr):
                self.kill(name)
                continue
            # When the server's last session has just ended, the server is exiting: a client
            # that reached it then is told so, and the next one starts a new server.
            if result.returncode == 0 or not _server_was_exiting(result.stderr):
                break
            time.sleep(0.05 * (attempt + 1))
        if result.returncode != 0:
            detail = " ".join(result.stderr).strip() or f"exit {result.returncode}"
            raise OperationFailed(f"tmux could not start session {name}: {detail}")
        out = "".join(result.stdout).strip()
        return int(out) if out.isdigit() else None

    def exists(self, name: str) -> bool:
        return name in self.names()

    def names(self) -> list[str]:
        """AgentOS sessions on this server (an absent server has none)."""
        return [p.session for p in self.panes()]

    def panes(self) -> list[PaneInfo]:
        """One batched tmux query for every AgentOS pane on the server."""
        socket = self.socket_path()
        if shutil.which("tmux") is None or (socket is not None and not _listening(socket)):
            return []  # no server: nothing to ask it (tmux leaves its socket when it ends)
        fmt = "#{session_name}\t#{pane_pid}\t#{pane_dead}\t#{pane_current_command}"
        result = self.server.cmd("list-panes", "-a", "-F", fmt)
        if result.returncode != 0:
            return []
        out = []
        for line in result.stdout:
            parts = line.split("\t")
            if len(parts) != 4 or not parts[0].startswith(SESSION_PREFIX):
                continue
            pid = int(parts[1]) if parts[1].isdigit() else None
            out.append(PaneInfo(parts[0], pid, parts[2] == "1", parts[3]))
        return out

    def kill(self, name: str, pane_pid: int | None = None) -> bool:
        """End a session. With ``pane_pid``, its whole process group is killed first, so
        that what the agent started (and what ignores SIGHUP) does not outlive it."""
        if pane_pid:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pane_pid, signal.SIGKILL)
        socket = self.socket_path()
        if shutil.which("tmux") is None or (socket is not None and not _listening(socket)):
            return False  # no server: no session (an agent that ended took its server along)
        result = self.server.cmd("kill-session", "-t", f"={name}")
        return result.returncode == 0

    def capture(self, name: str, lines: int = 200) -> str:
        result = self.server.cmd("capture-pane", "-p", "-J", "-t", f"={name}:", "-S", f"-{lines}")
        return "\n".join(result.stdout) if result.returncode == 0 else ""

    def screens(self, sessions: Sequence[str]) -> dict[str, str]:
        """Every session's visible screen, from one tmux call (one call each if that fails);
        a session that ended is left out."""
        if not sessions:
            return {}
        marker = f"@@agentos-screens-{secrets.token_hex(8)}@@"
        args: list[str] = []
        for name in sessions:
            args += [
                "capture-pane",
                "-p",
                "-J",
                "-t",
                f"={name}:",
                ";",
                "display-message",
                "-p",
                marker,
                ";",
            ]
        result = self.server.cmd(*args[:-1])
        if result.returncode == 0:
            parts: list[list[str]] = [[]]
            for line in result.stdout:
                if line == marker:
                    parts.append([])
                else:
                    parts[-1].append(line)
            if len(parts) > len(sessions):
                return {name: "\n".join(part) for name, part in zip(sessions, parts, strict=False)}
        # A session ended between list-panes and capture-pane: tmux stopped at it.
        out = {}
        for name in sessions:
            result = self.server.cmd("capture-pane", "-p", "-J", "-t", f"={name}:")
            if result.returncode == 0:
                out[name] = "\n".join(result.stdout)
        return out

    def respawn(self, name: str, command: list[str], cwd: Path | None = None) -> str | None:
        """Run ``command`` anew in the session's pane (whatever ran there is killed), in
        ``cwd`` when given; None when it did, else what tmux said."""
        args = ["respawn-pane", "-k", "-t", f"={name}:"]
        if cwd is not None:
            args += ["-c", str(cwd)]
        result = self.server.cmd(*args, shlex.join(command))
        return None if result.returncode == 0 else " ".join(result.stderr) or "respawn failed"

    def send_text(self, name: str, text: str) -> bool:
        """Type ``text`` into a session, then Enter (the guardian's nudge)."""
        target = f"={name}:"
        literal = self.server.cmd("send-keys", "-t", target, "-l", text)
        enter = self.server.cmd("send-keys", "-t", target, "Enter")
        return literal.returncode == 0 and enter.returncode == 0

    def attach_argv(self, name: str) -> list[str]:
        return [require_tmux(), "-L", self.socket, "attach-session", "-t", f"={name}"]


def _listening(path: Path) -> bool:
    """Whether a server listens on the Unix socket at ``path``: tmux leaves its socket file
    behind when its last session ends, and asking a tmux that is not there costs a process
    (gc asks before every run). True when it cannot be told (tmux is asked then)."""
    import socket

    from agentos.shared.sockets import UnixAddress

    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < _SUN_PATH:  # by its path: no /proc needed
            probe.connect(os.fspath(path))
        else:  # through /proc/self/fd: where /proc is not this process's, tmux is asked
            with UnixAddress(path) as address:
                probe.connect(address)
    except ConnectionRefusedError:
        return False
    except OSError:
        return True
    finally:
        probe.close()
    return True


_SUN_PATH = 108  # the bytes of a Unix socket's address, its final NUL among them
