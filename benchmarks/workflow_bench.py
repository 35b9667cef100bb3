"""Workflow benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/workflow_bench.py [--existing 10000] [--no-judgement]
        [--calibration-only]
    .venv/bin/python benchmarks/workflow_bench.py --write-frequencies

Measured in fresh workspaces, in the same run:

- deduplication's judgement: precision and recall of the deterministic similarity on the
  labelled pairs of tests/data/dedup/ at the default threshold, the calibration part (what
  it was tuned on; also its issue-37 groups alone, the held-out part's kind of pairs) and
  the held-out part (target: recall >= 0.85 at precision >= 0.95; not with
  ``--calibration-only``, for figures to tune by);

- the scheduler per task: N tasks of a one-phase workflow run by the scheduler
  (max_concurrent 1), against the raw primitive, N plain runs (`start_run`, what
  `agentos run` does) of the same agent; the ratio (target <= 1.2x);
- deduplication's cost: comparing a new task with N live tasks of the same phase (target
  <= 20 ms at 10,000) through the inverted index (the terms' document frequencies kept in
  state.db as tasks come and go; only the tasks holding one of the new task's heaviest
  terms are read), against a plain loop over the same features (every live task read and
  scored), with the same answers; and the time to add one new task, deduplicated or not.

``--write-frequencies`` writes agentos/workflows/similarity_frequencies.json from the
calibration part (the background document frequencies every comparison starts from).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from _writer import writer_workspace

from agentos.workflows import similarity
from agentos.workflows.store import WorkflowStore
from agentos.workspace.layout import init_workspace

LABELLED = Path(__file__).resolve().parent.parent / "tests" / "data" / "dedup"

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


def labelled(name: str) -> list[dict[str, object]]:
    lines = (LABELLED / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def write_frequencies() -> None:
    groups: dict[object, list[str]] = {}
    for pair in labelled("calibration"):
        groups.setdefault(pair["group"], []).extend((str(pair["a"]), str(pair["b"])))
    found = similarity.count(groups.values())
    similarity.FREQUENCIES_FILE.write_text(similarity.frequencies_json(found), encoding="utf-8")
    print(f"wrote {similarity.FREQUENCIES_FILE} ({found.documents} groups)")


def judgement(held_out: bool = True) -> None:
    """Precision and recall at the default threshold: the calibration part, its issue-37
    groups alone (the held-out part's kind of pairs), and the held-out part unless not."""
    threshold = similarity.DEFAULT_THRESHOLD
    calibration = labelled("calibration")
    parts = [
        ("calibration", calibration),
        ("  its g-groups", [p for p in calibration if str(p["group"]).startswith("g")]),
    ]
    if held_out:
        parts.append(("heldout", labelled("heldout")))
    for name, pairs in parts:
        said = [
            (similarity.text_similarity(str(p["a"]), str(p["b"])) >= threshold, bool(p["dup"]))
            for p in pairs
        ]
        found = sum(1 for s, d in said if s and d)
        claimed = sum(1 for s, _ in said if s)
        duplicates = sum(1 for _, d in said if d)
        print(
            f"{name + ':':15} precision {found / max(1, claimed):.3f}, "
            f"recall {found / duplicates:.3f} at threshold {threshold} "
            f"({len(pairs)} pairs, {duplicates} duplicates, {claimed - found} false)"
        )
    print("target (held-out): recall >= 0.85 at precision >= 0.95")


REWORDED = {"Add ": "Write ", "Fix ": "Repair ", "Remove ": "Delete ", "Update ": "Change "}


def reworded(text: str) -> str:
    """An existing task in other words: what deduplication must catch."""
    for old, new in REWORDED.items():
        text = text.replace(old, new)
    return text.replace(" the ", " ")


def index_vs_loop(store: WorkflowStore, existing: list[str], rng: random.Random, n: int) -> None:
    """The duplicate check of a new task (the live task alike at or over the threshold),
    through the index and by a plain loop over every live task's features; half the new
    tasks are existing ones reworded, half new."""
    threshold = similarity.DEFAULT_THRESHOLD
    texts = [
        reworded(rng.choice(existing)) if i % 2 else task_text(rng, rng.randrange(10**6))
        for i in range(n)
    ]
    indexed, plain, duplicates = [], [], 0
    for text in texts:
        t = time.perf_counter()
        by_index = store.similar(text, execution_id="bench", phase=1, limit=1, floor=threshold)
        indexed.append(time.perf_counter() - t)
        t = time.perf_counter()
        by_loop = [m for m in store.plain_matches("bench", 1, text) if m.score >= threshold][:1]
        plain.append(time.perf_counter() - t)
        got = [(m.task, round(m.score, 9)) for m in by_index]
        assert got == [(m.task, round(m.score, 9)) for m in by_loop], text
        duplicates += bool(got)
    index_ms = statistics.median(indexed) * 1000
    loop_ms = statistics.median(plain) * 1000
    print(
        f"duplicate check against {len(existing)} live tasks, index: {index_ms:.2f} ms "
        f"(median of {n}); target <= 20 ms: {'meets' if index_ms <= 20 else 'misses'}"
    )
    print(
        f"duplicate check against {len(existing)} live tasks, plain loop: {loop_ms:.2f} ms "
        f"(the same answers: {duplicates} of {n} found a duplicate)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--existing", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--write-frequencies", action="store_true")
    parser.add_argument("--no-scheduler", action="store_true", help="skip the scheduler's figures")
    parser.add_argument(
        "--no-judgement", action="store_true", help="skip the labelled pairs' figures"
    )
    parser.add_argument(
        "--calibration-only",
        action="store_true",
        help="the calibration part's figures, not the held-out part's (printing those is a "
        "measurement)",
    )
    args = parser.parse_args()
    if args.write_frequencies:
        write_frequencies()
        return
    if not args.no_judgement:
        judgement(held_out=not args.calibration_only)
    if not args.no_scheduler:
        scheduler_vs_runs(args.tasks)
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        store = WorkflowStore(ws)
        store.create_execution("bench", {"id": "bench"}, tmp, {})
        started = time.perf_counter()
        existing = [task_text(rng, i) for i in range(args.existing)]
        for text in existing:
            store.add_task("bench", 1, text, creator="bench", dedup=False)
        filled = time.perf_counter() - started

        def add(dedup: bool) -> float:
            text = task_text(rng, rng.randrange(10**6))
            t = time.perf_counter()
            store.add_task("bench", 1, text, creator="bench", dedup=dedup)
            return time.perf_counter() - t

        for _ in range(5):
            add(True)  # warm
        index_vs_loop(store, existing, rng, args.samples)
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
