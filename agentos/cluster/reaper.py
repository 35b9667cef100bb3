"""The reaper of a node: ends a remote attempt when the driver's lease on it lapses.

Ray ends a job's worker processes when its driver dies (a SIGKILL included), but not what
they started: an agent runs in a tmux server, which outlives the worker that started it.
So each remote attempt runs on a tmux socket of its own, and its worker writes a lease
file (``.agentos/cluster/leases/<attempt>.json`` of the node's workspace) before the agent
starts, renewed every second while the worker lives, which is as long as the driver's job
lives. One reaper per node (started by the first attempt that finds none; detached: a
session of its own, not a worker's child) watches the leases: one older than its lapse
ends its attempt as ``agentos gc`` would (the agent's process group and its tmux server, a
gate check left running, control groups whose owner died), then removes the attempt's
secret files and its worktree. An attempt that ends normally deletes its lease. The
reaper exits after :data:`IDLE` seconds without a lease.

``python -m agentos.cluster.reaper LEASES`` (each lease is JSON, see :class:`Lease`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from agentos.shared.fs import atomic_write

POLL = 0.5  # seconds between looks at the leases
IDLE = 60.0  # seconds without a lease after which the reaper exits
LOCK = ".reaper.lock"  # in the leases folder: held by the reaper that runs


@dataclass(frozen=True)
class Lease:
    """What the reaper ends of an attempt, written by its worker (and renewed by touch)."""

    lapse: float  # seconds without renewal after which the attempt is ended
    socket: str  # its tmux socket (-L)
    pane: int | None  # the pane's process group, once the agent started
    check_pid: str  # the file holding the running gate check's process group
    run_dir: str  # its run files (its env file holds secrets)
    worktree: str
    cache: str  # the cache clone the worktree belongs to
    workspace: str = ""  # the node's, whose record of the attempt says it was aborted
    run_id: str = ""
    agent: str = ""

    def write(self, path: Path) -> None:
        atomic_write(path, json.dumps(asdict(self)))


def ensure_running(leases: Path) -> bool:
    """Start the node's reaper unless one holds the leases' lock; True when started. The
    caller writes its lease first (a reaper about to exit for want of one looks again)."""
    leases.mkdir(parents=True, exist_ok=True)
    fd = _try_lock(leases)
    if fd is None:
        return False
    os.close(fd)  # the reaper takes it itself (a second one started at once exits)
    first = subprocess.Popen(
        [sys.executable, "-m", "agentos.cluster.reaper", str(leases)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    threading.Thread(target=first.wait, daemon=True).start()  # it forks and exits at once
    return True


def _try_lock(leases: Path) -> int | None:
    fd = os.open(leases / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def watch(leases: Path) -> None:
    """Reap lapsed leases until none has been seen for :data:`IDLE` seconds."""
    fd = _try_lock(leases)
    if fd is None:
        return  # another reaper runs
    seen = time.monotonic()
    while True:
        found = list(leases.glob("*.json"))
        if found:
            seen = time.monotonic()
        for lease in found:
            try:
                check(lease)
            except Exception as exc:
                _log(f"{lease.name}: {type(exc).__name__}: {exc}")
        if time.monotonic() - seen > IDLE:
            os.close(fd)  # released first: an attempt that starts now starts another
            if not list(leases.glob("*.json")):
                return
            fd = _try_lock(leases)
            if fd is None:
                return
            seen = time.monotonic()
        time.sleep(POLL)


def check(lease: Path) -> str:
    """``reaped`` when the lease had lapsed (its attempt is ended and the lease removed),
    ``live`` when not, ``gone`` when it went meanwhile."""
    try:
        age = time.time() - lease.stat().st_mtime
        data = Lease(**json.loads(lease.read_text()))
    except (OSError, ValueError, TypeError):
        return "gone"
    if age <= data.lapse:
        return "live"
    reap(data)
    lease.unlink(missing_ok=True)
    return "reaped"


def reap(data: Lease) -> None:
    """End everything of the attempt and remove its files: each step whatever the others
    did (one that fails is written to the reaper's log, beside the leases)."""
    from agentos.sandbox.limits import reap_orphans
    from agentos.shared.process import kill_group

    def check_group() -> None:
        try:
            pgid = int(Path(data.check_pid).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if pgid > 1:
            kill_group(pgid)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("record", lambda: _record_aborted(data) if data.run_id and data.workspace else None),
        ("pane", lambda: kill_group(data.pane) if data.pane else None),
        ("tmux", lambda: _quiet(["tmux", "-L", data.socket, "kill-server"])),
        ("check", check_group),
        ("run files", lambda: _remove(Path(data.run_dir))),
        ("worktree", lambda: _remove(Path(data.worktree))),
        ("prune", lambda: _quiet(["git", "-C", data.cache, "worktree", "prune"])),
        ("control groups", reap_orphans),
    ]
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            _log(f"{data.socket}: {name}: {type(exc).__name__}: {exc}")


def _quiet(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, check=False, timeout=60)


def _remove(path: Path) -> None:
    """Remove a tree, its read-only folders too (an agent's worktree may hold them)."""

    def writable(func: Callable[..., object], name: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            func(name)

    shutil.rmtree(path, onerror=writable)


_LOG: Path | None = None


def _log(line: str) -> None:
    if _LOG is not None:
        with contextlib.suppress(OSError), _LOG.open("a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def _record_aborted(data: Lease) -> None:
    """The node's record of the attempt: aborted, as ``gc`` marks a run whose orchestrator
    died (the run's own record is its driver's)."""
    from agentos.errors import AgentOSError
    from agentos.run.store import UNFINISHED, AgentStatus, RunStatus, RunStore
    from agentos.workspace.layout import Workspace

    try:
        store = RunStore(Workspace(Path(data.workspace)))
    except AgentOSError:
        return
    try:
        store.update_agent(data.run_id, data.agent, status=AgentStatus.ABORTED)
        record = store.get(data.run_id)
        if not any(a.status in UNFINISHED for a in record.agents):
            store.update(data.run_id, status=RunStatus.ABORTED, ended_at=time.time())
    except AgentOSError:
        pass
    finally:
        store.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m agentos.cluster.reaper LEASES", file=sys.stderr)
        return 2
    if os.fork():  # the worker waits for this first process only
        return 0
    os.setsid()
    global _LOG
    _LOG = Path(argv[0]) / "reaper.log"
    watch(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
