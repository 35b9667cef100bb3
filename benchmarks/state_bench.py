"""The state on PostgreSQL against SQLite, and against raw psycopg (issue 35). Prints
figures, asserts nothing.

    .venv/bin/python benchmarks/state_bench.py [--events 40] [--lifecycles 30] [--url URL]

Without --url it starts a PostgreSQL server of its own, as the tests do (tests/_postgres.py:
Debian's postgresql, a temporary cluster on a Unix socket).

1. Announcement latency: an event written by this process, received by another that
   follows the stream: a real ``agentos events --follow --json`` process, and a real
   ``agentos dashboard`` process's ``/api/stream`` (read with httpx), each on PostgreSQL
   (LISTEN/NOTIFY) and on SQLite (which they poll: every 0.2 s and 0.1 s). Latency is the
   time the line arrives here less the event's own ``at`` (one clock). p50 and p90 over
   --events events, one every 50 ms; target p50 <= 50 ms on PostgreSQL.
2. A run's lifecycle writes (the run, two agents and their status changes, 50 events, the
   run's status changes: what the orchestrator writes) through :class:`RunStore` on
   PostgreSQL, against the same statements through raw psycopg (one connection in
   autocommit, the same SQL, the same values) measured in the same run; p50 over
   --lifecycles; target <= 1.5x. SQLite's figure beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from agentos.run.store import AgentStatus, RunStatus, RunStore, process_start
from agentos.workspace.layout import Workspace, init_workspace

LATENCY_TARGET = 50.0  # ms, p50, PostgreSQL
RATIO_TARGET = 1.5
EVENTS_PER_RUN = 50


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1e3


# -- 1. how soon a follower hears of an event -------------------------------------------------


def _lines(stream: Iterator[str]) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\n")


def follow_latency(ws: Workspace, env: dict[str, str], events: int) -> list[float]:
    """``agentos events --follow --json`` in a process of its own."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "events", "--follow",
         "--json"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        return _measure(ws, env, (json.loads(line) for line in _lines(proc.stdout)), events)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def dashboard_latency(ws: Workspace, env: dict[str, str], events: int, tmp: Path) -> list[float]:
    """A real dashboard's ``/api/stream``, read as its page's EventSource reads it."""
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "dashboard", "--http",
         "127.0.0.1:0", "--repo", str(tmp)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        url = next(m[0] for line in proc.stdout if (m := re.search(r"http://[\d.:]+", line)))
        with httpx.Client(base_url=url, timeout=30) as http, http.stream("GET", "/api/stream") as s:
            found = (
                json.loads(line.removeprefix("data: "))
                for line in s.iter_lines()
                if line.startswith("data: ")
            )
            return _measure(ws, env, found, events)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _measure(
    ws: Workspace, env: dict[str, str], received: Iterator[dict[str, Any]], events: int
) -> list[float]:
    """Write events (from a thread of this process, as another process would: its own
    connection), one every 50 ms once the follower hears the first; the latency of each."""
    os.environ["AGENTOS_STATE_URL"] = env.get("AGENTOS_STATE_URL", "")
    done = threading.Event()
    lat: list[float] = []

    def write() -> None:
        store = RunStore(ws)
        try:
            while not done.is_set() and not lat:  # until the follower is up
                store.record_event("bench", "note", "warm-up")
                time.sleep(0.2)
            for n in range(events):
                store.record_event("bench", "note", f"event {n}")
                time.sleep(0.05)
        finally:
            store.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    for event in received:
        if event["message"] == "warm-up":
            lat.append(0.0)  # the follower is up
            continue
        lat.append(time.time() - float(event["at"]))
        if event["message"] == f"event {events - 1}":
            break
    done.set()
    writer.join(timeout=30)
    return [x for x in lat if x][-events:]


# -- 2. a run's lifecycle writes ----------------------------------------------------------


def lifecycle(store: RunStore, run_id: str) -> None:
    """What the orchestrator writes for a run of two agents, as RunStore calls."""
    store.create(run_id, "fix the parser", Path("/repo"))
    store.update(run_id, target_branch="main", base_commit="0" * 40, started_at=time.time(),
                 options={"force": True, "agent": None, "merge": True})  # fmt: skip
    store.update(run_id, decision="route", receipt="00000002")
    store.update(run_id, status=RunStatus.RUNNING)
    for agent in ("coder", "tester"):
        store.add_agent(run_id, agent, "1.0.0", card="card", branch=f"agentos/{run_id}/{agent}",
                        worktree=f"/ws/.agentos/worktrees/{run_id}/{agent}",
                        session=f"agentos-{run_id}-{agent}")  # fmt: skip
    for seq in range(1, EVENTS_PER_RUN + 1):
        store.record_event("run", "note", f"step {seq}", run=run_id, seq=seq, at=time.time())
    for agent in ("coder", "tester"):
        store.update_agent(run_id, agent, status=AgentStatus.RUNNING, attempts=1)
        store.update_agent(run_id, agent, status=AgentStatus.GATING)
        store.update_agent(run_id, agent, status=AgentStatus.PASSED, gated_commit="1" * 40)
    store.update(run_id, status=RunStatus.MERGING)
    store.update(run_id, status=RunStatus.SUCCEEDED, message="merged", ended_at=time.time())


