"""CPU time of one guardian cycle with 20 live agents, against a raw `tmux list-panes -a`.

Starts 20 shell agents in real tmux panes (on a private tmux server), laid out as the
orchestrator lays them out, with their runs in state.db; then times full guardian cycles
(read state.db, one batched list-panes, one batched capture of every pane, decide,
record) and, in the same run, the bare `tmux list-panes -a` a cycle builds on.

CPU time is user + system of this process and of the tmux clients it forked
(getrusage SELF + CHILDREN); the tmux server's own CPU is read from /proc and shown apart.

    .venv/bin/python benchmarks/guardian_bench.py [--agents 20] [--cycles 50]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

AGENT_SCRIPT = 'i=0; while true; do i=$((i+1)); echo "step $i of the task"; sleep 1; done\n'


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def server_cpu(socket: str) -> float:
    out = subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "#{pid}"], capture_output=True, text=True
    )
    fields = Path(f"/proc/{out.stdout.strip()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=50)
    args = parser.parse_args()

    socket = f"agentos-bench-{uuid.uuid4().hex[:8]}"
    os.environ["AGENTOS_TMUX_SOCKET"] = socket
    tmp = Path(tempfile.mkdtemp(prefix="guardian-bench-"))
    try:
        run_bench(tmp, socket, args.agents, args.cycles)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def run_bench(tmp: Path, socket: str, n_agents: int, n_cycles: int) -> None:
    from agentos.guardian.daemon import Guardian
    from agentos.hub.store import Hub
    from agentos.run.launch import prepare
    from agentos.run.sessions import Sessions, session_name
    from agentos.run.store import RunStore, new_run_id
    from agentos.runtimes import AgentTask
    from agentos.workspace.files import RunFiles
    from agentos.workspace.layout import init_workspace

    ws, _ = init_workspace(tmp / "ws")
    pkg = tmp / "pkg"
    pkg.mkdir()
    (pkg / "agent.yaml").write_text(
        "name: ticker\nversion: 1.0.0\ndescription: Prints.\nruntime: shell\nentry: run.sh\n"
    )
    (pkg / "run.sh").write_text(AGENT_SCRIPT)
    hub = Hub(ws.hub_dir)
    hub.install(str(pkg))
    info, manifest = hub.get("ticker")
    store = RunStore(ws)
    sessions = Sessions(ws.root)
    per_run = 4  # agents per run, like a task force of four
    for i in range(n_agents):
        if i % per_run == 0:
            run_id = f"{new_run_id()}{i:02d}"
            store.create(run_id, "bench", tmp, status="running")
            store.update(run_id, started_at=time.time())
        name = f"ticker{i:02d}"
        worktree = tmp / "wt" / run_id / name
        worktree.mkdir(parents=True)
        files = RunFiles.of(ws, run_id).agent(name)
        task = AgentTask(
            run_id=run_id,
            agent=name,
            manifest=manifest,
            package_dir=info.path,
            worktree=worktree,
            repo=tmp,
            workspace=ws.root,
            request="bench",
            files=files,
        )
        pane, _ = prepare(task, files)
        session = session_name(run_id, name)
        store.add_agent(
            run_id,
            name,
            manifest.version,
            session=session,
            worktree=str(worktree),
            status="running",
            attempts=1,
        )
        sessions.start(session, pane, worktree)
    store.close()
    deadline = time.monotonic() + 20
    while len([p for p in sessions.panes() if not p.dead]) < n_agents:
        if time.monotonic() > deadline:
            sys.exit("the agents did not start")
        time.sleep(0.05)

    guardian = Guardian(ws)
    report = guardian.cycle()  # warm up: first sight of every agent, manifests cached
    assert len(report.agents) == n_agents, report.agents

    def measure(fn: object, n: int) -> tuple[float, float, float]:
        s0, c0, w0 = server_cpu(socket), cpu(), time.perf_counter()
        for _ in range(n):
            fn()  # type: ignore[operator]
        w1, c1, s1 = time.perf_counter(), cpu(), server_cpu(socket)
        return (c1 - c0) / n * 1000, (s1 - s0) / n * 1000, (w1 - w0) / n * 1000

    healths: set[str] = set()

    def one_cycle() -> None:
        healths.update(a["health"] for a in guardian.cycle().agents)

    raw_argv = [
        "tmux",
        "-L",
        socket,
        "list-panes",
        "-a",
        "-F",
        "#{session_name}\t#{pane_pid}\t#{pane_dead}\t#{pane_current_command}",
    ]

    def raw_list_panes() -> None:
        subprocess.run(raw_argv, capture_output=True, check=True)

    cyc = measure(one_cycle, n_cycles)
    raw = measure(raw_list_panes, n_cycles)
    guardian.close()

    print(
        f"guardian cycle, {n_agents} live agents in {-(-n_agents // per_run)} runs, "
        f"{n_cycles} cycles (healths seen: {', '.join(sorted(healths))})"
    )
    print(
        f"  one cycle:                 {cyc[0]:7.2f} ms CPU (guardian + tmux clients), "
        f"{cyc[1]:6.2f} ms tmux server, {cyc[2]:7.2f} ms wall"
    )
    print(
        f"  raw `tmux list-panes -a`:  {raw[0]:7.2f} ms CPU (python + tmux client),    "
        f"{raw[1]:6.2f} ms tmux server, {raw[2]:7.2f} ms wall"
    )
    print(
        f"  ratio cycle / list-panes:  {cyc[0] / raw[0]:7.1f}x CPU, "
        f"{(cyc[0] + cyc[1]) / (raw[0] + raw[1]):.1f}x CPU incl. server, "
        f"{cyc[2] / raw[2]:.1f}x wall"
    )
    per_minute = (cyc[0] + cyc[1]) / 60_000 * 100
    print(
        f"  at the default 60 s interval: {per_minute:.4f}% of one core "
        "(no target was set: issue 8 asked for the figure)"
    )


if __name__ == "__main__":
    main()
