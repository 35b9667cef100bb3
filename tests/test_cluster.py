"""Agents, evals and workflow tasks on a real Ray cluster (issue 36): three nodes on this
machine (``ray.cluster_utils.Cluster``), each with its own AGENTOS_HOME, custom resources and
a small object store; the driver is this process (or a real ``agentos`` process where it
must be killed). One cluster for the module; every cluster test is in the xdist group
``ray``, so that two workers never start clusters at once (scripts/test: --dist loadgroup).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CliRunner,
    add_agent,
    branches,
    git,
    make_repo,
    needs_tmux,
    processes_named,
    requires,
    wait_until,
    worktrees,
)

from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

needs_ray = requires(
    importlib.util.find_spec("ray") is not None, "Ray is not installed (the ray extra)"
)
pytestmark = [pytest.mark.xdist_group("ray"), needs_ray, needs_tmux]

NODES = ("a", "b", "c")
OBJECT_STORE = 100 * 1024 * 1024
# On Linux Ray binds the machine's external address unless told this; the cluster of the
# tests stays on 127.0.0.1. Nothing is sent anywhere.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
TOOL = "agentos-test-tool"  # a program nodes a and b have, node c lacks


@dataclass
class Nodes:
    """The cluster of the module: its address, each node's AGENTOS_HOME and Ray node."""

    cluster: Any
    address: str
    homes: dict[str, Path]
    handles: dict[str, Any] = field(default_factory=dict)
    path: dict[str, str] = field(default_factory=dict)  # each node's PATH

    def add(self, name: str, home: Path) -> None:
        self.homes[name] = home
        self.handles[name] = self.cluster.add_node(
            num_cpus=2,
            object_store_memory=OBJECT_STORE,
            resources={"agentos_slot": 2, f"node_{name}": 1},
            env_vars={"AGENTOS_HOME": str(home), "PATH": self.path[name]},
        )
        self.cluster.wait_for_nodes()

    def of(self, path: Path | str) -> str:
        """The node whose AGENTOS_HOME holds ``path``."""
        for name, home in self.homes.items():
            if Path(path).is_relative_to(home):
                return name
        raise AssertionError(f"{path} is on no node")

    def worktrees(self, agent: str) -> list[Path]:
        """The worktrees ``agent`` has on the nodes now (one per attempt working)."""
        return [
            p
            for home in self.homes.values()
            for p in (home / ".agentos" / "worktrees").glob(f"*/{agent}-*")
            if p.is_dir()
        ]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)  # before Ray is imported: it reads them then
    import ray
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("cluster")
    tools = root / "tools"
    tools.mkdir()
    (tools / TOOL).write_text("#!/bin/sh\nexit 0\n")
    (tools / TOOL).chmod(0o755)
    # The driver's machine: no agent slot, so that agents work on the three nodes only.
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": OBJECT_STORE,
            # A raylet of this loaded 2-core machine may miss heartbeats for a while: its
            # node is taken for dead only after a minute of them (not Ray's 15 s).
            "_system_config": {"health_check_failure_threshold": 20},
        },
    )
    base_path = os.environ.get("PATH", "/usr/bin:/bin")
    found = Nodes(cluster, cluster.address, {})
    found.path = {"a": f"{tools}:{base_path}", "b": f"{tools}:{base_path}", "c": base_path}
    for name in NODES:
        found.add(name, root / f"node-{name}")
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield found
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def driver(ws: Workspace, nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The test's workspace as the cluster's driver (a lease of 2 s, no retries unless a
    test says so)."""
    ws.settings_file.write_text(
        "run: {guardian: false, retries: 0}\nguardian: {interval: 0.5}\n"
        f"cluster: {{backend: ray, address: '{nodes.address}', lease: 2}}\n"
    )
    monkeypatch.setenv("PATH", nodes.path["a"])  # the driver has the tool too
    return ws


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# target\n"})


def reaper_sockets() -> list[str]:
    """The tmux servers of remote attempts still running on this machine (every node's)."""
    folder = Path(f"/tmp/tmux-{os.getuid()}")
    alive = []
    for sock in folder.glob("agentos-r-*") if folder.is_dir() else []:
        out = subprocess.run(["tmux", "-L", sock.name, "list-sessions"], capture_output=True)
        if out.returncode == 0:
            alive.append(sock.name)
    return alive


def placement(ws: Workspace, run_id: str) -> dict[str, Any]:
    """Where each agent of the run worked, as the driver recorded it (``options.cluster``)."""
    options = RunStore(ws).get(run_id).options or {}
    return dict(options["cluster"])


def gate_nodes(ws: Workspace, run_id: str) -> dict[str, str]:
    """Each agent's gate receipt's node (its last), from the receipts (the integration
    gate, the driver's, names no agent)."""
    from agentos.receipts import list_receipts
    from agentos.receipts.read import load_receipt

    out = {}
    for r in list_receipts(ws, run_id=run_id):
        fields = load_receipt(ws, r.id).fields
        if r.kind == "gate" and "agent" in fields:
            out[str(fields["agent"]).split("@")[0]] = str(fields["node"])
    return out


# --- 1. a run's agents on three nodes --------------------------------------------------------


def test_three_agents_work_on_three_nodes_each_gated_there_and_merged_here(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path, cli: CliRunner
) -> None:
    # Each agent, once started, waits until the test lets it go: the test does so only when
    # all three wait at once, each in a worktree under a different node's AGENTOS_HOME.
    for name in ("alpha", "beta", "gamma"):
        add_agent(
            driver,
            tmp_path,
            name,
            f"touch {name}.waiting\nuntil [ -e go ]; do sleep 0.05; done\n"
            f"rm go {name}.waiting\necho {name} > {name}.txt\n"
            f'echo "$AGENTOS_WORKTREE" > where-{name}.txt\n',
            checks=[{"name": f"{name} wrote its file", "file_exists": f"{name}.txt"}],
        )
    names = ("alpha", "beta", "gamma")
    seen: list[list[Path]] = []
    shown: list[Any] = []

    def release_when_all_wait() -> None:
        def all_waiting() -> list[Path] | None:
            found = {
                n: [w for w in nodes.worktrees(n) if (w / f"{n}.waiting").exists()] for n in names
            }
            return [w[0] for w in found.values()] if all(found.values()) else None

        try:
            seen.append(wait_until(all_waiting, timeout=120, what="three agents waiting at once"))
            # While they work: where `cluster status` and `attach` say they are.
            from agentos.cluster.status import cluster_status

            shown.append(cluster_status(driver))
            run_id = seen[0][0].parent.name

            def health() -> dict[str, Any] | None:  # each node measured its agent
                out = subprocess.run(
                    [sys.executable, "-m", "agentos", "-w", str(driver.root), "status", "--json"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                (run,) = json.loads(out.stdout)["runs"]
                measured: dict[str, Any] = run["health"]
                return measured if all(measured.get(n) for n in names) else None

            shown.append(wait_until(health, what="the health of the three from their nodes"))
            shown.append(
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "agentos",
                        "-w",
                        str(driver.root),
                        "attach",
                        run_id,
                        "beta",
                    ],
                    capture_output=True,
                    text=True,
                )
            )
        finally:  # let them go (whatever happened), so that the run ends
            for name in names:
                for w in nodes.worktrees(name):
                    (w / "go").touch()

    releaser = threading.Thread(target=release_when_all_wait)
    releaser.start()
    try:
        result = cli(
            "run",
            "alpha-task beta-task gamma-task",
            "--repo",
            str(repo),
            "--force",
            "--json",
            timeout=240,
        )
    finally:
        releaser.join()
    (waiting,) = seen
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "succeeded", report["message"]
    # Where each worked: three nodes, at once.
    assert sorted(nodes.of(w) for w in waiting) == ["a", "b", "c"]
    where = {
        n: nodes.of((repo / f"where-{n}.txt").read_text().strip())
        for n in ("alpha", "beta", "gamma")
    }
    assert sorted(where.values()) == ["a", "b", "c"]
    # Each was gated on its node: its gate receipt names it, and the run's record too.
    placed = placement(driver, report["run"])
    assert {n: placed[n]["node"] for n in placed} == gate_nodes(driver, report["run"])
    assert len(set(gate_nodes(driver, report["run"]).values())) == 3
    # Merged here as a local run merges; nothing left behind here or on a node.
    for name in ("alpha", "beta", "gamma"):
        assert (repo / f"{name}.txt").read_text() == f"{name}\n"
    assert git(repo, "status", "--porcelain") == ""
    assert "AGENTOS_CONTEXT.md" not in git(repo, "ls-files")
    assert branches(repo) == ["main"] and worktrees(repo) == [str(repo)]
    assert [a["status"] for a in report["agents"]] == ["passed"] * 3
    # (A node sends its result before its teardown: the driver does not wait for it.)
    wait_until(
        lambda: nodes.worktrees("alpha") + nodes.worktrees("beta") + nodes.worktrees("gamma") == [],
        what="the nodes' worktrees removed",
    )
    wait_until(lambda: reaper_sockets() == [], what="the agents' tmux servers ended")
    kinds = [
        json.loads(cli("receipts", "show", r, "--json").stdout)["kind"] for r in report["receipts"]
    ]
    # The agents' three gates, then the driver's integration gate of their work together.
    assert kinds == ["interview", "route", "gate", "gate", "gate", "gate", "merge", "run"]
    # While they worked, `cluster status` showed each on its node (and the driver's
    # machine, the head, with no slot), and `attach` said where to attach to beta.
    status, health, attach = shown
    # The guardian's word on each, from what its node measured.
    assert {n: (h["health"], h["node"]) for n, h in health.items()} == {
        n: ("healthy", placed[n]["node"]) for n in names
    }
    working = {
        nodes.of(placed[a]["worktree"]): (n["busy"], n["slots"], [x["agent"] for x in n["agents"]])
        for n in status["nodes"]
        for a in placed
        if placed[a]["node_id"] == n["id"]
    }
    assert working == {
        nodes.of(placed[a]["worktree"]): (1, 2, [a]) for a in ("alpha", "beta", "gamma")
    }
    assert [
        n["slots"]
        for n in status["nodes"]
        if n["id"] not in {p["node_id"] for p in placed.values()}
    ] == [0]
    beta = placed["beta"]
    assert (attach.returncode, attach.stdout) == (1, "")
    assert attach.stderr == (
        f"error: beta works on node {beta['node']} ({beta['address']}), not here: on that "
        f"machine run `tmux -L {beta['socket']} attach-session -t ={beta['session']}`\n"
    )
    verified = cli("receipts", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "chain intact" in verified.stdout


def events_of(ws: Workspace, run_id: str) -> list[str]:
    """The run's events, as their lines."""
    path = ws.logs_dir / run_id / "events.jsonl"
    return [json.loads(line)["message"] for line in path.read_text().splitlines()]


def run_in_thread(
    ws: Workspace, request: str, repo: Path, watch: str | None = None
) -> tuple[threading.Thread, list[Any]]:
    """``start_run`` on the cluster in a thread (the test steers the nodes meanwhile)."""
    from agentos.cluster import dispatch_for
    from agentos.run.orchestrator import start_run

    reports: list[Any] = []
    dispatch = dispatch_for(ws, watch=watch)
    thread = threading.Thread(
        target=lambda: reports.append(start_run(ws, request, repo, force=True, dispatch=dispatch))
    )
    thread.start()
    return thread, reports


# --- 2. faults: a node lost, the driver killed ----------------------------------------------


def test_a_node_removed_while_its_agent_works_is_recorded_and_the_attempt_runs_on_another(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path
) -> None:
    marker = "agentos-lost-node-marker"
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("retries: 0", "retries: 1")
    )
    add_agent(
        driver,
        tmp_path,
        "mover",
        f'if [ "$AGENTOS_ATTEMPT" = 1 ]; then touch first.waiting; exec -a {marker} sleep 300; fi\n'
        'echo "$AGENTOS_WORKTREE" > moved.txt\n',
        checks=[{"name": "moved", "file_exists": "moved.txt"}],
    )
    thread, reports = run_in_thread(driver, "mover-task", repo)
    try:
        first = wait_until(
            lambda: [w for w in nodes.worktrees("mover") if (w / "first.waiting").exists()],
            timeout=120,
            what="the first attempt working",
        )[0]
        lost = nodes.of(first)
        wait_until(lambda: processes_named(marker), what="the agent's process")
        nodes.cluster.remove_node(nodes.handles.pop(lost))
        thread.join(timeout=240)
    finally:
        if lost not in nodes.handles:  # the next tests get three nodes again
            nodes.add(lost, nodes.homes[lost].with_name(f"node-{lost}-again"))
    (report,) = reports
    assert report.status == "succeeded", report.message
    (agent,) = report.agents
    assert agent.attempts == 2 and agent.status == "passed"
    assert nodes.of((repo / "moved.txt").read_text().strip()) != lost
    lines = events_of(driver, report.run_id)
    removed = [line for line in lines if "lost on node" in line]
    assert len(removed) == 1 and removed[0].startswith("mover: attempt 1 lost on node "), lines
    assert "NodeDiedError" in removed[0]
    assert [x["attempt"] for x in placement(driver, report.run_id)["mover"]["lost"]] == [1]
    # Its node's gate passed the very tree that lands, and the driver's integration gate
    # still judged it: a node's gate is trusted for its attempt only.
    from agentos.receipts.read import load_receipt

    gates = [load_receipt(driver, r) for r in report.receipts]
    assert [g.fields.get("via") for g in gates if g.kind == "gate"] == [None, "integration gate"]
    # The lost node's agent did not outlive it: its reaper ended it when the lease lapsed.
    wait_until(lambda: not processes_named(marker), timeout=60, what="the lost agent ended")
    wait_until(lambda: reaper_sockets() == [], timeout=30, what="its tmux server ended")


@pytest.mark.process  # the driver is a real process, killed with SIGKILL
def test_a_killed_driver_leaves_no_agent_on_any_node_and_gc_records_the_run(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path, cli: CliRunner
) -> None:
    marker = "agentos-orphan-marker"
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("retries: 0", "retries: 1")
    )
    add_agent(
        driver,
        tmp_path,
        "stubborn",
        'if [ "$AGENTOS_ATTEMPT" = 1 ]; then echo first > first.txt; exit 1; fi\n'
        f"touch second.waiting\nexec -a {marker} sleep 300\n",
        checks=[{"name": "second", "file_exists": "second.txt"}],
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentos",
            "--workspace",
            str(driver.root),
            "run",
            "stubborn-task",
            "--repo",
            str(repo),
            "--force",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        second = wait_until(
            lambda: [w for w in nodes.worktrees("stubborn") if (w / "second.waiting").exists()],
            timeout=120,
            what="the second attempt working",
        )[0]
        wait_until(lambda: processes_named(marker), what="the agent's process")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    run_id = second.parent.name
    # Nothing of the run runs on any node once the driver's lease lapsed.
    wait_until(lambda: not processes_named(marker), timeout=60, what="the agent ended")
    wait_until(lambda: reaper_sockets() == [], timeout=30, what="its tmux server ended")
    wait_until(lambda: not second.exists(), timeout=60, what="its worktree removed")
    # The node's own record of the attempt says it ended (what `cluster status` reads):
    # aborted by the reaper when the lease lapsed, or cancelled by the worker itself when
    # Ray interrupted it on its owner's death before killing it (a race of Ray's).
    store = RunStore(Workspace(nodes.homes[nodes.of(second)]))
    ((agent, status),) = [(a.agent, a.status) for a in store.get(run_id).agents]
    assert (agent, status in ("aborted", "cancelled")) == ("stubborn", True), status

    out = cli("gc", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["aborted_runs"] == [run_id]
    record = RunStore(driver).get(run_id)
    assert record.status == "aborted"
    # The commit of the first attempt reached the driver before it died: it is kept.
    assert git(repo, "show", f"agentos/{run_id}/stubborn:first.txt") == "first"
    assert git(repo, "status", "--porcelain") == "" and worktrees(repo) == [str(repo)]


def test_cancelling_a_detached_run_reaches_its_remote_agent_which_tears_down_there(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path, cli: CliRunner
) -> None:
    marker = "agentos-cancelled-marker"
    add_agent(driver, tmp_path, "patient", f"touch started\nexec -a {marker} sleep 300\n")
    started = cli("run", "patient-task", "--repo", str(repo), "--force", "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    worktree = wait_until(
        lambda: [w for w in nodes.worktrees("patient") if (w / "started").exists()],
        timeout=120,
        what="the agent working on a node",
    )[0]
    wait_until(lambda: processes_named(marker), what="the agent's process")

    out = cli("runs", "cancel", run_id, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "cancelled"
    # Ray's cancel reached the task, and the driver waited for the node to tear the attempt
    # down before its run ended: the worker itself did it, as a local run's teardown does
    # (its record cancelled; the reaper's would say aborted).
    wait_until(lambda: RunStore(driver).get(run_id).status == "cancelled", what="the run cancelled")
    assert not processes_named(marker)
    assert not worktree.exists()
    store = RunStore(Workspace(nodes.homes[nodes.of(worktree)]))
    ((agent, status),) = [(a.agent, a.status) for a in store.get(run_id).agents]
    assert (agent, status) == ("patient", "cancelled")
    wait_until(lambda: reaper_sockets() == [], timeout=30, what="its tmux server ended")


def test_the_guardian_on_a_node_nudges_a_quiet_remote_agent_and_the_driver_records_it(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path
) -> None:
    from agentos.guardian import REMOTE_WATCH
    from agentos.receipts import list_receipts
    from agentos.receipts.read import load_receipt

    nudge = "Are you stuck? Continue with the task."
    driver.settings_file.write_text(
        driver.settings_file.read_text()
        .replace("guardian: false", "guardian: true")
        .replace("guardian: {interval: 0.5}", "guardian: {interval: 0.5, stuck_after: 1}")
    )
    add_agent(
        driver,
        tmp_path,
        "dozy",
        'read -r line\necho "$line" > nudged.txt\n',  # waits, silent, for a line typed in
        checks=[{"name": "nudged", "file_exists": "nudged.txt"}],
    )
    thread, reports = run_in_thread(driver, "dozy-task", repo, watch=REMOTE_WATCH)
    thread.join()
    (report,) = reports
    assert report.status == "succeeded", report.message
    assert (repo / "nudged.txt").read_text() == f"{nudge}\n"  # typed into its pane there
    node = placement(driver, report.run_id)["dozy"]["node"]
    (row,) = RunStore(driver).interventions()
    assert (row.run, row.agent, row.action) == (report.run_id, "dozy", "nudge")
    (receipt,) = [
        load_receipt(driver, r.id)
        for r in list_receipts(driver, run_id=report.run_id)
        if r.kind == "guardian"
    ]
    assert (receipt.fields["action"], receipt.fields["ok"], receipt.fields["node"]) == (
        "nudge",
        True,
        node,
    )
    assert row.receipt == receipt.id


# --- 3. what a node refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("tampered", "run.sh: modified"),
        ("missing", "run.sh: removed"),
    ],
    ids=["tampered", "missing"],
)
def test_a_package_changed_on_a_node_is_refused_there_and_never_runs(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path, change: str, problem: str
) -> None:
    # Every agent of this test works on node c.
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("lease: 2", "lease: 2, resources: {node_c: 0.01}")
    )
    name = f"honest-{change}"  # a package of its own: the nodes' caches outlive a test
    add_agent(
        driver,
        tmp_path,
        name,
        "echo honest > honest.txt\n",
        checks=[{"name": "wrote", "file_exists": "honest.txt"}],
    )
    first, reports = run_in_thread(driver, f"{name}-task", repo)
    first.join()
    assert reports[0].status == "succeeded", reports[0].message
    (cached,) = (nodes.homes["c"] / ".agentos" / "cluster" / "packages").glob(f"*/{name}-1.0.0")
    script = cached / "run.sh"
    script.chmod(0o644)
    if change == "tampered":
        script.write_text("echo pwned > pwned.txt\n")
    else:
        script.unlink()

    second, reports = run_in_thread(driver, f"{name}-task again", repo)
    second.join()
    (report,) = reports
    assert report.status == "failed"
    refused = [line for line in events_of(driver, report.run_id) if "refused" in line]
    node = placement(driver, report.run_id)[name]["refused"][0]["node"]
    assert refused == [
        f"{name}: attempt 1 refused: node {node}: {name}@1.0.0 refused, it is not what the "
        f"driver's hub.lock says ({name}@1.0.0: {problem}); remove {cached.parent} there to "
        "fetch it again"
    ]
    assert node.endswith("/" + nodes.handles["c"].node_id[:8])  # node c refused it
    # Never run: no log of it on the node, nothing it would write, no commit of it (its
    # empty branch went at teardown).
    assert not list(nodes.homes["c"].glob(f".agentos/logs/{report.run_id}/*"))
    assert not (repo / "pwned.txt").exists()
    assert branches(repo) == ["main"]


def test_a_node_without_a_checks_program_refuses_the_attempt_naming_itself_and_the_program(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path
) -> None:
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("lease: 2", "lease: 2, resources: {node_c: 0.01}")
    )
    add_agent(
        driver,
        tmp_path,
        "tooled",
        "echo ran > ran.txt\n",
        checks=[{"name": "tool works", "run": TOOL}],
    )
    thread, reports = run_in_thread(driver, "tooled-task", repo)
    thread.join()
    (report,) = reports
    assert report.status == "failed"
    node = placement(driver, report.run_id)["tooled"]["refused"][0]["node"]
    refused = [line for line in events_of(driver, report.run_id) if "refused" in line]
    assert refused == [
        f"tooled: attempt 1 refused: node {node}: `{TOOL}` (check 'tool works') is not "
        "installed or not on PATH: install it, or change the check"
    ]
    assert not list(nodes.homes["c"].glob(f".agentos/logs/{report.run_id}/*"))


