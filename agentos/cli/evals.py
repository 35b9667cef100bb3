"""``agentos eval``: measure an agent package on an eval suite."""

from __future__ import annotations

import click

from agentos.cli._common import console, fail, json_option, print_json, table, workspace


@click.group("eval")
def eval_() -> None:
    """Eval suites: score an agent package on a suite of tasks (answer mode so far)."""


@eval_.command()
@click.argument("suite")
@click.option("--agent", "agent", required=True, metavar="NAME[@VERSION]", help="The package.")
@click.option("--split", default="tasks", show_default=True, help="The split (SPLIT.jsonl).")
@click.option("--samples", type=click.IntRange(min=1), help="Run this many tasks, drawn at random.")
@click.option("--seed", type=int, help="The draw's seed: the same seed picks the same tasks.")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option(
    "--min-score",
    type=click.FloatRange(0, 1),
    help="Exit 1 unless the composite reaches this (besides the suite's threshold).",
)
@json_option
@click.pass_context
def run(
    ctx: click.Context,
    suite: str,
    agent: str,
    split: str,
    samples: int | None,
    seed: int | None,
    jobs: int,
    min_score: float | None,
    as_json: bool,
) -> None:
    """Run AGENT on each task of SUITE (a folder, or a name under evals/) and score it:
    each task's answer graded by the suite's evaluator, the dimensions, the composite.
    The report is kept in .agentos/evals/ID/ with an `eval` receipt. Exit 0 when the
    composite reaches the suite's threshold (and --min-score), else 1."""
    from agentos.evals.harness import find_suite, run_eval

    ws = workspace()
    report = run_eval(
        ws,
        find_suite(ws, suite),
        agent,
        split=split,
        samples=samples,
        seed=seed,
        jobs=jobs,
    )
    passed = report.passed and (min_score is None or report.composite >= min_score)
    if as_json:
        print_json({**report.as_dict(), "predictions": [p.as_dict() for p in report.predictions]})
    else:
        table(
            f"eval {report.id}: {report.agent} on {report.suite}/{report.split}",
            ["task", "score", "seconds", "feedback"],
            [(p.task, f"{p.score:g}", f"{p.seconds:.2f}", p.feedback) for p in report.predictions],
        )
        dims = ", ".join(f"{k} {v:.3f}" for k, v in report.dimensions.items())
        verdict = "passed" if passed else "did not pass"
        console.print(
            f"composite {report.composite:.3f} ({dims}); {verdict}; receipt {report.receipt}",
            markup=False,
        )
    if not passed:
        fail(ctx, 1)
