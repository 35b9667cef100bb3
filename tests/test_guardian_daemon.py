"""The guardian as a process: start, stop, status, one per workspace, crashes survived."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _guardian_fixtures import configure, interventions, launch
from conftest import CliRunner, needs_tmux, wait_until

from agentos.guardian import daemon
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]


@pytest.fixture(autouse=True)
def no_guardian_left(ws: Workspace) -> Iterator[None]:
    """Whatever a test started, no guardian outlives it."""
    yield
    if daemon.status(ws)["running"]:
        daemon.stop(ws)


def pid_of(ws: Workspace) -> int:
    pid = daemon.status(ws)["pid"]
    assert isinstance(pid, int)
    return pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # reaped since kill(0)
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def blank(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def test_start_status_stop_through_the_cli(ws: Workspace, cli: CliRunner) -> None:
    out = cli("guardian", "status")
    assert (out.returncode, out.stdout) == (0, "guardian: not running\n")

    out = cli("guardian", "start")
    assert out.returncode == 0, out.stderr
    assert blank(out.stdout) == blank(
        f"guardian started (pid 1); log: {ws.logs_dir / 'guardian.log'}\n"
    )
    pid = pid_of(ws)
    assert (ws.state_dir / "guardian.pid").read_text() == f"{pid}\n"
    wait_until(lambda: daemon.status(ws)["last_cycle"], what="a first cycle")

    data = json.loads(cli("guardian", "status", "--json").stdout)
    assert data["running"] is True and data["pid"] == pid
    assert data["last_cycle"]["pid"] == pid and data["last_cycle"]["agents"] == 0
    assert (data["agents"], data["interventions"], data["interval"]) == ({}, [], 60)

    out = cli("guardian", "stop")
    assert (out.returncode, out.stdout) == (0, f"guardian stopped (pid {pid})\n")
    assert not alive(pid)
    assert not (ws.state_dir / "guardian.pid").exists()
    assert cli("guardian", "stop").stdout == "no guardian is running\n"


def test_a_second_start_is_refused(ws: Workspace, cli: CliRunner) -> None:
    assert cli("guardian", "start").returncode == 0
    pid = pid_of(ws)

    second = cli("guardian", "start")
    foreground = cli("guardian", "run", "--once")

    for out in (second, foreground):
        assert out.returncode == 2
        assert out.stderr.strip().endswith(f"guardian: a guardian is already running (pid {pid})")
        assert "Traceback" not in out.stderr
    assert pid_of(ws) == pid and alive(pid)


def test_concurrent_starts_leave_exactly_one_guardian(ws: Workspace) -> None:
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "guardian", "start"]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [(p.wait(60), p.communicate()) for p in procs]

    assert sorted(code for code, _ in results) == [0, 2, 2, 2]
    pid = pid_of(ws)
    for code, (_out, err) in results:
        if code == 2:
            assert "a guardian is already running" in err
    holders = [
        line
        for line in Path("/proc/locks").read_text().splitlines()
        if f" {os.stat(ws.state_dir / 'guardian.lock').st_ino} " in line.replace(":", " ")
    ]
    assert len(holders) == 1 and f" {pid} " in holders[0]


def test_ensure_running_starts_one_only_when_none_runs(ws: Workspace) -> None:
    assert daemon.ensure_running(ws) is True
    pid = pid_of(ws)
    assert daemon.ensure_running(ws) is False
    assert pid_of(ws) == pid


def test_a_stale_pidfile_is_recovered(ws: Workspace, cli: CliRunner) -> None:
    assert cli("guardian", "start").returncode == 0
    pid = pid_of(ws)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not daemon.status(ws)["running"], what="the lock freed")

    out = cli("guardian", "status")
    assert out.stdout.splitlines()[0] == f"guardian: not running (stale pidfile of pid {pid})"
    out = cli("guardian", "start")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"removed a stale pidfile (pid {pid} is gone)"
    assert pid_of(ws) != pid


def test_a_guardian_that_crashes_and_restarts_keeps_the_intervention_history(
    ws: Workspace, tmp_path: Path
) -> None:
    ws = configure(ws)
    agent = launch(ws, tmp_path, "hanger", "sleep 600\n")

    def acts() -> list[str]:
        return [a for _agent, a, _r in interventions(ws)]

    daemon.start(ws)
    wait_until(lambda: acts() == ["nudge"] or len(acts()) > 1, what="the first nudge")
    os.kill(pid_of(ws), signal.SIGKILL)  # a crash, right after the nudge
    wait_until(lambda: not daemon.status(ws)["running"])
    assert acts() == ["nudge"]

    daemon.start(ws)
    wait_until(lambda: "restart" in acts(), what="the restart")
    os.kill(pid_of(ws), signal.SIGKILL)  # and again, right after the restart
    wait_until(lambda: not daemon.status(ws)["running"])

    daemon.start(ws)
    wait_until(lambda: "kill" in acts(), what="the kill")

    # The third guardian did not nudge again where the first had, nor restart twice: the
    # history and the restart count are read from state.db.
    assert acts() == ["nudge", "restart", "nudge", "kill"]
    store = RunStore(ws)
    assert store.get(agent.run_id).agents[0].restarts == 1
    store.close()
    assert [i["action"] for i in daemon.status(ws)["interventions"]] == [
        "kill",
        "nudge",
        "restart",
        "nudge",
    ]


def test_a_deleted_workspace_ends_its_guardian(tmp_path: Path, cli: CliRunner) -> None:
    from agentos.workspace.layout import init_workspace

    other, _ = init_workspace(tmp_path / "doomed")
    configure(other, {"interval": 0.1})
    daemon.start(other)
    pid = pid_of(other)

    def removed() -> bool:  # (the guardian writes there until it notices: again until gone)
        shutil.rmtree(other.root, ignore_errors=True)
        return not other.root.exists()

    wait_until(removed, what="the workspace removed")
    wait_until(lambda: not alive(pid), what="the guardian to exit")


def test_a_guardian_started_for_runs_ends_once_no_agent_is_left(
    ws: Workspace, tmp_path: Path
) -> None:
    ws = configure(ws, {"interval": 0.1, "stuck_after": 600, "kill_after": 900})
    agent = launch(ws, tmp_path, "worker", "sleep 600\n")
    assert daemon.ensure_running(ws, idle_exit=0.5) is True
    pid = pid_of(ws)
    wait_until(
        lambda: (daemon.status(ws)["last_cycle"] or {}).get("cycles", 0) >= 10,
        what="ten cycles with a live agent",
    )
    assert alive(pid)  # busy: it stays

    store = RunStore(ws)
    store.update(agent.run_id, status="succeeded")
    store.close()

    wait_until(lambda: not alive(pid), what="the idle guardian to end")
    assert daemon.status(ws)["running"] is False
    assert not (ws.state_dir / "guardian.pid").exists()