# --- 4. fan-outs: evals, workflows, evolve ---------------------------------------------------


def _scores(report: dict[str, Any]) -> tuple[dict[str, float], float, bool]:
    return (
        {p["task"]: p["score"] for p in report["predictions"]},
        report["dimensions"]["correctness"],
        report["passed"],
    )


def test_an_eval_on_the_cluster_scores_as_the_same_eval_here(
    driver: Workspace, nodes: Nodes, cli: CliRunner
) -> None:
    here = cli("eval", "run", "arithmetic", "--agent", "calculator", "--backend", "local", "--json")
    there = cli("eval", "run", "arithmetic", "--agent", "calculator", "--jobs", "3", "--json")
    assert here.returncode == 0 and there.returncode == 0, here.stderr + there.stderr
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    assert _scores(remote) == _scores(local)
    assert local["dimensions"]["correctness"] == 0.833333  # 5 of 6: not the one in words
    assert all("node" not in p for p in local["predictions"])
    ran_on = {p["node"] for p in remote["predictions"]}
    assert len(ran_on) >= 2, ran_on  # spread over the nodes, graded here


@pytest.mark.slow
def test_the_bundled_repo_suite_scores_on_the_cluster_as_here(
    driver: Workspace, nodes: Nodes, cli: CliRunner
) -> None:
    args = ("eval", "run", "repo-basics", "--agent", "ruff-fixer", "--json")
    here = cli(*args, "--backend", "local", timeout=300)
    there = cli(*args, timeout=300)
    assert here.returncode == 0 and there.returncode == 0, here.stderr + there.stderr
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    assert _scores(remote) == _scores(local) == ({"lint": 1.0, "failing-test": 0.0}, 0.5, True)


