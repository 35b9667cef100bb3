"""Runs as a caller sees them: start one in the background, ask where it is, follow its
events, cancel it. The CLI and the MCP server (and a dashboard, an SDK) go through these;
:func:`agentos.run.orchestrator.start_run` runs one in the calling process.

A background run is a new Python process running :mod:`agentos.run.detached`, which reads
how the run was asked for from the run's ``start.json`` and calls ``start_run``. Until
its orchestrator records the run in state.db (within a second or so), :func:`status`
says ``starting`` while the process lives, and ``failed`` (with the end of its log) once
it ended without recording it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import closing, suppress
from dataclasses import asdict
from pathlib import Path

from agentos.errors import BadInput, NotFound, OperationFailed, RequestBlocked, check_request
from agentos.run.events import RunEvent, read_events
from agentos.run.preflight import check_agent, check_repo
from agentos.run.store import (
    ACTIVE,
    RunRecord,
    RunStatus,
    RunStore,
    new_run_id,
    pid_alive,
    process_start,
)
from agentos.run.values import RunOptions, tail
from agentos.shared.fs import atomic_write, write_new
from agentos.state.host import silent_after
from agentos.workspace.files import RunFiles
from agentos.workspace.layout import Workspace

LOG_TAIL = 2000
# A run id names folders: a plain name, never a path.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def start_detached(
    ws: Workspace,
    request: str,
    repo: Path,
    options: RunOptions | None = None,
    *,
    supervisor: str | None = None,
    dispatch: str | None = None,
) -> tuple[str, Path]:
    """Start a run in a background process; returns its id and the process's log.

    What would stop the run at once stops it here, where the caller sees it: a repository
    the run cannot work on, an agent not installed, and a request the interview blocks
    (:class:`RequestBlocked`, with the questions), unless forced. ``supervisor`` names
    what :func:`~agentos.run.orchestrator.start_run` gets as ``supervise``, as
    ``"module:function"`` (a function cannot be handed to another process), e.g.
    ``"agentos.guardian.daemon:ensure_running"``. ``dispatch`` names, so, a function of
    the workspace that returns what ``start_run`` gets as ``dispatch`` (the cluster's:
    ``agentos.cluster.RAY_DISPATCH``).
    """
    options = options or RunOptions()
    check_request(request)
    repo = repo.expanduser().resolve()
    check_repo(repo)
    check_agent(ws, options.agent)
    if not options.force:
        from agentos.interview.engine import interview_in

        result = interview_in(ws, request, rewrite=False)
        if not result.passed:
            questions = [f"{q.axis}: {q.text}" for q in result.questions]
            raise RequestBlocked(
                f"the request is too vague to start (ambiguity {result.ambiguity:.3f}); "
                "answer these and run again, or use --force: " + " ".join(questions),
                questions,
            )
    run_id = options.run_id or new_run_id()
    files = RunFiles.of(ws, run_id)
    files.logs.mkdir(parents=True, exist_ok=True)
    spec = {
        "workspace": str(ws.root),
        "request": request,
        "repo": str(repo),
        "options": {**asdict(options), "run_id": run_id},
        "supervisor": supervisor,
        "dispatch": dispatch,
        "created_at": time.time(),
        "starter": [os.getpid(), process_start(os.getpid())],
    }
    write_new(files.start_file, json.dumps(spec), mode=0o600)
    with files.orchestrator_log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentos.run.detached", str(files.start_file)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    atomic_write(files.pid_file, f"{proc.pid} {process_start(proc.pid) or ''}\n")
    return run_id, files.orchestrator_log


def detached_running(ws: Workspace, run_id: str) -> bool:
    """Whether the background process :func:`start_detached` started for ``run_id`` still
    runs. False once it has ended, and when nothing records it."""
    try:
        pid, _, started = RunFiles.of(ws, run_id).pid_file.read_text().partition(" ")
        return pid_alive(int(pid), started.strip() or None)
    except (OSError, ValueError):
        return False


def status(ws: Workspace, run_id: str) -> RunRecord:
    """Where run ``run_id`` (or the one run whose id contains it) is: its record in
    state.db; for a background run not recorded yet, ``starting`` while its process runs
    and ``failed`` (with the last line of its log) once the process ended without
    recording it. :class:`NotFound` when no run has that id."""
    store = RunStore(ws)
    try:
        try:
            return store.get(run_id)
        except NotFound:
            if not RUN_ID.fullmatch(run_id):
                raise
            files = RunFiles.of(ws, run_id)
            spec = _start_spec(files)
            if spec is None:
                raise
            if detached_running(ws, run_id) or _starter_writing(files, spec):
                return _unrecorded(run_id, spec, RunStatus.STARTING, None)
            try:  # recorded just before its process ended?
                return store.get(run_id)
            except NotFound:
                if files.cancelled.exists():
                    return _unrecorded(
                        run_id, spec, RunStatus.CANCELLED, "cancelled before it started"
                    )
                lines = [x.strip() for x in log_tail(ws, run_id).splitlines() if x.strip()]
                why = lines[-1] if lines else "it said nothing"
                return _unrecorded(
                    run_id,
                    spec,
                    RunStatus.FAILED,
                    f"the run's process ended before the run started: {why}",
                )
    finally:
        store.close()


def cancel(ws: Workspace, run_id: str, *, wait: float = 30.0) -> RunStatus:
    """Cancel a live run: its orchestrator tears down (the agents' work is kept on their
    branches); the status it ended with. A run whose orchestrator is gone is aborted by
    gc. :class:`BadInput` when the run already ended; :class:`OperationFailed` when it
    did not stop within ``wait`` seconds. Returns once the orchestrator's process ended
    (sessions ended, work committed, worktrees removed). A background run still starting
    is stopped before it records anything. Where the state is shared, another host's run is
    asked to cancel, and its host cancels it (see :mod:`agentos.run.liveness`)."""
    record = status(ws, run_id)
    if record.status is RunStatus.STARTING:
        return _cancel_starting(ws, record.id, wait)
    if record.status not in ACTIVE:
        raise BadInput(f"run {record.id} is already {record.status}", field="run")
    store = RunStore(ws)
    try:
        if not store.local(record):
            return _cancel_remote(store, record, wait)
        if pid_alive(record.pid, record.pid_start):
            os.kill(record.pid or 0, signal.SIGTERM)
            deadline = time.monotonic() + wait
            # Until its orchestrator is gone: the run's status changes before teardown ends.
            while time.monotonic() < deadline and (
                store.get(record.id).status in ACTIVE or pid_alive(record.pid, record.pid_start)
            ):
                time.sleep(0.1)
        else:
            from agentos.run.gc import collect_garbage

            collect_garbage(ws)
        now = store.get(record.id).status
    finally:
        store.close()
    if now in ACTIVE:
        raise OperationFailed(f"run {record.id} did not stop within {wait:g}s")
    return now


def _cancel_remote(store: RunStore, record: RunRecord, wait: float) -> RunStatus:
    """Ask the host that runs ``record`` to cancel it, and wait (woken by the run's events)
    until it ended. A silent host's run is aborted by gc, once it has been silent long
    enough (:func:`agentos.state.host.silent_after`)."""
    store.request_cancel(record.id)
    deadline = time.monotonic() + wait
    following = store.follow(
        0, run=record.id, poll=0.2, limit=1000, stop=lambda: time.monotonic() > deadline
    )
    with closing(following):
        for _ in following:
            if store.get(record.id).status not in ACTIVE:
                break
    now = store.get(record.id).status
    if now in ACTIVE:
        raise OperationFailed(
            f"run {record.id} runs on host {record.host}, which was asked to cancel it and did "
            f"not within {wait:g}s: is AgentOS there still running? (`agentos gc` on any "
            f"machine aborts its runs once it has been silent for {silent_after():g}s)"
        )
    return now


def events(ws: Workspace, run_id: str, offset: int = 0) -> tuple[list[RunEvent], int]:
    """The run's events written since byte ``offset`` of its events file, and the offset
    to ask from next time (see :mod:`agentos.run.events`)."""
    if not RUN_ID.fullmatch(run_id):
        raise BadInput(f"not a run id: {run_id!r}", field="run")
    return read_events(RunFiles.of(ws, run_id).events, offset)


def log_tail(ws: Workspace, run_id: str, limit: int = LOG_TAIL) -> str:
    """The end of a background run's log (what its process printed)."""
    return tail(RunFiles.of(ws, run_id).orchestrator_log, limit)


def _starter_writing(files: RunFiles, spec: dict[str, object]) -> bool:
    """Between starting the background process and writing its pid, the process that
    started it is still at work: the run is starting, not failed."""
    if files.pid_file.exists():
        return False
    starter = spec.get("starter")
    if not isinstance(starter, list) or len(starter) != 2:
        return False
    return pid_alive(int(starter[0]), str(starter[1]) if starter[1] else None)


def _start_spec(files: RunFiles) -> dict[str, object] | None:
    try:
        spec = json.loads(files.start_file.read_bytes())
    except (OSError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def _unrecorded(
    run_id: str, spec: dict[str, object], status: RunStatus, message: str | None
) -> RunRecord:
    created = spec.get("created_at")
    return RunRecord(
        id=run_id,
        request=str(spec.get("request", "")),
        repo=str(spec.get("repo", "")),
        target_branch=None,
        base_commit=None,
        status=status,
        decision=None,
        receipt=None,
        pid=None,
        created_at=float(created) if isinstance(created, int | float) else 0.0,
        started_at=None,
        ended_at=None,
        message=message,
    )


def _cancel_starting(ws: Workspace, run_id: str, wait: float) -> RunStatus:
    """End a background run that has not recorded itself yet: a marker says it was
    cancelled, and its process gets SIGTERM (if it recorded the run meanwhile, its
    orchestrator cancels the run as any other; if it died before handling the signal,
    gc aborts what it recorded)."""
    files = RunFiles.of(ws, run_id)
    files.cancelled.write_text("cancelled before it started\n")
    deadline = time.monotonic() + wait
    signalled = False
    while time.monotonic() < deadline:
        record = status(ws, run_id)
        if record.status not in (RunStatus.STARTING, *ACTIVE):
            return record.status
        if record.status is RunStatus.STARTING and not signalled:
            pid = _detached_pid(files)
            if pid is not None:  # else its starter is still writing it
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                signalled = True
        elif record.status in ACTIVE and not pid_alive(record.pid, record.pid_start):
            from agentos.run.gc import collect_garbage

            collect_garbage(ws)
        time.sleep(0.1)
    raise OperationFailed(f"run {run_id} did not stop within {wait:g}s")


def _detached_pid(files: RunFiles) -> int | None:
    try:
        pid, _, started = files.pid_file.read_text().partition(" ")
        return int(pid) if pid_alive(int(pid), started.strip() or None) else None
    except (OSError, ValueError):
        return None
