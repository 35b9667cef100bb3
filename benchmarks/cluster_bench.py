"""What the cluster backend adds per agent, against the local orchestrator in the same run.

    nice .venv/bin/python benchmarks/cluster_bench.py [--agents 100] [--per-run 10] [--slots 4]

A simulated cluster on this machine (``ray.cluster_utils.Cluster``): a head with no agent
slot (the driver's machine) and three nodes of ``--slots`` slots, each with its own
AGENTOS_HOME. ``--agents`` shell agents that sleep 2 s, in runs of ``--per-run`` (the run's
agents at once), alternately here and on the cluster, so that both see the same machine:

1. Per-agent cost, without the agent's own 2 s: from its setup to the end of its last
   attempt, as the orchestrator drives it (timed at the dispatch seam), here and on the
   cluster. On the cluster, its parts: the bundle out (per run), the node's own work, and
   what is left of the round trip (Ray's scheduling and transfers), the bundle back and its
   checks (fetch, tip, range, compare and swap).
2. Time to the first agent started, from the call to ``start_run``: the first run on the
   cluster (workers, package and repository new to the nodes), then the later ones.
3. Bundles of a 50 MB repository (50 files of 1 MB) with a one-line change: the history a
   node gets once, the bundle a later base costs, the attempt's commit back.

Targets (issue 36): <= 100 ms added per agent; <= 1.25x the local per-agent cost; the
bundle back of a one-line change < 10 KB. Each figure is printed beside its target.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the cluster on 127.0.0.1
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from agentos.hub.store import Hub
from agentos.run.dispatch import Dispatch
from agentos.run.driver import AgentDriver, RunContext
from agentos.run.events import RunEvent
from agentos.run.orchestrator import start_run
from agentos.run.values import AgentState
from agentos.workspace.layout import Workspace, init_workspace

SLEEP = 2.0
MB = 1024 * 1024


def sh(*argv: str, cwd: Path | None = None) -> str:
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout


def git_commit(repo: Path, message: str) -> None:
    sh("git", "add", "-A", cwd=repo)
    sh("git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", message, cwd=repo)


def make_repo(path: Path, files: dict[str, bytes]) -> Path:
    path.mkdir(parents=True)
    sh("git", "init", "-q", "-b", "main", cwd=path)
    for name, data in files.items():
        (path / name).write_bytes(data)
    git_commit(path, "init")
    return path


def add_agents(ws: Workspace, src: Path, prefix: str, count: int, script: str) -> str:
    """``count`` shell agents running ``script``, each with a card; the request for all."""
    hub = Hub(ws.hub_dir)
    for i in range(count):
        name = f"{prefix}-{i}"
        pkg = src / name
        pkg.mkdir(parents=True)
        manifest = {
            "name": name,
            "version": "1.0.0",
            "description": "bench",
            "runtime": "shell",
            "entry": "run.sh",
        }
        (pkg / "agent.yaml").write_text(yaml.safe_dump(manifest))
        (pkg / "run.sh").write_text(script)
        hub.install(str(pkg))
        card = {
            "id": name,
            "agent": name,
            "description": "bench",
            "group": name,
            "triggers": {"keywords": [f"{prefix}x{count}"]},
        }
        (ws.cards_dir / f"{name}.yaml").write_text(yaml.safe_dump(card))
    return f"{prefix}x{count}"


class Timed:
    """A dispatch, timed per agent at the seam: from its setup to the end of its drive."""

    def __init__(self, inner: Any, costs: list[float]) -> None:
        self.inner, self.costs = inner, costs
        self.started: dict[str, float] = {}

    def setup(self, agent: AgentState) -> None:
        self.started[agent.name] = time.perf_counter()
        self.inner.setup(agent)

    def tree_at_base(self, agents: list[AgentState]) -> Path:
        path: Path = self.inner.tree_at_base(agents)
        return path

    def drive(self, agent: AgentState, context: str) -> None:
        try:
            self.inner.drive(agent, context)
        finally:
            self.costs.append(time.perf_counter() - self.started[agent.name] - SLEEP)

    def close(self) -> None:
        self.inner.close()


def timed_run(
    ws: Workspace, request: str, repo: Path, factory: Callable[[RunContext], Dispatch]
) -> float:
    """A run; seconds from its start to its first agent started."""
    first: list[float] = []
    t0 = time.perf_counter()

    def on_event(event: RunEvent) -> None:
        if not first and " started " in event.message and event.agent:
            first.append(time.perf_counter() - t0)

    report = start_run(ws, request, repo, force=True, on_event=on_event, dispatch=factory)
    assert report.status == "succeeded", report.message
    return first[0]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    import ray
    from ray.cluster_utils import Cluster

    from agentos.cluster.dispatch import RayDispatch

    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--per-run", type=int, default=10)
    parser.add_argument("--slots", type=int, default=4)
    args = parser.parse_args()
    runs = max(1, args.agents // args.per_run)
    os.environ["AGENTOS_TMUX_SOCKET"] = f"agentos-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "object_store_memory": 300 * MB},
        )
        for name in "abc":
            cluster.add_node(
                # Ray keeps as many idle workers warm as a node has CPUs: one per slot.
                num_cpus=args.slots,
                object_store_memory=300 * MB,
                resources={"agentos_slot": args.slots},
                env_vars={"AGENTOS_HOME": str(root / f"node-{name}")},
            )
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        print(f"cluster of 3 nodes x {args.slots} slots up in {time.perf_counter() - t0:.1f} s")
        try:
            ws, _ = init_workspace(root / "ws")
            ws.settings_file.write_text(
                f"run: {{guardian: false, retries: 0}}\ncluster: {{address: '{cluster.address}'}}\n"
            )
            request = add_agents(
                ws,
                root / "src",
                "bench",
                args.per_run,
                f'sleep {SLEEP:g}; echo x > "f-$AGENTOS_AGENT-$AGENTOS_RUN_ID.txt"\n',
            )
            repo = make_repo(root / "repo", {"README.md": b"# bench\n"})
            local: list[float] = []
            remote: list[float] = []
            dispatches: list[Any] = []
            firsts: dict[str, list[float]] = {"local": [], "ray": []}

            def here(ctx: RunContext) -> Dispatch:
                return Timed(AgentDriver(ctx), local)

            def there(ctx: RunContext) -> Dispatch:
                inner = RayDispatch(ctx)
                dispatches.append(inner)
                return Timed(inner, remote)

            bundles(root)  # first: it needs no cluster
            for i in range(runs):
                firsts["ray"].append(timed_run(ws, request, repo, there))
                firsts["local"].append(timed_run(ws, request, repo, here))
                print(f"  run {i + 1}/{runs} here and there", file=sys.stderr)
            report(args, local, remote, dispatches, firsts)
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[no-untyped-call]
            subprocess.run(
                ["tmux", "-L", os.environ["AGENTOS_TMUX_SOCKET"], "kill-server"],
                capture_output=True,
            )
    return 0


def report(
    args: argparse.Namespace,
    local: list[float],
    remote: list[float],
    dispatches: list[Any],
    firsts: dict[str, list[float]],
) -> None:
    def steps(name: str) -> list[float]:
        return [x for d in dispatches for x in d.timings.get(name, [])]

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else float("nan")

    here = p50(local)
    warm = dispatches[1:] or dispatches  # the first run starts the nodes' workers
    spec, ray_part, back = (
        [x for d in warm for x in d.timings.get(step, [])]
        for step in ("spec", "ray", "bundle back")
    )
    per_run = [x for d in warm for x in d.timings.get("bundle out", [])]
    packages = [x for d in warm for x in d.timings.get("package out", [])]
    shared = (sum(per_run) + sum(packages)) / max(1, len(spec))
    added = p50(spec) + shared + p50(ray_part) + p50(back)
    print(f"\n{len(remote)} agents on the cluster, {len(local)} here, {args.per_run} per run")
    print(f"per-agent cost here, without its {SLEEP:g} s: p50 {here * 1000:.1f} ms")
    print("what the cluster adds per agent, after the first run (p50; mean in brackets):")
    print(
        f"  the bundle out and the packages, once per run, shared: {shared * 1000:.1f} ms "
        f"(a bundle out: p50 {p50(per_run) * 1000:.1f} ms; "
        + (
            f"a package: p50 {p50(packages) * 1000:.1f} ms)"
            if packages
            else "no package sent: each went once, in the first run)"
        )
    )
    print(f"  the spec: {p50(spec) * 1000:.1f} ms ({mean(spec) * 1000:.1f})")
    print(
        f"  Ray: scheduling, the worker, transfers, the stream of its events: "
        f"{p50(ray_part) * 1000:.1f} ms ({mean(ray_part) * 1000:.1f})"
    )
    print(
        f"  the bundle back, checked and taken (unbundle, range, compare and swap): "
        f"{p50(back) * 1000:.1f} ms ({mean(back) * 1000:.1f})"
    )
    print(f"dispatch overhead per agent: {added * 1000:.1f} ms (target <= 100 ms)")
    print(
        f"local per-agent cost with it: {(here + added) / here:.2f}x the local alone "
        "(target <= 1.25x)"
    )
    starting = dispatches[0].timings.get("ray", []) if dispatches else []
    print(f"  (the first run's Ray part, workers starting: p50 {p50(starting) * 1000:.1f} ms)")
    node = steps("on the node")
    print(
        f"the node's own work per agent, without the {SLEEP:g} s (the local work, on a node): "
        f"p50 {(p50(node) - SLEEP) * 1000:.1f} ms, of which:"
    )
    for step in ("received", "proved", "recorded", "context", "reaper", "setup", "attempt"):
        extra = f" (its {SLEEP:g} s out)" if step == "attempt" else ""
        value = p50(steps(f"node: {step}")) - (SLEEP if step == "attempt" else 0.0)
        print(f"    {step}: p50 {value * 1000:.1f} ms{extra}")
    there = p50(remote)
    print(
        f"end to end on this one machine (driver, raylets and nodes on the same cores): "
        f"p50 {there * 1000:.1f} ms per agent, {there / here:.2f}x here"
    )
    first, later = firsts["ray"][0], p50(firsts["ray"][1:])
    print(
        f"time to first agent started: cluster {first:.2f} s first run (cold: workers, "
        f"package and repository new to the nodes), p50 {later:.2f} s after; here p50 "
        f"{p50(firsts['local']):.2f} s"
    )


def bundles(root: Path) -> None:
    """A 50 MB repository, a one-line change: what each bundle weighs."""
    from agentos.cluster import bundles as b

    files = {f"data-{i:02d}.txt": base64.b64encode(os.urandom(3 * MB // 4)) for i in range(50)}
    big = make_repo(root / "big", files)
    size = sum(len(v) for v in files.values())
    sh("git", "branch", "agent", cwd=big)
    whole = b.create(big, "refs/heads/main")
    base = whole.tip
    sh("git", "checkout", "-q", "agent", cwd=big)
    lines = (big / "data-07.txt").read_bytes().split(b"\n")
    lines[0] = b"changed"
    (big / "data-07.txt").write_bytes(b"\n".join(lines))
    git_commit(big, "one line")
    back = b.create(big, "refs/heads/agent", [base])
    sh("git", "checkout", "-q", "main", cwd=big)
    (big / "README.md").write_text("next base\n")
    git_commit(big, "next base")
    later = b.create(big, "refs/heads/main", [base])
    print(f"\na repository of {size / MB:.0f} MB ({len(files)} files):")
    print(f"  its whole history, once per node: {len(whole.data) / MB:.1f} MB")
    print(f"  a later base, one commit on: {len(later.data)} bytes")
    print(f"  a one-line change back: {len(back.data)} bytes (target < 10 KB)")


if __name__ == "__main__":
    sys.exit(main())