def test_a_workflow_runs_twelve_tasks_six_at_once_across_the_nodes(
    driver: Workspace, nodes: Nodes, tmp_path: Path, repo: Path
) -> None:
    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_execution, create_task
    from agentos.workflows.scheduler import Scheduler
    from agentos.workflows.store import TaskStatus, WorkflowStore

    # Each task's agent waits, once started, until the test lets it go: the test does so
    # once six wait at once (two on each node), then lets every later one go at once, each
    # once (a `go` made again after the agent took it would not be in the tree its gate
    # judged).
    add_agent(
        driver,
        tmp_path,
        "scribe",
        'touch "waiting-$AGENTOS_TASK_ID"\n'
        'until [ -e go ]; do sleep 0.05; done\nrm go "waiting-$AGENTOS_TASK_ID"\n'
        'echo "$AGENTOS_WORKTREE" > "out-$AGENTOS_TASK_ID.txt"\n',
    )
    workflow = WorkflowDefinition.model_validate(
        {
            "id": "wide",
            "name": "Wide",
            "phases": [
                {"id": 1, "name": "do", "description": "Do", "agent": "scribe", "changes": True}
            ],
            "config": {"max_concurrent": 6, "task_deduplication_enabled": False},
        }
    )
    execution, _ = create_execution(driver, workflow, repo, {"task": "Write the file number 1"})
    for n in range(2, 13):
        create_task(driver, f"Write the file number {n}", 1, execution_id=execution)
    most: list[int] = []
    done = threading.Event()

    def release() -> None:
        def waiting() -> list[Path]:
            return [w for w in nodes.worktrees("scribe") if any(w.glob("waiting-*"))]

        try:
            six = wait_until(lambda: len(waiting()) >= 6 and waiting(), timeout=180, what="six")
            most.append(len(six))
            assert sorted({nodes.of(w) for w in six}) == ["a", "b", "c"]
        finally:
            released: set[str] = set()
            while not done.is_set():
                for w in waiting():
                    for mark in w.glob("waiting-*"):
                        if str(mark) not in released:
                            released.add(str(mark))
                            (w / "go").touch()
                done.wait(0.1)

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        status = Scheduler(driver, execution).run()
    finally:
        done.set()
        releaser.join()
    store = WorkflowStore(driver)
    tasks = store.tasks(execution)
    store.close()
    assert status == "done"
    assert [t.status for t in tasks] == [TaskStatus.DONE] * 12, [
        t.message for t in tasks if t.status != TaskStatus.DONE
    ]
    assert most == [6]  # six at once, never more: max_concurrent
    where = [nodes.of((repo / f"out-{t.id}.txt").read_text().strip()) for t in tasks]
    assert sorted(set(where)) == ["a", "b", "c"]
    assert git(repo, "status", "--porcelain") == "" and branches(repo) == ["main"]


