"""Many machines, one state on PostgreSQL (issue 35): two workspaces standing for two hosts
share a database (gc on one spares the other's live run, a cancel from one stops it); a
server killed in the middle of a run; a SQLite workspace migrated into an empty database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, agent_wrote, git, make_repo, needs_tmux, tmux_sessions, wait_until

from agentos.receipts import write_receipt
from agentos.run import control
from agentos.run.orchestrator import RunOptions
from agentos.run.store import AgentStatus, RunStatus, RunStore
from agentos.state import sqlite
from agentos.workflows.store import TaskStatus, WorkflowStore
from agentos.workspace.layout import Workspace, init_workspace

LONGHAUL = "echo underway > progress.txt\nsleep 120\n"


@needs_tmux
def test_two_hosts_share_a_state_gc_on_one_spares_the_others_live_run_and_a_cancel_stops_it(
    cli: Any,
    ws: Workspace,
    tmp_path: Path,
    pg_url: str,
    tmux_socket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beta_ws, _ = init_workspace(tmp_path / "beta")
    beta_ws.settings_file.write_text("run: {guardian: false}\n")
    add_agent(ws, tmp_path, "longhaul", LONGHAUL)
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv("AGENTOS_HOST_ID", "alpha")
    run_id, _ = control.start_detached(ws, "longhaul-task", repo, RunOptions(force=True))
    wait_until(
        lambda: (
            control.status(ws, run_id).status is RunStatus.RUNNING
            and agent_wrote(ws, "longhaul", "progress.txt", "underway\n")
        ),
        what="the agent at work on alpha",
    )
    sessions = tmux_sessions(tmux_socket)
    beta = {"AGENTOS_HOST_ID": "beta"}

    gc = cli("gc", "--json", env=beta, workspace=beta_ws.root)
    listed = cli("runs", "list", env=beta, workspace=beta_ws.root).stdout.splitlines()
    logs = cli("runs", "logs", run_id, env=beta, workspace=beta_ws.root)
    diff = cli("runs", "diff", run_id, env=beta, workspace=beta_ws.root)
    spared = control.status(ws, run_id)
    cancel = cli("runs", "cancel", run_id, "--json", env=beta, workspace=beta_ws.root)
    wait_until(lambda: not control.detached_running(ws, run_id), what="alpha's run to end")
    ended = control.status(ws, run_id)

    assert json.loads(gc.stdout) == {
        "aborted_runs": [], "killed_sessions": [], "removed_worktrees": [],
        "saved_commits": [], "problems": [],
    }  # fmt: skip
    assert [line.split()[:4] for line in listed] == [
        ["run", "status", "host", "agents"],
        [run_id, "running", "alpha", "longhaul"],
    ]
    assert (logs.returncode, logs.stderr) == (
        2,
        f"error: run {run_id} runs on host alpha, not this one (beta): its agents' logs are "
        "there\n",
    )
    assert (diff.returncode, diff.stderr) == (
        2,
        f"error: run {run_id} runs on host alpha, not this one (beta): review and merge it there\n",
    )
    assert (spared.status, spared.host, len(sessions)) == (RunStatus.RUNNING, "alpha", 1)
    assert json.loads(cancel.stdout) == {"run": run_id, "status": "cancelled"}, cancel.stderr
    assert (ended.status, ended.cancel_requested) == (RunStatus.CANCELLED, "beta")
    assert [(a.agent, a.status, a.host) for a in ended.agents] == [
        ("longhaul", AgentStatus.CANCELLED, "alpha")
    ]
    assert git(repo, "show", f"agentos/{run_id}/longhaul:progress.txt") == "underway"
    assert tmux_sessions(tmux_socket) == []


@needs_tmux
@pytest.mark.process
def test_a_server_killed_mid_run_leaves_the_agents_work_on_its_branch_and_a_clear_message(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    from _postgres import Server, bindir

    programs = bindir()
    assert programs is not None
    server = Server(programs)  # a server of its own: this one is killed
    try:
        url = server.url(server.database())
        add_agent(ws, tmp_path, "longhaul", LONGHAUL)
        repo = make_repo(tmp_path / "repo")
        env = {
            **os.environ,
            "AGENTOS_STATE_URL": url,
            "AGENTOS_STATE_RETRY": "1",  # seconds a lost connection is retried
            "AGENTOS_HOST_SILENT_AFTER": "3",  # a heartbeat every half second
        }
        run = subprocess.Popen(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "run",
             "longhaul-task", "--force", "--repo", str(repo)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        with run:
            wait_until(
                lambda: agent_wrote(ws, "longhaul", "progress.txt", "underway\n"),
                what="the agent at work",
            )
            server.stop()
            out, err = run.communicate(timeout=120)
    finally:
        server.remove()
    run_id = next(ws.logs_dir.iterdir()).name
    first = out.splitlines()[0].replace(str(server.root), "SERVER")
    assert run.returncode == 1, out + err
    assert re.fullmatch(
        rf"run {run_id}: failed — the state was lost mid-run \(postgresql://postgres@/t_\w+\?"
        r"host=SERVER: the connection was lost and could not be made again within 1 s \(.+\) "
        r"\(is the server running\? AGENTOS_STATE_RETRY sets how long AgentOS retries\)\); the "
        r"run stopped its agents, and their work is kept on their branches; branches kept: "
        rf"agentos/{run_id}/longhaul; the run's final receipt could not be written \(.+\)",
        first,
    ), first
    assert git(repo, "show", f"agentos/{run_id}/longhaul:progress.txt") == "underway"
    assert tmux_sessions(tmux_socket) == []
    assert not (ws.worktrees_dir / run_id).exists()


def _fill(ws: Workspace) -> None:
    """A SQLite workspace's history: runs with agents and events, an intervention, an
    execution with tasks (one a duplicate) and a result, and 100 receipts."""
    store = RunStore(ws)
    try:
        for n in range(3):
            run_id = f"20260101-00000{n}-aaaaa{n}"
            store.create(run_id, f"request {n}", ws.root)
            store.add_agent(run_id, "coder", "1.0.0", branch=f"agentos/{run_id}/coder")
            store.record_event("run", "phase", "run: running", run=run_id, seq=1)
            store.update_agent(run_id, "coder", status=AgentStatus.PASSED, gate={"passed": True})
            store.update(run_id, status=RunStatus.SUCCEEDED, options={"merge": True})
        store.record_intervention("20260101-000000-aaaaa0", "coder", "nudge", "quiet", 1.0)
    finally:
        store.close()
    flows = WorkflowStore(ws)
    try:
        flows.create_execution("e1", {"id": "wf"}, "/repo", {"goal": "x"})
        first = flows.add_task("e1", 1, "Add unit tests for parse_date", creator="sdk")
        flows.add_task("e1", 1, "Write unit tests covering parse_date", creator="sdk")
        flows.add_task("e1", 2, "Fix the timezone bug", creator="sdk")
        flows.set_task(first.id, TaskStatus.DONE, run_id="20260101-000000-aaaaa0")
        flows.record_result("e1", first.id, "done", True, "passed")
    finally:
        flows.close()
    for n in range(100):
        write_receipt(ws, "note", {"n": n}, run_id=f"20260101-00000{n % 3}-aaaaa{n % 3}")


def test_a_workspace_migrates_into_an_empty_database_once_and_reads_the_same_there(
    cli: Any, ws: Workspace, pg_server: Any
) -> None:
    _fill(ws)
    target = pg_server.database(migrated=False)
    url = pg_server.url(target)
    shown = f"postgresql://postgres@/{target}?host={pg_server.root}"
    views = [
        ("runs", "list", "--json"),
        ("events", "--json"),
        ("executions", "show", "e1", "--json"),
        ("receipts", "show", "42"),
        ("guardian", "status", "--json"),
    ]
    before = [cli(*v).stdout for v in views]
    listed = json.loads(cli("receipts", "list", "--json").stdout)
    source = sqlite.connect(ws.state_db)
    terms, counts, events = source.execute(
        "SELECT (SELECT COUNT(*) FROM task_terms), (SELECT COUNT(*) FROM task_term_counts), "
        "(SELECT COUNT(*) FROM events)"
    ).fetchall()[0]
    source.close()

    migrated = cli("state", "migrate", "--to", url)
    on_postgres = {"AGENTOS_STATE_URL": url}
    after = [cli(*v, env=on_postgres).stdout for v in views]
    verified = cli("receipts", "verify", env=on_postgres)
    moved = json.loads(cli("receipts", "list", "--json", env=on_postgres).stdout)
    write_receipt_there = cli("route", "fix the lint errors in the parser", env=on_postgres)
    still = cli("receipts", "verify", env=on_postgres)
    again = cli("state", "migrate", "--to", url)

    assert (migrated.returncode, migrated.stdout) == (
        0,
        f"migrated to {shown}: runs 3, run_agents 3, interventions 1, executions 1, tasks 3, "
        f"task_terms {terms}, task_term_counts {counts}, task_embeddings 0, results 1, "
        f"events {events}, receipts 100, receipts_marks 2\n"
        "the receipt chain verifies there (100 receipts, hashes, links and MACs); set state: "
        f"{shown} in agentos.yaml (or AGENTOS_STATE_URL) to use it\n",
    ), migrated.stderr
    assert after[:4] == before[:4]
    assert json.loads(after[4])["interventions"] == json.loads(before[4])["interventions"]
    assert moved["receipts"] == [{**r, "path": None} for r in listed["receipts"]]
    assert verified.stdout == "receipts verified: 100 receipts, chain intact\n"
    assert "receipt: 00000101" in write_receipt_there.stdout
    assert still.stdout == "receipts verified: 101 receipts, chain intact\n"
    assert (again.returncode, again.stderr) == (
        2,
        f"error: {shown}: already holds AgentOS state (runs 3, run_agents 3, interventions 1, "
        f"executions 1, tasks 3, task_terms {terms}, task_term_counts {counts}, results 1, "
        f"events {events}, receipts 101, receipts_marks 2): migrate into an empty database (a "
        "new one: createdb -O USER DB)\n",
    )


def test_a_migration_whose_chain_does_not_verify_there_leaves_the_target_empty(
    cli: Any, ws: Workspace, pg_server: Any
) -> None:
    for n in range(3):
        write_receipt(ws, "note", {"n": n})
    edited = ws.receipts_dir / "00000002.txt"
    edited.write_text(edited.read_text().replace("n: 1", "n: 5"))
    target = pg_server.database(migrated=False)

    out = cli("state", "migrate", "--to", pg_server.url(target))

    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        f"error: postgresql://postgres@/{target}?host={pg_server.root}: the receipts do not "
        "verify where they were copied, so nothing was migrated (`agentos receipts verify` "
        "here says what is wrong): 00000002: changed after it was written (content does not "
        "match its sha256)\n"
    )
    counts = pg_server.sql(
        "SELECT (SELECT COUNT(*) FROM runs) + (SELECT COUNT(*) FROM receipts)", database=target
    )
    assert counts == [(0,)]


def test_a_server_back_within_the_retry_window_takes_the_writes_made_while_it_was_away(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event and a receipt written while the server restarts (the store's connection
    broken by it): each is retried, the connection made again, until the server is back,
    and lands once."""
    import threading

    from _postgres import Server, bindir

    from agentos.receipts import list_receipts, verify_receipts

    programs = bindir()
    assert programs is not None
    server = Server(programs)
    try:
        monkeypatch.setenv("AGENTOS_STATE_URL", server.url(server.database()))
        monkeypatch.setenv("AGENTOS_STATE_RETRY", "60")
        store = RunStore(ws)
        try:
            store.create("r1", "request", ws.root)
            write_receipt(ws, "note", {"n": 1})
            server.stop("fast")  # every client's connection cut
            back = threading.Thread(target=server.start)
            back.start()  # pg_ctl -w: it answers again in a second or so
            store.record_event("run", "note", "written while the server was away", run="r1")
            write_receipt(ws, "note", {"n": 2})
            back.join(timeout=60)
            events = [e["message"] for e in store.events_after(0, run="r1")]
        finally:
            store.close()
        report = verify_receipts(ws)
        receipts = [(r.id, r.kind) for r in list_receipts(ws)]
    finally:
        server.remove()
    assert events == ["written while the server was away"]
    assert receipts == [("00000001", "note"), ("00000002", "note")]
    assert (report.ok, report.receipts, report.problems) == (True, 2, ())
