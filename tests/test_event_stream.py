"""The one event stream (issue 22): a run's events in the state, in order, and `agentos
events` following them; on SQLite and on PostgreSQL (issue 35)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Lines, add_agent, make_repo, needs_tmux, wait_until

from agentos.run.events import read_events
from agentos.run.orchestrator import start_run
from agentos.run.store import RunStore


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_a_run_writes_its_events_to_the_stream_in_order(
    cli: Any, ws: Any, tmp_path: Path, backend: str
) -> None:
    add_agent(ws, tmp_path, "writer", "echo hi > hi.txt\n")
    ws.settings_file.write_text("run: {guardian: false}\n")
    repo = make_repo(tmp_path / "repo")

    report = start_run(ws, "writer-task", repo, force=True)

    store = RunStore(ws)
    try:
        stored = store.events_after(0, run=report.run_id)
    finally:
        store.close()
    in_file, _ = read_events(ws.state_dir / "logs" / report.run_id / "events.jsonl")
    assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert [(e["kind"], e["message"]) for e in stored] == [
        (str(e.kind), e.message) for e in in_file
    ]
    statuses = [e.get("status") for e in stored if e["kind"] == "phase"]
    assert statuses[0] == "running" and statuses[-1] == "succeeded"
    assert any(e.get("agent") == "writer" and e.get("status") == "passed" for e in stored)
    shown = [
        json.loads(line)
        for line in cli("events", "--run", report.run_id, "--json").stdout.splitlines()
    ]
    assert shown == stored


def test_events_follow_prints_a_new_event_as_it_is_written(ws: Any, backend: str) -> None:
    store = RunStore(ws)
    store.record_event("test", "note", "before the follower")
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "events", "--follow"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = Lines(follower.stdout)
    shown: list[str] = []

    def following() -> bool:  # it starts at the end: it is up once it prints a new event
        store.record_event("test", "note", "are you there?", run="r0")
        line = lines.poll(timeout=0.5)
        shown.extend([line] if line else [])
        return bool(shown)

    with follower:  # closes its pipe
        try:
            wait_until(following, timeout=60, what="the follower printing an event")
            store.record_event("test", "note", "written while it follows", run="r1")
            shown += lines.until(lambda line: " r1 note: " in line, what="the new event")
        finally:
            follower.terminate()
            follower.wait(timeout=10)
            store.close()
    assert "r1 note: written while it follows" in shown[-1]
    assert all("r0 note: are you there?" in line for line in shown[:-1]), shown


def test_evals_evolutions_synthesis_and_workflows_write_to_the_stream(
    cli: Any, ws: Any, tmp_path: Path
) -> None:
    from conftest import write_package
    from test_evals import ADDER, SUMS, make_suite

    from agentos.hub.store import Hub
    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_task, open_execution

    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "adder", name="adder", files={"run.sh": ADDER}))
    )
    suite = make_suite(tmp_path / "sums", SUMS)
    assert cli("eval", "run", str(suite), "--agent", "adder").returncode == 0
    workflow = WorkflowDefinition.model_validate(
        {"id": "w", "name": "W", "phases": [{"id": 1, "name": "a", "description": "A"}]}
    )
    execution = open_execution(ws, workflow, tmp_path, {})
    create_task(ws, "Fix the parser in parse.py", 1, execution_id=execution)

    out = cli("events", "--json")
    found = [json.loads(line) for line in out.stdout.splitlines()]
    sources = {e["source"] for e in found}
    assert {"eval", "workflow"} <= sources
    assert any(e["source"] == "eval" and "composite 0.75" in e["message"] for e in found)
    assert any(e["source"] == "workflow" and e.get("status") == "pending" for e in found)
