"""The guardian process: a cycle every interval, one guardian per workspace, a pidfile.

``run`` is the loop, in the foreground; ``start`` runs it in the background
(``agentos guardian run`` in its own session, output to ``.agentos/logs/guardian.log``);
``stop`` ends it with SIGTERM; ``status`` says whether it runs and what it last saw;
``ensure_running`` starts one when none runs (the orchestrator calls it at each run).

One guardian per workspace: the process holds an exclusive ``flock`` on
``.agentos/guardian.lock`` for as long as it lives, and only then writes its pid to
``.agentos/guardian.pid``. A second guardian cannot take the lock and refuses to start. A
guardian that crashes (even on SIGKILL) loses the lock with its life, so the pidfile it
leaves is recognised as stale and replaced by the next start. The intervention history
and what the last cycle saw are in state.db, so a new guardian carries on from there.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from agentos.errors import Conflict, OperationFailed
from agentos.guardian.interventions import Intervention, intervene
from agentos.guardian.monitor import Monitor, last_health
from agentos.guardian.policy import Action, Decision, decide
from agentos.guardian.store import GuardianStore
from agentos.run.store import RunStore, pid_running
from agentos.shared.fs import atomic_write
from agentos.shared.signals import handling
from agentos.workspace.layout import Workspace

log = logging.getLogger(__name__)

PIDFILE = "guardian.pid"
LOCKFILE = "guardian.lock"
LOCK_PATIENCE = 1.0  # seconds a starting guardian retries the lock (a status probe holds it)
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
IDLE_EXIT = 900.0  # seconds without a live agent before a run-started guardian ends


def pidfile(ws: Workspace) -> Path:
    return ws.state_dir / PIDFILE


def logfile(ws: Workspace) -> Path:
    return ws.logs_dir / "guardian.log"


# --- one cycle ----------------------------------------------------------------------------


@dataclass
class CycleReport:
    at: float
    agents: list[dict[str, Any]] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)
    next_interval: float = 60.0
    watched: int = 0  # live agents, including those not due this cycle

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "agents": self.agents,
            "interventions": [i.as_dict() for i in self.interventions],
            "next_interval": self.next_interval,
            "watched": self.watched,
        }


class Guardian:
    """Signals -> decisions -> interventions, for every live agent of one workspace."""

    def __init__(self, ws: Workspace, *, interval: float | None = None) -> None:
        self.ws = ws
        self.monitor = Monitor(ws, interval=interval)
        self.interval = self.monitor.settings.interval
        self.pid = os.getpid()
        self.started_at = time.time()

    def close(self) -> None:
        self.monitor.close()

    def cycle(self, *, now: float | None = None) -> CycleReport:
        """Observe every watched agent, decide, intervene. ``now`` is the cycle's clock
        (the wall clock unless given: tests step it instead of waiting)."""
        watched = self.monitor.watched()
        now = time.time() if now is None else now
        report = CycleReport(
            now,
            next_interval=min([self.interval, *(w.policy.interval for w in watched)]),
            watched=len(watched),
        )
        seen: list[tuple[Any, Decision]] = []
        for obs in self.monitor.observe(watched, now=now):
            decision = decide(obs.signals, obs.watched.policy)
            if decision.action is not Action.NONE:
                done = intervene(self.ws, self.monitor.sessions, self.monitor.store, obs, decision)
                report.interventions.append(done)
                log.info(
                    "%s %s (run %s): %s%s",
                    done.action,
                    done.agent,
                    done.run_id,
                    done.reason,
                    "" if done.ok else " [failed]",
                )
            seen.append((obs, decision))
            report.agents.append(
                {
                    "session": obs.signals.session,
                    "run": obs.signals.run_id,
                    "agent": obs.signals.agent,
                    "output_age": round(obs.signals.output_age, 1),
                    **decision.as_dict(),
                }
            )
        self.monitor.record(
            seen, watched, now=now, pid=self.pid, started_at=self.started_at, interval=self.interval
        )
        return report


# --- the process --------------------------------------------------------------------------


def run(
    ws: Workspace,
    *,
    interval: float | None = None,
    once: bool = False,
    idle_exit: float | None = None,
    on_cycle: Callable[[CycleReport], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the guardian here until SIGTERM/SIGINT (or ``stop``); one cycle with ``once``.

    With ``idle_exit``, the guardian ends after that many seconds without a live agent
    (the next run starts another). It always ends when its workspace is deleted. Raises
    :class:`Conflict` when another guardian runs for this workspace.
    """
    fd = _acquire(ws)
    guardian: Guardian | None = None
    stop = stop or threading.Event()
    try:
        atomic_write(pidfile(ws), f"{os.getpid()}\n")
        guardian = Guardian(ws, interval=interval)
        log.info("guardian %s watching %s every %ss", os.getpid(), ws.root, guardian.interval)
        busy_at = time.monotonic()
        with _stop_on_signal(stop):
            while True:
                if once:
                    report = guardian.cycle()
                else:
                    try:
                        report = guardian.cycle()
                    except Exception:  # the loop outlives a bad cycle (tmux, a busy db)
                        log.exception("guardian cycle failed; trying again next interval")
                        report = CycleReport(time.time(), next_interval=guardian.interval)
                if on_cycle is not None:
                    on_cycle(report)
                if report.watched:
                    busy_at = time.monotonic()
                elif idle_exit is not None and time.monotonic() - busy_at >= idle_exit:
                    log.info("no live agent for %ss: the guardian ends", idle_exit)
                    break
                if once or stop.wait(report.next_interval) or not ws.state_dir.is_dir():
                    break
    finally:
        if guardian is not None:
            guardian.close()
        if _read_pid(ws) == os.getpid():
            pidfile(ws).unlink(missing_ok=True)
        os.close(fd)