TOY = (
    'grep -m1 "^$AGENTOS_REQUEST=" "$AGENTOS_PACKAGE_DIR/answers.txt" | cut -d= -f2'
    ' > "$AGENTOS_OUTPUT_FILE"\n'
)
FIXER = r"""
set -e
predictions="$AGENTOS_EVAL_DIR/gen-$AGENTOS_EVOLVE_PARENT/predictions.json"
task=$(python3 -c 'import json, sys
failed = [p["task"] for p in json.load(open(sys.argv[1])) if p["score"] < 1]
print(failed[0] if failed else "")' "$predictions")
case "$task" in
  three) echo "3+3=6" >> answers.txt ;;
  five) echo "5+5=10" >> answers.txt ;;
  seven) echo "7+7=14" >> answers.txt ;;
esac
"""
SUMS = [
    {"id": "two", "input": "2+2", "expected": "4"},
    {"id": "three", "input": "3+3", "expected": "6"},
    {"id": "five", "input": "5+5", "expected": "10"},
    {"id": "seven", "input": "7+7", "expected": "14"},
]


def test_an_evolve_generation_scores_its_candidates_on_more_than_one_node(
    driver: Workspace, nodes: Nodes, tmp_path: Path, cli: CliRunner
) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    for name, script, files in (
        ("toy", TOY, {"answers.txt": "2+2=4\n"}),
        ("fixer", FIXER, {}),
    ):
        src = write_package(tmp_path / "src" / name, name=name, files={"run.sh": script, **files})
        Hub(driver.hub_dir).install(str(src))
    suite = tmp_path / "sums"
    suite.mkdir()
    (suite / "suite.yaml").write_text(
        json.dumps({"name": "sums", "evaluator": {"kind": "exact", "normalize": ["strip"]}})
    )
    (suite / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in SUMS))

    out = cli(
        "evolve",
        "start",
        "toy",
        "--suite",
        str(suite),
        "--meta",
        "fixer",
        "--generations",
        "2",
        "--children",
        "2",
        "--jobs",
        "2",
        "--select",
        "best",
        "--json",
        timeout=240,
    )
    assert out.returncode in (0, 1), out.stderr
    done = json.loads(out.stdout)
    gens = {g["gen"]: g for g in done["archive"]}
    assert [(g, gens[g]["score"], gens[g]["parent"]) for g in sorted(gens)] == [
        (0, 0.25, None),
        (1, 0.5, 0),
        (2, 0.5, 0),
    ]
    root = driver.state_dir / "evolve" / done["id"]
    ran_on = {
        p["node"]
        for gen in (1, 2)  # the round's two candidates, scored at once
        for p in json.loads((root / "evals" / f"gen-{gen}" / "predictions.json").read_text())
    }
    assert len(ran_on) >= 2, ran_on


