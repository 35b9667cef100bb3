"""The reaper of one remote attempt, on its node: ends the agent when the driver's lease lapses.

Ray ends a job's worker processes when its driver dies (a SIGKILL included), but not what
they started: an agent runs in a tmux server, which outlives the worker that started it.
So each remote attempt runs on a tmux socket of its own, and before it starts, its worker
starts this process (detached: a session of its own, not the worker's child) with a lease
file. The worker renews the lease every second while it lives, which is as long as the
driver's job lives. When the lease is older than its lapse, the reaper ends the attempt as
``agentos gc`` would: the agent's process group and its tmux server, a gate check left
running, control groups whose owner died; then the attempt's secret files and its
worktree. When the attempt ends normally its worker deletes the lease, and the reaper
exits with nothing to do.

``python -m agentos.cluster.reaper LEASE`` (the lease is JSON, see :class:`Lease`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agentos.shared.fs import atomic_write

POLL = 0.5  # seconds between looks at the lease


@dataclass(frozen=True)
class Lease:
    """What the reaper of an attempt ends, written by its worker (and renewed by touch)."""

    lapse: float  # seconds without renewal after which the attempt is ended
    socket: str  # its tmux socket (-L)
    pane: int | None  # the pane's process group, once the agent started
    check_pid: str  # the file holding the running gate check's process group
    run_dir: str  # its run files (its env file holds secrets)
    worktree: str
    cache: str  # the cache clone the worktree belongs to

    def write(self, path: Path) -> None:
        atomic_write(path, json.dumps(asdict(self)))


def start(lease: Path) -> None:
    """Start the reaper of ``lease``, detached from this process (and its process group,
    and its death)."""
    subprocess.run(
        [sys.executable, "-m", "agentos.cluster.reaper", str(lease)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        start_new_session=True,
        timeout=30,
    )  # returns at once: the reaper forks and its first process exits


def watch(lease: Path) -> str:
    """Until the lease is gone (the attempt ended: "released") or lapsed ("reaped")."""
    while True:
        try:
            age = time.time() - lease.stat().st_mtime
            data = Lease(**json.loads(lease.read_text()))
        except (OSError, ValueError, TypeError):
            if not lease.exists():
                return "released"
            time.sleep(POLL)
            continue
        if age > data.lapse:
            reap(data)
            lease.unlink(missing_ok=True)
            return "reaped"
        time.sleep(POLL)


def reap(data: Lease) -> None:
    """End everything of the attempt and remove its files (each step whatever the others
    did)."""
    from agentos.sandbox.limits import reap_orphans
    from agentos.shared.process import kill_group

    if data.pane:
        kill_group(data.pane)
    subprocess.run(
        ["tmux", "-L", data.socket, "kill-server"], capture_output=True, check=False, timeout=30
    )
    try:
        pgid = int(Path(data.check_pid).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pgid = 0
    if pgid > 1:
        kill_group(pgid)
    reap_orphans()
    shutil.rmtree(data.run_dir, ignore_errors=True)
    shutil.rmtree(data.worktree, ignore_errors=True)
    subprocess.run(["git", "-C", data.cache, "worktree", "prune"], capture_output=True, check=False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m agentos.cluster.reaper LEASE", file=sys.stderr)
        return 2
    if os.fork():  # the worker waits for this first process only
        return 0
    os.setsid()
    watch(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