def start(
    ws: Workspace, *, idle_exit: float | None = None, timeout: float = START_TIMEOUT
) -> dict[str, Any]:
    """Start a background guardian; refuse when one runs; replace a stale pidfile."""
    running, pid = _holder(ws)
    if running:
        raise Conflict(f"a guardian is already running (pid {pid})", field="guardian")
    stale = pid
    pidfile(ws).unlink(missing_ok=True)
    out = logfile(ws)
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "guardian", "run"]
    if idle_exit is not None:
        argv += ["--idle-exit", str(idle_exit)]
    with out.open("ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=fh,
            cwd=ws.root,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while _read_pid(ws) != proc.pid:
        code = proc.poll()
        if code is not None:
            running, pid = _holder(ws)
            if running:
                raise Conflict(f"a guardian is already running (pid {pid})", field="guardian")
            raise OperationFailed(f"the guardian exited as it started (status {code}); see {out}")
        if time.monotonic() > deadline:
            proc.kill()
            raise OperationFailed(f"the guardian did not start within {timeout}s; see {out}")
        time.sleep(0.02)
    return {"pid": proc.pid, "log": str(out), "stale_pid": stale}


def stop(ws: Workspace, *, timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
    """Stop the background guardian (SIGTERM, then SIGKILL after ``timeout``)."""
    running, pid = _holder(ws)
    if not running:
        pidfile(ws).unlink(missing_ok=True)
        return {"stopped": False, "pid": None, "stale_pid": pid}
    if pid is None:
        raise OperationFailed(
            "a guardian holds the lock but has not written its pid yet; try again in a moment",
            file=pidfile(ws),
        )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _holder(ws)[0] and not pid_running(pid):
                pidfile(ws).unlink(missing_ok=True)
                return {"stopped": True, "pid": pid, "stale_pid": None, "signal": sig.name}
            time.sleep(0.02)
    raise OperationFailed(f"the guardian (pid {pid}) did not stop")


def ensure_running(ws: Workspace, *, idle_exit: float | None = IDLE_EXIT) -> bool:
    """Start a guardian unless one runs; True when this call started it.

    A guardian started here ends after ``idle_exit`` seconds without a live agent, so
    runs never leave one behind for good; the next run starts another.
    """
    if _holder(ws)[0]:
        return False
    try:
        start(ws, idle_exit=idle_exit)
    except Conflict:
        return False  # another caller started one first
    return True


def status(ws: Workspace, *, interventions: int = 20) -> dict[str, Any]:
    """Whether a guardian runs, what its last cycle saw, and the latest interventions."""
    running, pid = _holder(ws)
    last: dict[str, Any] | None = None
    recent: list[dict[str, Any]] = []
    if ws.state.shared or ws.state_db.exists():
        memory, store = GuardianStore(ws), RunStore(ws)
        try:
            last = memory.last_cycle()
            recent = [
                {
                    "id": i.id,
                    "run": i.run,
                    "agent": i.agent,
                    "action": i.action,
                    "reason": i.reason,
                    "receipt": i.receipt,
                    "at": i.at,
                }
                for i in store.interventions(interventions)
            ]
        finally:
            memory.close()
            store.close()
    return {
        "running": running,
        "pid": pid if running else None,
        "stale_pid": pid if not running else None,
        "pidfile": str(pidfile(ws)),
        "log": str(logfile(ws)),
        "interval": ws.settings.guardian.interval,
        "last_cycle": last,
        "agents": last_health(ws),
        "interventions": recent,
    }


# --- the lock and the pidfile -------------------------------------------------------------


def _try_lock(ws: Workspace) -> int | None:
    ws.state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(ws.state_dir / LOCKFILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _acquire(ws: Workspace) -> int:
    deadline = time.monotonic() + LOCK_PATIENCE
    while True:
        fd = _try_lock(ws)
        if fd is not None:
            return fd
        if time.monotonic() > deadline:
            raise Conflict(f"a guardian is already running (pid {_read_pid(ws)})", field="guardian")
        time.sleep(0.05)


def _holder(ws: Workspace) -> tuple[bool, int | None]:
    """(whether a guardian holds the lock, the pid in the pidfile)."""
    fd = _try_lock(ws)
    if fd is not None:
        os.close(fd)
        return False, _read_pid(ws)
    return True, _read_pid(ws)


def _read_pid(ws: Workspace) -> int | None:
    try:
        text = pidfile(ws).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stop_on_signal(stop: threading.Event) -> AbstractContextManager[None]:
    """SIGTERM and SIGINT end the loop after the current cycle."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    return handling(handler, signal.SIGTERM, signal.SIGINT)
