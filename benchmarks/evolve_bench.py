"""Evolve loop benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/evolve_bench.py [--generations 6]

In a fresh workspace, a toy shell package on a four-task suite and a meta agent that adds
a line to it each generation (its own work: next to nothing). Measured in the same run:

- the loop's own overhead per generation: each generation's wall time (from its
  metadata) minus the meta agent's run (the whole confined run: its sandbox made, its
  process, its sandbox removed) and the evals (each `run_eval` call whole, its report
  included), both recorded in the metadata: what is left is the worktree, the suite's
  snapshot, the commit, the gate check, the smoke test, the patch, the copy of the
  training eval for later meta agents, the metadata, the receipt and the archive snapshot;
- the raw primitive: a bare `git worktree add` + write a file + `git add` + `git commit`
  + `git worktree remove`, on a repository of the same files;
- the ratio loop overhead / raw (target <= 2x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from agentos.evolve.loop import Evolver
from agentos.evolve.start import create
from agentos.hub.store import Hub
from agentos.workspace.layout import init_workspace

TOY = (
    'grep -m1 "^$AGENTOS_REQUEST=" "$AGENTOS_PACKAGE_DIR/answers.txt" | cut -d= -f2'
    ' > "$AGENTOS_OUTPUT_FILE"\n'
)
META = 'echo "x$AGENTOS_EVOLVE_GENERATION=0" >> answers.txt\n'
TASKS = [("two", "2+2", "4"), ("three", "3+3", "6"), ("five", "5+5", "10"), ("seven", "7+7", "14")]


def package(root: Path, name: str, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    (root / "agent.yaml").write_text(
        f"name: {name}\nversion: 1.0.0\ndescription: bench\nruntime: shell\nentry: run.sh\n"
    )
    for rel, text in files.items():
        (root / rel).write_text(text)
    return root


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def raw_generation(repo: Path, n: int) -> float:
    tree = repo.parent / f"raw-{n}"
    t = time.perf_counter()
    git(repo, "worktree", "add", "-q", "-b", f"raw-{n}", str(tree), "main")
    with (tree / "answers.txt").open("a") as fh:
        fh.write(f"x{n}=0\n")
    git(tree, "add", "-A")
    git(tree, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", f"raw {n}")
    git(repo, "worktree", "remove", "--force", str(tree))
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generations", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ws, _ = init_workspace(base / "ws")
        hub = Hub(ws.hub_dir)
        hub.install(str(package(base / "src" / "toy", "toy", {"run.sh": TOY, "answers.txt": ""})))
        hub.install(str(package(base / "src" / "meta", "meta", {"run.sh": META})))
        suite = base / "suite"
        suite.mkdir()
        (suite / "suite.yaml").write_text('{"name": "sums", "evaluator": {"kind": "exact"}}')
        (suite / "tasks.jsonl").write_text(
            "".join(json.dumps({"id": i, "input": q, "expected": a}) + "\n" for i, q, a in TASKS)
        )
        evo = create(
            ws, "toy", str(suite), meta="meta", generations=args.generations, select="latest"
        )
        started = time.perf_counter()
        Evolver(evo, cancel=threading.Event()).run()
        total = time.perf_counter() - started
        overheads, metas, evals = [], [], []
        for gen in evo.generations().values():
            if gen.gen == 0:
                continue
            spent = sum(s["seconds"] for s in gen.scores.values())
            meta = gen.meta["seconds"] if gen.meta else 0.0
            overheads.append(gen.ended_at - gen.started_at - meta - spent)
            metas.append(meta)
            evals.append(spent)

        repo = base / "raw" / "repo"
        repo.mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        (repo / "agent.yaml").write_text((base / "src" / "toy" / "agent.yaml").read_text())
        (repo / "run.sh").write_text(TOY)
        (repo / "answers.txt").write_text("")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init")
        raw_generation(repo, 0)  # warm
        raw = [raw_generation(repo, n) for n in range(1, args.generations + 1)]

        loop_ms = statistics.median(overheads) * 1000
        raw_ms = statistics.median(raw) * 1000
        print(f"generations: {len(overheads)} in {total:.2f}s (the initial one's eval included)")
        print(f"meta agent per generation: {statistics.median(metas) * 1000:.1f} ms (median)")
        print(f"evals per generation:      {statistics.median(evals) * 1000:.1f} ms (median)")
        print(f"loop overhead per generation: {loop_ms:.1f} ms (median)")
        print(f"raw worktree add + commit + remove: {raw_ms:.1f} ms (median)")
        print(f"ratio loop / raw: {loop_ms / raw_ms:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