def raw_lifecycle(con: Any, run_id: str) -> None:
    """The same statements and values through psycopg itself (autocommit, one connection)."""
    pid = os.getpid()
    x = con.execute
    x(
        "INSERT INTO runs (id, request, repo, status, pid, pid_start, created_at, host) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, "fix the parser", "/repo", "pending", pid, process_start(pid), time.time(), "h"),
    )
    x(
        "UPDATE runs SET target_branch = %s, base_commit = %s, started_at = %s, options = %s "
        "WHERE id = %s",
        (
            "main",
            "0" * 40,
            time.time(),
            json.dumps({"force": True, "agent": None, "merge": True}),
            run_id,
        ),
    )
    x("UPDATE runs SET decision = %s, receipt = %s WHERE id = %s", ("route", "00000002", run_id))
    x("UPDATE runs SET status = %s WHERE id = %s", ("running", run_id))
    for agent in ("coder", "tester"):
        x(
            "INSERT INTO run_agents (run_id, agent, version, status, host, card, branch, worktree, "
            "session) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id, agent) DO "
            "UPDATE SET version = excluded.version, status = excluded.status",
            (
                run_id,
                agent,
                "1.0.0",
                "pending",
                "h",
                "card",
                f"agentos/{run_id}/{agent}",
                f"/ws/.agentos/worktrees/{run_id}/{agent}",
                f"agentos-{run_id}-{agent}",
            ),
        )
    for seq in range(1, EVENTS_PER_RUN + 1):
        x(
            "INSERT INTO events (at, source, kind, run, seq, task, agent, status, message) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (time.time(), "run", "note", run_id, seq, None, None, None, f"step {seq}"),
        )
    for agent in ("coder", "tester"):
        x(
            "UPDATE run_agents SET status = %s, attempts = %s WHERE run_id = %s AND agent = %s",
            ("running", 1, run_id, agent),
        )
        x(
            "UPDATE run_agents SET status = %s WHERE run_id = %s AND agent = %s",
            ("gating", run_id, agent),
        )
        x(
            "UPDATE run_agents SET status = %s, gated_commit = %s WHERE run_id = %s AND agent = %s",
            ("passed", "1" * 40, run_id, agent),
        )
    x("UPDATE runs SET status = %s WHERE id = %s", ("merging", run_id))
    x("UPDATE runs SET status = %s, message = %s, ended_at = %s WHERE id = %s",
      ("succeeded", "merged", time.time(), run_id))  # fmt: skip


def timed(step: Callable[[str], None], n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        step(f"{tag}-{i:04d}")
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--lifecycles", type=int, default=30)
    parser.add_argument("--url", help="An empty PostgreSQL database (default: start a server)")
    args = parser.parse_args()
    server = None
    if args.url is None:
        from _postgres import Server, bindir

        programs = bindir()
        if programs is None:
            raise SystemExit("PostgreSQL is not installed (scripts/setup installs it)")
        server = Server(programs)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run(args, Path(tmp), server)
    finally:
        if server is not None:
            server.remove()


def run(args: argparse.Namespace, tmp: Path, server: Any) -> None:
    def database() -> str:
        return str(args.url or server.url(server.database()))

    env_pg = {**os.environ, "AGENTOS_STATE_URL": database()}
    env_sqlite = {k: v for k, v in os.environ.items() if k != "AGENTOS_STATE_URL"}
    print("1. an event written by this process, received by another (p50 / p90):")
    for name, measure in (
        ("events --follow", lambda ws, env: follow_latency(ws, env, args.events)),
        ("dashboard /api/stream", lambda ws, env: dashboard_latency(ws, env, args.events, tmp)),
    ):
        figures = {}
        for backend, env in (("postgresql", env_pg), ("sqlite", env_sqlite)):
            ws, _ = init_workspace(tmp / f"{backend}-{name.split()[0]}")
            lat = measure(ws, env)
            figures[backend] = (pct(lat, 0.5), pct(lat, 0.9))
        pg, lite = figures["postgresql"], figures["sqlite"]
        verdict = "meets" if pg[0] <= LATENCY_TARGET else "MISSES"
        print(
            f"  {name:22s} PostgreSQL {pg[0]:6.1f} / {pg[1]:6.1f} ms (target p50 <= "
            f"{LATENCY_TARGET:.0f} ms: {verdict});  SQLite {lite[0]:6.1f} / {lite[1]:6.1f} ms"
        )

    print(f"2. a run's lifecycle writes (the run, 2 agents, {EVENTS_PER_RUN} events, status "
          "changes), p50 per run:")  # fmt: skip
    import psycopg

    url = database()
    os.environ["AGENTOS_STATE_URL"] = url
    ws, _ = init_workspace(tmp / "lifecycle")
    store = RunStore(ws)  # migrates the database
    raw = psycopg.connect(url, autocommit=True)
    try:
        timed(lambda r: lifecycle(store, r), 3, "warm")
        timed(lambda r: raw_lifecycle(raw, r), 3, "rawwarm")
        ours, theirs = [], []
        for i in range(args.lifecycles):  # interleaved: both see the same machine
            ours += timed(lambda r: lifecycle(store, r), 1, f"ours{i}")
            theirs += timed(lambda r: raw_lifecycle(raw, r), 1, f"raw{i}")
    finally:
        raw.close()
        store.close()
    del os.environ["AGENTOS_STATE_URL"]
    lite_ws, _ = init_workspace(tmp / "lifecycle-sqlite")
    lite = RunStore(lite_ws)
    try:
        on_sqlite = timed(lambda r: lifecycle(lite, r), args.lifecycles, "lite")
    finally:
        lite.close()
    a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    ratio = a / b
    verdict = "meets" if ratio <= RATIO_TARGET else "MISSES"
    print(f"  RunStore on PostgreSQL {a:7.2f} ms;  raw psycopg {b:7.2f} ms;  ratio {ratio:.2f}x "
          f"(target <= {RATIO_TARGET}x: {verdict})")  # fmt: skip
    print(f"  RunStore on SQLite     {statistics.median(on_sqlite) * 1e3:7.2f} ms (for reference)")


if __name__ == "__main__":
    main()