# --- the repository's environment on a node ---------------------------------------------------


def _repo_with_venv(tmp_path: Path) -> Path:
    """A repository tested in a virtual environment of its own (.venv, ignored), whose
    requirements file names nothing."""
    repo = make_repo(
        tmp_path / "repo",
        {".gitignore": ".venv/\n", "requirements.txt": "# nothing yet\n", "README.md": "#\n"},
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    return repo


def test_a_node_builds_the_repositorys_environment_from_its_files_once(
    driver: Workspace, nodes: Nodes, tmp_path: Path
) -> None:
    repo = _repo_with_venv(tmp_path)
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("lease: 2", "lease: 2, resources: {node_c: 0.01}")
    )
    for name in ("first", "second"):  # both on node c, at once: one environment is built
        add_agent(driver, tmp_path, name, f'echo "$VIRTUAL_ENV" > {name}.txt\n')
    thread, reports = run_in_thread(driver, "first-task second-task", repo)
    thread.join()
    (report,) = reports
    assert report.status == "succeeded", report.message
    built = sorted((nodes.homes["c"] / ".agentos" / "cluster" / "envs").glob("repo-*/"))
    assert len(built) == 1 and (built[0] / ".agentos-built").is_file()
    for name in ("first", "second"):
        assert (repo / f"{name}.txt").read_text() == f"{built[0]}\n"


