"""The stores, each test on both backends (issue 35): SQLite (state.db, the default) and a
real PostgreSQL server the suite starts (tests/_postgres.py). Runs and their agents,
events, interventions, workflow executions and results, the guardian's memory, and the
receipts chain: the same calls, the same answers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from agentos.errors import NotFound
from agentos.guardian.store import GuardianStore, Seen
from agentos.receipts import (
    list_receipts,
    load_receipt,
    read_receipt,
    verify_receipts,
    write_receipt,
)
from agentos.run.store import AgentStatus, RunStatus, RunStore
from agentos.workflows.store import ExecutionStatus, WorkflowStore
from agentos.workspace.layout import Workspace

pytestmark = pytest.mark.usefixtures("backend")


def test_a_run_and_its_agents_are_recorded_claimed_and_found_by_part_of_their_id(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_HOST_ID", "host-a")
    store = RunStore(ws)
    try:
        store.create("20260101-000000-aaaaaa", "first", ws.root)
        store.create("20260101-000001-bbbbbb", "second", ws.root)
        store.update("20260101-000000-aaaaaa", options={"merge": True}, message="m")
        store.add_agent("20260101-000000-aaaaaa", "coder", "1.0.0", branch="b", attempts=3)
        store.add_agent("20260101-000000-aaaaaa", "coder", "1.0.1")  # recorded afresh
        store.add_agent("20260101-000000-aaaaaa", "tester", "2.0.0")
        store.update_agent("20260101-000000-aaaaaa", "tester", status=AgentStatus.RUNNING)
        store.update_agent("20260101-000000-aaaaaa", "tester", usage={"tokens": 7})
        first = store.claim("20260101-000000-aaaaaa", (RunStatus.PENDING,), RunStatus.RUNNING)
        again = store.claim("20260101-000000-aaaaaa", (RunStatus.PENDING,), RunStatus.RUNNING)
        run = store.get("aaaaaa")
        listed = [r.id for r in store.list(limit=10)]
        active = [r.id for r in store.list(statuses=(RunStatus.PENDING,))]
        with pytest.raises(NotFound, match="no run '20260101'"):
            store.get("20260101")  # two runs match
    finally:
        store.close()
    assert (first, again) == (True, False)
    assert (run.id, run.status, run.message, run.options, run.host) == (
        "20260101-000000-aaaaaa",
        RunStatus.RUNNING,
        "m",
        {"merge": True},
        "host-a",
    )
    assert [
        (a.agent, a.version, a.branch, a.attempts, a.status, a.usage, a.host) for a in run.agents
    ] == [
        ("coder", "1.0.1", None, 0, AgentStatus.PENDING, None, "host-a"),
        ("tester", "2.0.0", None, 0, AgentStatus.RUNNING, {"tokens": 7}, "host-a"),
    ]
    assert listed == ["20260101-000001-bbbbbb", "20260101-000000-aaaaaa"]
    assert active == ["20260101-000001-bbbbbb"]


def test_events_are_read_in_order_after_an_id_of_one_run_or_all_and_followed(
    ws: Workspace,
) -> None:
    store = RunStore(ws)
    try:
        store.record_event("run", "phase", "one", run="r1", seq=1, status="running", at=1.0)
        store.record_event("guardian", "note", "two", at=2.0)
        store.record_event("run", "agent", "three", run="r2", seq=1, agent="a", at=3.0)
        everything = store.events_after(0)
        of_r2 = store.events_after(1, run="r2")
        last = store.last_event_id()
        follow = store.follow(None, poll=0.05)
        store.record_event("run", "note", "four", run="r1", seq=2, at=4.0)
        followed = next(follow)
        follow.close()
    finally:
        store.close()
    assert everything == [
        {"id": 1, "at": 1.0, "source": "run", "kind": "phase", "run": "r1", "seq": 1,
         "status": "running", "message": "one"},
        {"id": 2, "at": 2.0, "source": "guardian", "kind": "note", "message": "two"},
        {"id": 3, "at": 3.0, "source": "run", "kind": "agent", "run": "r2", "seq": 1,
         "agent": "a", "message": "three"},
    ]  # fmt: skip
    assert of_r2 == [everything[2]] and last == 3
    assert followed == [
        {"id": 4, "at": 4.0, "source": "run", "kind": "note", "run": "r1", "seq": 2,
         "message": "four"}
    ]  # fmt: skip


def test_an_intervention_counts_a_restart_and_tells_the_stream_in_one_transaction(
    ws: Workspace,
) -> None:
    store = RunStore(ws)
    try:
        store.create("r1", "request", ws.root)
        store.add_agent("r1", "coder", "1.0.0")
        nudge = store.record_intervention("r1", "coder", "nudge", "quiet", 10.0)
        restart = store.record_intervention("r1", "coder", "restart", "stuck", 20.0)
        store.link_intervention(restart, "00000007")
        agent = store.get("r1").agents[0]
        listed = [(i.id, i.action, i.receipt) for i in store.interventions()]
        counts = store.intervention_counts(["r1"])
        stream = [(e["source"], e["kind"], e["message"]) for e in store.events_after(0)]
    finally:
        store.close()
    assert (nudge, restart, agent.restarts) == (1, 2, 1)
    assert listed == [(2, "restart", "00000007"), (1, "nudge", None)]
    assert counts == {("r1", "coder"): {"nudge": (1, 10.0), "restart": (1, 20.0)}}
    assert stream == [
        ("guardian", "intervention", "guardian: nudge coder: quiet"),
        ("guardian", "intervention", "guardian: restart coder: stuck"),
    ]


def test_an_execution_ends_with_its_result_and_results_are_kept_in_order(ws: Workspace) -> None:
    store = WorkflowStore(ws)
    try:
        store.create_execution("e1", {"id": "wf"}, "/repo", {"goal": "x"})
        store.create_execution("e2", {"id": "wf"}, "/repo", {})
        task = store.add_task("e1", 1, "Fix the parser in parse.py", creator="sdk")
        one = store.record_result("e1", task.id, "found it", True, "checks passed")
        two = store.record_result("e1", None, "not quite", False, "RESULT.md missing")
        store.end_execution("e1", ExecutionStatus.STOPPED, {"summary": "found it"})
        ended = store.execution("e1")
        ids = [e.id for e in store.executions()]
        results = [(r.id, r.task, r.summary, r.validated) for r in store.results("e1")]
    finally:
        store.close()
    assert (one.id, two.id) == (1, 2)
    assert (ended.status, ended.result, ended.parameters) == (
        ExecutionStatus.STOPPED,
        {"summary": "found it"},
        {"goal": "x"},
    )
    assert ids == ["e2", "e1"]
    assert results == [(1, task.id, "found it", True), (2, None, "not quite", False)]


def _seen(session: str, health: str) -> Seen:
    return Seen(session, "r1", session, ("$",), 5, 100.0, None, 0, None, health, "none", "ok")


def test_each_hosts_guardian_keeps_its_own_memory_and_cycle_and_all_health_is_shown(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_HOST_ID", "host-a")
    a = GuardianStore(ws)
    monkeypatch.setenv("AGENTOS_HOST_ID", "host-b")
    b = GuardianStore(ws)
    try:
        a.record_cycle(
            [_seen("s-a", "working")], {"s-a"}, now=1.0, pid=11, started_at=0.0, interval=5
        )
        b.record_cycle(
            [_seen("s-b", "stuck")], {"s-b"}, now=2.0, pid=22, started_at=0.0, interval=5
        )
        a.record_cycle([], {"s-a"}, now=3.0, pid=11, started_at=0.0, interval=5)  # same guardian
        b.record_cycle([], set(), now=4.0, pid=33, started_at=0.0, interval=5)  # another one
        memory = (sorted(a.memory()), sorted(b.memory()))
        cycles = [
            (c["pid"], c["cycles"], c["agents"]) for c in (a.last_cycle(), b.last_cycle()) if c
        ]
        health = {s: h["health"] for s, h in a.health().items()}
    finally:
        a.close()
        b.close()
    assert memory == (["s-a"], [])
    assert cycles == [(11, 2, 1), (33, 1, 0)]
    assert health == {"s-a": "working"}


def test_receipts_are_written_verified_listed_and_read_back_the_same_on_either(
    ws: Workspace,
) -> None:
    first = write_receipt(ws, "route", {"decision": "route", "agents": ["a", "b"]}, request="x")
    second = write_receipt(ws, "run", {"status": "succeeded"}, run_id="r1")
    report = verify_receipts(ws)
    listed = [(r.id, r.kind, r.run_id) for r in list_receipts(ws)]
    of_r1 = [r.id for r in list_receipts(ws, "r1")]
    text = read_receipt(ws, "2")
    parsed = load_receipt(ws, "00000001")
    blanked = re.sub(r"[0-9a-f]{64}", "H", re.sub(r"time: \S+", "time: T", text))
    assert (first.id, second.id) == ("00000001", "00000002")
    assert (report.ok, report.receipts, report.macs_checked) == (True, 2, True)
    assert listed == [("00000001", "route", None), ("00000002", "run", "r1")]
    assert of_r1 == ["00000002"]
    assert blanked == (
        "receipt: 00000002\nkind: run\ntime: T\nrun: r1\nstatus: succeeded\n"
        "signed_from: 00000001\nprevious: 00000001 H\nsha256: H\nmac: H\n"
    )
    assert (parsed.request, parsed.fields) == ("x", {"decision": "route", "agents": ["a", "b"]})
    assert text.endswith(f"sha256: {second.sha256}\nmac: {text.split('mac: ')[1]}")


def test_a_silent_hosts_live_run_is_aborted_by_gc_naming_the_host_and_a_live_one_is_not(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, backend: str, tmp_path: Path
) -> None:
    """On PostgreSQL another host's run is judged by its host's heartbeat; on SQLite every
    run is this machine's and judged by its process."""
    from agentos.run.gc import collect_garbage

    monkeypatch.setenv("AGENTOS_HOST_SILENT_AFTER", "60")
    for host, beat in (("gone", time.time() - 600), ("here", time.time())):
        monkeypatch.setenv("AGENTOS_HOST_ID", host)
        store = RunStore(ws)
        try:
            store.create(f"run-{host}", "request", tmp_path, status=RunStatus.RUNNING)
            store.add_agent(f"run-{host}", "coder", "1.0.0", status=AgentStatus.RUNNING)
            store.update(f"run-{host}", pid=999_999_999)  # no such process here
            store.heartbeat(at=beat)
        finally:
            store.close()
    monkeypatch.setenv("AGENTOS_HOST_ID", "judge")
    report = collect_garbage(ws)
    store = RunStore(ws)
    try:
        gone, here = store.get("run-gone"), store.get("run-here")
    finally:
        store.close()
    if backend == "sqlite":
        assert sorted(report.aborted_runs) == ["run-gone", "run-here"]
        return
    assert report.aborted_runs == ["run-gone"]
    assert (gone.status, gone.agents[0].status) == (RunStatus.ABORTED, AgentStatus.ABORTED)
    assert re.fullmatch(
        r"host gone went silent: no heartbeat for 6\d\ds \(over 60s, AGENTOS_HOST_SILENT_AFTER\); "
        r"aborted by gc on judge\. What its agents did is on that host, on their branches, for "
        r"its gc to keep when it is back",
        gone.message or "",
    ), gone.message
    assert (here.status, here.agents[0].status) == (RunStatus.RUNNING, AgentStatus.RUNNING)
    assert [r.kind for r in list_receipts(ws)] == ["run"]
