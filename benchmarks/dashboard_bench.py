"""Event stream benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/dashboard_bench.py [--runs 6]

In a fresh workspace, the same one-agent run (a shell agent writing a file) N times with
its events written to state.db's stream, and N times with that write turned off, measured
in the same run: the cost of the stream per run (target <= 1.05x). (SSE latency to a
browser comes with the dashboard.)
"""

from __future__ import annotations

import argparse
import statistics
import time

from _writer import writer_workspace

from agentos import orchestrator
from agentos._run_types import RunOptions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    with writer_workspace() as (ws, repo):

        def run(n: int) -> float:
            t = time.perf_counter()
            orchestrator.start_run(
                ws, f"write file {n}", repo, RunOptions(force=True, agent="writer")
            )
            return time.perf_counter() - t

        run(0)  # warm
        on, off = [], []
        real = orchestrator.Orchestrator._store_event
        for n in range(args.runs):  # interleaved: the same conditions for both
            on.append(run(2 * n + 1))
            orchestrator.Orchestrator._store_event = lambda self, event: None  # type: ignore[method-assign]
            off.append(run(2 * n + 2))
            orchestrator.Orchestrator._store_event = real  # type: ignore[method-assign]
    with_ms, without_ms = statistics.median(on) * 1000, statistics.median(off) * 1000
    print(f"run with the event stream:    {with_ms:.0f} ms (median of {args.runs})")
    print(f"run without it:               {without_ms:.0f} ms")
    print(f"ratio: {with_ms / without_ms:.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