def test_a_node_uses_the_environment_its_own_settings_name_for_the_repository(
    driver: Workspace, nodes: Nodes, tmp_path: Path
) -> None:
    repo = _repo_with_venv(tmp_path)
    named = nodes.homes["c"] / "venvs" / "repo"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(named)], check=True)
    settings = nodes.homes["c"] / "agentos.yaml"
    settings.write_text(f"cluster: {{node: {{environments: {{repo: '{named}'}}}}}}\n")
    driver.settings_file.write_text(
        driver.settings_file.read_text().replace("lease: 2", "lease: 2, resources: {node_c: 0.01}")
    )
    add_agent(driver, tmp_path, "named", 'echo "$VIRTUAL_ENV" > named.txt\n')
    try:
        thread, reports = run_in_thread(driver, "named-task", repo)
        thread.join()
    finally:
        settings.unlink()
    (report,) = reports
    assert report.status == "succeeded", report.message
    assert (repo / "named.txt").read_text() == f"{named}\n"


# --- the command line ---------------------------------------------------------------------------


def test_cluster_status_lists_each_node_with_its_slots_and_agents(
    driver: Workspace, nodes: Nodes, cli: CliRunner
) -> None:
    import re

    out = cli("cluster", "status")
    assert out.returncode == 0, out.stderr
    # Each row's cells (the columns' widths follow the host's name), node ids blanked.
    rows = [
        re.split(r" {2,}", re.sub(r"\S+/[0-9a-f]{8}", "HOST/ID", line).rstrip())
        for line in out.stdout.splitlines()
    ]
    assert rows[0] == ["node", "address", "slots", "runtimes", "agents"]
    assert sorted(rows[1:-1]) == [
        ["HOST/ID", "127.0.0.1", "0/0", "-", "-"],  # the driver's machine: no slot
        ["HOST/ID", "127.0.0.1", "0/2", "-", "-"],
        ["HOST/ID", "127.0.0.1", "0/2", "-", "-"],
        ["HOST/ID", "127.0.0.1", "0/2", "-", "-"],
    ]
    assert rows[-1] == ["4 nodes; 0 of 6 slots busy"]
    listed = json.loads(cli("cluster", "status", "--json").stdout)
    assert listed["address"] == nodes.address
    assert sorted(n["id"] for n in listed["nodes"] if n["slots"]) == sorted(
        h.node_id for h in nodes.handles.values()
    )


