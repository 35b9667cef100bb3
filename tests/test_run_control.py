"""A run as callers see it through the library (agentos.run.control, agentos.run.events): its
events as it goes, its status before it is recorded, and cancelling it at any point."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import add_agent, make_repo, needs_tmux, tmux_sessions, wait_until

from agentos.errors import BadInput, NotFound
from agentos.run import control
from agentos.run.events import EventKind, RunEvent, read_events
from agentos.run.orchestrator import RunOptions, start_run
from agentos.run.store import AgentStatus, RunStatus, process_start
from agentos.workspace.files import RunFiles
from agentos.workspace.layout import Workspace


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# target\n"})


def fake_background_run(ws: Workspace, run_id: str, argv: list[str]) -> subprocess.Popen[bytes]:
    """What start_detached leaves before the run's process records it: the start file and
    the pid of a real process (here one that never records anything)."""
    files = RunFiles.of(ws, run_id)
    files.logs.mkdir(parents=True)
    spec = {"request": "fix it", "repo": "/somewhere", "created_at": time.time()}
    files.start_file.write_text(json.dumps(spec))
    proc = subprocess.Popen(argv)
    files.pid_file.write_text(f"{proc.pid} {process_start(proc.pid)}\n")
    return proc


@needs_tmux
def test_a_runs_events_tell_its_phases_and_each_agents_steps_in_order(
    ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "writer", "echo done > out.txt\n")
    heard: list[RunEvent] = []

    report = start_run(ws, "writer-task", repo, force=True, on_event=heard.append)

    assert report.status is RunStatus.SUCCEEDED, report.message
    written, offset = read_events(RunFiles.of(ws, report.run_id).events)
    assert [e.as_dict() for e in written] == [e.as_dict() for e in heard]
    assert [e.seq for e in written] == list(range(1, len(written) + 1))
    phases = [e.status for e in written if e.kind is EventKind.PHASE]
    assert phases == ["running", "merging", "succeeded"]
    steps = [(e.agent, e.status) for e in written if e.kind is EventKind.AGENT]
    assert steps == [("writer", "running"), ("writer", "gating"), ("writer", "passed")]
    # A follower asks from where it stopped: nothing new once the run ended.
    assert control.events(ws, report.run_id, offset) == ([], offset)


def test_events_are_read_whole_lines_only_and_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = {"run": "r", "seq": 1, "at": 1.0, "kind": "note", "message": "hello"}
    path.write_text(json.dumps(good) + "\nnot json\n" + json.dumps({**good, "seq": 2})[:20])

    events, offset = read_events(path)

    assert [e.message for e in events] == ["hello"]
    assert offset == len(json.dumps(good)) + 1 + len("not json\n")  # the torn line waits
    assert read_events(tmp_path / "missing.jsonl", 7) == ([], 7)


def test_a_background_run_not_recorded_yet_is_starting_and_cancelling_it_ends_it(
    ws: Workspace,
) -> None:
    proc = fake_background_run(
        ws, "run-early", [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    try:
        before = control.status(ws, "run-early")
        assert (before.status, before.request) == (RunStatus.STARTING, "fix it")

        assert control.cancel(ws, "run-early", wait=10) is RunStatus.CANCELLED

        assert proc.wait(10) == -15  # SIGTERM
        after = control.status(ws, "run-early")
        assert (after.status, after.message) == (
            RunStatus.CANCELLED,
            "cancelled before it started",
        )
    finally:
        proc.kill()


def test_a_background_run_whose_process_died_unrecorded_failed_with_its_last_words(
    ws: Workspace,
) -> None:
    proc = fake_background_run(ws, "run-dead", [sys.executable, "-c", "pass"])
    proc.wait()
    RunFiles.of(ws, "run-dead").orchestrator_log.write_text("starting\nerror: no tmux here\n")

    record = control.status(ws, "run-dead")

    assert (record.status, record.message) == (
        RunStatus.FAILED,
        "the run's process ended before the run started: error: no tmux here",
    )
    with pytest.raises(BadInput, match="already failed"):
        control.cancel(ws, "run-dead")


@pytest.mark.parametrize("run_id", ["no-such-run", "../../etc", "a/b", ""])
def test_an_unknown_or_path_like_run_id_is_not_found(ws: Workspace, run_id: str) -> None:
    with pytest.raises(NotFound):
        control.status(ws, run_id)


@needs_tmux
def test_a_live_run_cancelled_through_the_library_keeps_its_work(
    ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "longhaul", "echo underway > progress.txt\nsleep 120\n")

    run_id, _log = control.start_detached(ws, "longhaul-task", repo, RunOptions(force=True))
    wait_until(
        lambda: (
            control.status(ws, run_id).status is RunStatus.RUNNING
            and (ws.worktrees_dir / run_id / "longhaul" / "progress.txt").exists()
        ),
        what="the agent at work",
    )

    assert control.cancel(ws, run_id) is RunStatus.CANCELLED

    record = control.status(ws, run_id)
    assert [(a.agent, a.status) for a in record.agents] == [("longhaul", AgentStatus.CANCELLED)]
    assert tmux_sessions(tmux_socket) == []
    events, _ = control.events(ws, run_id)
    assert [e.status for e in events if e.kind is EventKind.PHASE][-1] == "cancelled"
    assert [(e.agent, e.status) for e in events if e.kind is EventKind.AGENT][-1] == (
        "longhaul",
        "cancelled",
    )
