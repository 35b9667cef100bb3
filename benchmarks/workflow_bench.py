"""Workflow benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/workflow_bench.py [--existing 10000]

Measured in fresh workspaces, in the same run:

- the scheduler per task: N tasks of a one-phase workflow run by the scheduler
  (max_concurrent 1), against the raw primitive, N plain runs (`start_run`, what
  `agentos run` does) of the same agent; the ratio (target <= 1.2x);
- deduplication: the time to add one new task (its features, the indexed lookup of the live
  tasks of its execution and phase that could be alike, the exact score of those, the
  insert) against N existing tasks of the same phase (target <= 20 ms at 10,000), next to
  the same insert with deduplication off.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from _writer import writer_workspace

from agentos.workflows.store import WorkflowStore
from agentos.workspace.layout import init_workspace

VERBS = ["Add", "Fix", "Remove", "Update", "Document", "Refactor", "Test", "Speed up", "Validate"]
THINGS = ["the parser", "the cache", "the login form", "the exporter", "the scheduler", "the API"]
FILES = ["app.py", "cli.py", "db/models.py", "api/routes.py", "utils/strings.py", "README.md"]


def task_text(rng: random.Random, i: int) -> str:
    return (
        f"{rng.choice(VERBS)} {rng.choice(THINGS)} in {rng.choice(FILES)} "
        f"for handler_{i % 997} case {i}"
    )


def scheduler_vs_runs(tasks: int) -> None:
    from agentos.run.orchestrator import start_run
    from agentos.run.values import RunOptions
    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_task, open_execution
    from agentos.workflows.scheduler import Scheduler

    with writer_workspace() as (ws, repo):
        start_run(ws, "write a file", repo, force=True)  # warm
        t = time.perf_counter()
        for n in range(tasks):
            start_run(ws, f"write file {n}", repo, RunOptions(force=True, agent="writer"))
        plain = (time.perf_counter() - t) / tasks
        workflow = WorkflowDefinition.model_validate(
            {
                "id": "bench",
                "name": "bench",
                "phases": [{"id": 1, "name": "w", "description": "w", "agent": "writer"}],
                "config": {"max_concurrent": 1, "task_deduplication_enabled": False},
            }
        )
        execution = open_execution(ws, workflow, repo, {})
        for n in range(tasks):
            create_task(ws, f"write file number {n}", 1, execution_id=execution)
        t = time.perf_counter()
        Scheduler(ws, execution).run()
        scheduled = (time.perf_counter() - t) / tasks
    print(f"plain run per task:     {plain * 1000:.0f} ms (start_run, {tasks} runs)")
    print(f"scheduler per task:     {scheduled * 1000:.0f} ms ({tasks} tasks, one at a time)")
    print(f"ratio scheduler/plain:  {scheduled / plain:.2f}x (target <= 1.2x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--existing", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=6)
    args = parser.parse_args()
    scheduler_vs_runs(args.tasks)
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        store = WorkflowStore(ws)
        store.create_execution("bench", {"id": "bench"}, tmp, {})
        started = time.perf_counter()
        for i in range(args.existing):
            store.add_task("bench", 1, task_text(rng, i), creator="bench", dedup=False)
        filled = time.perf_counter() - started

        def add(dedup: bool) -> float:
            text = task_text(rng, rng.randrange(10**6))
            t = time.perf_counter()
            store.add_task("bench", 1, text, creator="bench", dedup=dedup)
            return time.perf_counter() - t

        for _ in range(5):
            add(True)  # warm
        with_dedup = [add(True) for _ in range(args.samples)]
        raw = [add(False) for _ in range(args.samples)]
        store.close()
    dedup_ms = statistics.median(with_dedup) * 1000
    raw_ms = statistics.median(raw) * 1000
    print(f"existing tasks: {args.existing} (inserted in {filled:.1f}s)")
    print(f"add a task, deduplicated:  {dedup_ms:.2f} ms (median of {args.samples})")
    print(f"add a task, no dedup:      {raw_ms:.2f} ms (the raw insert)")
    print(
        f"dedup cost: {dedup_ms - raw_ms:.2f} ms; target <= 20 ms: "
        f"{'meets' if dedup_ms <= 20 else 'misses'}"
    )


if __name__ == "__main__":
    main()