def test_cluster_join_prints_the_ray_start_line_and_refuses_a_bad_address(
    cli: CliRunner,
) -> None:
    import shutil

    from agentos.cluster.status import TOOLS

    found = {t: 100 for t in TOOLS if shutil.which(t)}
    slots = {"agentos_slot": 8, **found}
    ray = str(Path(sys.executable).with_name("ray"))
    out = cli("cluster", "join", "10.0.0.1:6379", "--slots", "8", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "argv": [
            ray,
            "start",
            "--address=10.0.0.1:6379",
            f"--resources={json.dumps(dict(sorted(slots.items())), sort_keys=True)}",
            "--disable-usage-stats",
        ],
        "env": {"RAY_USAGE_STATS_ENABLED": "0"},
    }
    for argv, error in (
        (
            ("cluster", "join", "--dry-run"),
            "ADDRESS: give the head's ADDRESS, or --head (not both)",
        ),
        (
            ("cluster", "join", "nowhere", "--dry-run"),
            "ADDRESS: 'nowhere' is not auto, ray://HOST:PORT or HOST:PORT",
        ),
    ):
        bad = cli(*argv)
        assert (bad.returncode, bad.stdout, bad.stderr) == (2, "", f"error: {error}\n")


@pytest.mark.parametrize(
    ("cluster", "error"),
    [
        ("{backend: k8s}", "cluster.backend: Input should be 'local' or 'ray'"),
        (
            "{address: 'head:99999'}",
            "cluster.address: 'head:99999': the port 99999 is not 1..65535",
        ),
        ("{resources: {'a b': 1}}", "cluster.resources: 'a b' is not a Ray resource name"),
    ],
    ids=["backend", "port", "resource"],
)
def test_bad_cluster_settings_are_one_line_naming_the_field_and_start_nothing(
    cli: CliRunner, ws: Workspace, repo: Path, cluster: str, error: str
) -> None:
    ws.settings_file.write_text(f"run: {{guardian: false}}\ncluster: {cluster}\n")
    out = cli("run", "fix the typo in README.md", "--repo", str(repo), "--force")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"error: {ws.settings_file}: {error}\n"
    ws.settings_file.write_text("run: {guardian: false}\n")  # to read the state again
    assert RunStore(Workspace(ws.root)).list() == []


