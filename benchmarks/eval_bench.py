"""Eval harness benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/eval_bench.py [--repeat 3]

On the bundled `arithmetic` suite (six tasks) with the bundled `calculator` agent, in a
fresh workspace, measured in the same run:

- the harness per task (`run_eval`: the wrapper, the agent's environment and sandbox, the
  answer file, grading, the report and its receipt), at --jobs 1;
- the raw primitive: the same agent process (the python runtime's command) spawned
  directly in the same sandbox backend and policy, six times, nothing else;
- the ratio harness / raw (target <= 1.3x), and the throughput of --jobs 2 against
  --jobs 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentos.evals.harness import find_suite, run_eval
from agentos.hub.store import Hub
from agentos.runtimes import AgentTask, get_runtime
from agentos.sandbox import choose
from agentos.sandbox.confine import Scene, agent_policy
from agentos.sandbox.probe import run_confined
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import init_workspace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        ws.settings_file.write_text("run: {guardian: false}\n")
        suite = find_suite(ws, "arithmetic")
        n_tasks = 6

        def harness(jobs: int) -> float:
            t = time.perf_counter()
            report = run_eval(ws, suite, "calculator", jobs=jobs)
            assert len(report.predictions) == n_tasks
            return time.perf_counter() - t

        harness(1)  # warm caches (bytecode, the hub's digests)
        one = [harness(1) for _ in range(args.repeat)]
        two = [harness(2) for _ in range(args.repeat)]

        info, manifest = Hub(ws.hub_dir).get("calculator")
        settings = ws.settings.sandbox
        sandbox = choose(settings)
        scene = Scene(settings, ws.root, Path(tmp) / "raw", Path(os.environ.get("HOME", "/")))
        runtime = get_runtime(manifest.runtime)

        def raw_task(i: int) -> float:
            scratch = Path(tmp) / "raw" / f"{i}"
            scratch.mkdir(parents=True, exist_ok=True)
            files = AgentFiles(scratch / ".run", scratch / "log")
            files.io.mkdir(parents=True, exist_ok=True)
            task = AgentTask(
                run_id="bench",
                agent=manifest.name,
                manifest=manifest,
                package_dir=info.path,
                worktree=scratch,
                repo=scratch,
                workspace=ws.root,
                request="2 + 3 * 4",
                files=files,
            )
            pol = agent_policy(
                scene,
                package=manifest.sandbox,
                package_dir=info.path,
                worktree=scratch,
                own_files=[files.io],
                path_env=":".join(runtime.path_dirs()),
                persistent_home=None,
            )
            env = {
                "PATH": ":".join([*runtime.path_dirs(), "/usr/bin", "/bin"]),
                "AGENTOS_REQUEST": task.request,
                "AGENTOS_OUTPUT_FILE": str(files.io / "answer"),
                "HOME": "/tmp",
            }
            t = time.perf_counter()
            done, _ = run_confined(sandbox, pol, runtime.command(task), env=env, capture=True)
            assert done.exit_code == 0, done
            return time.perf_counter() - t

        raw_task(-1)
        raw = [sum(raw_task(r * n_tasks + i) for i in range(n_tasks)) for r in range(args.repeat)]

        per_task = statistics.median(one) / n_tasks * 1e3
        per_raw = statistics.median(raw) / n_tasks * 1e3
        version = sys.version.split()[0]
        print(f"sandbox: {sandbox.backend}; {n_tasks} tasks, {args.repeat} repeats, py {version}")
        print(f"harness, --jobs 1:  {per_task:7.1f} ms per task (median of the runs)")
        print(f"raw agent process:  {per_raw:7.1f} ms per task (same sandbox, spawned directly)")
        ratio = per_task / per_raw
        verdict = "meets" if ratio <= 1.3 else "MISSES"
        print(f"ratio harness/raw:  {ratio:7.2f}x  (target 1.3x: {verdict})")
        speedup = statistics.median(one) / statistics.median(two)
        print(f"--jobs 2 throughput: {speedup:6.2f}x --jobs 1")


if __name__ == "__main__":
    main()
