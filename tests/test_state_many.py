"""Three processes on one PostgreSQL state, each standing for a machine with a repository
of its own, start 20 runs each, one after another, all three at once (issue 35): every run
and event is recorded once, no update is lost, the one receipt chain they all append to
verifies, and a fourth process lists all 60."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, git, make_repo, needs_tmux

from agentos.receipts import export_key, import_key, list_receipts, write_receipt
from agentos.run.events import read_events
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace, init_workspace

RUNS = 20
HOSTS = 3
DRIVER = """
import json, sys
from pathlib import Path
from agentos.run.orchestrator import RunOptions, start_run
from agentos.workspace.layout import Workspace

ws, repo = Workspace(Path(sys.argv[1])), Path(sys.argv[2])
for n in range(int(sys.argv[3])):
    report = start_run(ws, f"writer-task {n}", repo, RunOptions(force=True))
    print(json.dumps({"run": report.run_id, "status": report.status,
                      "receipts": report.receipts}), flush=True)
"""


@needs_tmux
@pytest.mark.process
def test_three_processes_run_twenty_each_at_once_on_one_state_and_a_fourth_lists_sixty(
    tmp_path: Path, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.url(pg_server.database())
    monkeypatch.setenv("AGENTOS_STATE_URL", url)
    hosts: list[tuple[Workspace, Path, dict[str, str]]] = []
    for i in range(HOSTS):
        ws, _ = init_workspace(tmp_path / f"host-{i}")
        ws.settings_file.write_text("run: {guardian: false}\n")
        add_agent(ws, tmp_path / f"src-{i}", "writer", 'echo "$RANDOM" >> work.txt\n')
        env = {
            **os.environ,
            "AGENTOS_HOST_ID": f"host-{i}",
            "AGENTOS_TMUX_SOCKET": f"agentos-test-{uuid.uuid4().hex[:8]}",
        }
        hosts.append((ws, make_repo(tmp_path / f"repo-{i}"), env))
    first = hosts[0][0]
    write_receipt(first, "note", {"about": "the first writer makes the key"})
    key = tmp_path / "receipts.key"
    export_key(first, key)
    for ws, _, _ in hosts[1:]:
        import_key(ws, key)

    drivers = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(ws.root), str(repo), str(RUNS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for ws, repo, env in hosts
    ]
    try:
        outputs = [d.communicate(timeout=600) for d in drivers]
    finally:
        for d in drivers:
            d.kill()
        for _, _, env in hosts:
            subprocess.run(["tmux", "-L", env["AGENTOS_TMUX_SOCKET"], "kill-server"],
                           capture_output=True)  # fmt: skip
    reports = [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]
    listed = subprocess.run(
        [sys.executable, "-m", "agentos", "--workspace", str(hosts[1][0].root), "runs", "list",
         "--limit", "100", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    verified = subprocess.run(
        [sys.executable, "-m", "agentos", "--workspace", str(hosts[2][0].root), "receipts",
         "verify", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip

    assert [d.returncode for d in drivers] == [0] * HOSTS, [err[-2000:] for _, err in outputs]
    ran = {r["run"]: (i, r) for i, host in enumerate(reports) for r in host}
    assert [len(host) for host in reports] == [RUNS] * HOSTS and len(ran) == RUNS * HOSTS
    runs = json.loads(listed.stdout)["runs"]
    assert sorted(r["id"] for r in runs) == sorted(ran)  # each recorded once, all seen
    assert {(r["status"], r["host"], len(r["agents"])) for r in runs} == {
        ("succeeded", f"host-{i}", 1) for i in range(HOSTS)
    }
    assert {(a["status"], a["host"]) for r in runs for a in r["agents"]} == {
        ("passed", f"host-{i}") for i in range(HOSTS)
    }
    store = RunStore(first)
    try:
        for run_id, (i, report) in ran.items():
            ws = hosts[i][0]
            stored = store.events_after(0, run=run_id, limit=10_000)
            in_file, _ = read_events(ws.logs_dir / run_id / "events.jsonl")
            assert [e["seq"] for e in stored] == [e.seq for e in in_file], run_id
            assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1)), run_id
            assert [r.id for r in list_receipts(first, run_id)] == report["receipts"], run_id
    finally:
        store.close()
    chain = json.loads(verified.stdout)
    total = 1 + sum(len(r["receipts"]) for _, r in ran.values())
    assert chain == {
        "ok": True, "receipts": total, "macs_checked": True, "problems": [], "notes": []
    }  # fmt: skip
    for _, repo, _ in hosts:
        assert len(git(repo, "log", "--format=%H", "main").split()) == 1 + RUNS