@pytest.mark.process  # what a new process imports
def test_the_cli_imports_ray_only_for_the_ray_backend(
    cli: CliRunner, ws: Workspace, repo: Path
) -> None:
    def imports(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
        out = cli(*argv, env={"PYTHONPROFILEIMPORTTIME": "1"})
        found = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        return out, {m.split(".")[0] for m in found}

    request = ("run", "nothing routes this request at all", "--repo", str(repo), "--force")
    local, imported = imports(*request)
    assert local.returncode == 1 and "ray" not in imported, local.stderr[-500:]
    for argv in (("runs", "list"), ("status",), ("run", "--help"), ("eval", "run", "--help")):
        assert "ray" not in imports(*argv)[1], argv
    # The positive control: with the ray backend Ray is imported (and a cluster that does not
    # answer is one line naming the address, before anything is written).
    ws.settings_file.write_text("run: {guardian: false}\ncluster: {address: '127.0.0.1:9'}\n")
    remote, imported = imports(*request, "--backend", "ray")
    assert remote.returncode == 2 and "ray" in imported
    errors = [line for line in remote.stderr.splitlines() if "|" not in line]
    assert errors == [
        f"error: {ws.settings_file}: cluster.address: no Ray cluster answers at 127.0.0.1:9 "
        "(Connection refused) (start one with `agentos cluster join --head`, or fix the address)"
    ]
    assert RunStore(ws).list()[0].status == "no_match"  # only the local run's record
