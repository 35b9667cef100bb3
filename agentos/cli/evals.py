"""``agentos eval``: measure an agent package on an eval suite."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from agentos.cli._common import (
    backend_option,
    console,
    fail,
    json_option,
    print_json,
    table,
    workspace,
)


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
@backend_option
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
    backend: str | None,
    as_json: bool,
) -> None:
    """Run AGENT on each task of SUITE (a folder, or a name under evals/) and score it:
    each task's answer graded by the suite's evaluator, the dimensions, the composite.
    The report is kept in .agentos/evals/ID/ with an `eval` receipt. Exit 0 when the
    composite reaches the suite's threshold (and --min-score), else 1. With --backend ray
    the tasks run on the nodes of the Ray cluster, --jobs at once, graded here."""
    from agentos.cluster import backend_of
    from agentos.evals.harness import find_suite, run_eval

    ws = workspace()
    with _progress(enabled=not as_json) as (on_start, on_task):
        report = run_eval(
            ws,
            find_suite(ws, suite),
            agent,
            split=split,
            samples=samples,
            seed=seed,
            jobs=jobs,
            on_start=on_start,
            on_task=on_task,
            backend=backend_of(ws, backend),
        )
    passed = report.passed and (min_score is None or report.composite >= min_score)
    if as_json:
        print_json({**report.as_dict(), "predictions": [p.as_dict() for p in report.predictions]})
    else:
        verdict = "passed" if passed else "did not pass"
        _print_report(
            report.as_dict(),
            [p.as_dict() for p in report.predictions],
            f"; {verdict}; receipt {report.receipt}",
        )
    if not passed:
        fail(ctx, 1)


@contextmanager
def _progress(*, enabled: bool) -> Iterator[tuple[Any, Any]]:
    """A rich progress bar on stderr for people (a terminal); nothing otherwise."""
    if not enabled or not sys.stderr.isatty():
        yield None, None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("tasks", total=None)

        def start(total: int) -> None:
            bar.update(task, total=total)

        def done(prediction: Any) -> None:
            bar.update(task, advance=1, description=f"{prediction.task}: {prediction.score:g}")

        yield start, done


@eval_.command("list")
@json_option
def list_(as_json: bool) -> None:
    """The eval suites: the workspace's (evals/) and the bundled ones."""
    from agentos.evals.suite import available_suites

    found = available_suites(workspace().root / "evals")
    if as_json:
        print_json({"suites": found})
        return
    table(
        None,
        ["suite", "mode", "splits", "where"],
        [(f["name"], f["mode"], ", ".join(f["splits"]), f["path"]) for f in found],
    )


@eval_.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@json_option
@click.pass_context
def lint(ctx: click.Context, path: Path | None, as_json: bool) -> None:
    """Check a suite (PATH, or every suite under the workspace's evals/): its suite.yaml
    and every split, each problem one line naming the file. Exit 2 when any."""
    from agentos.evals.suite import lint_suites

    ws = workspace()
    problems, checked = lint_suites([path] if path else sorted((ws.root / "evals").glob("*/")))
    if as_json:
        print_json({"ok": not problems, "suites": checked, "problems": problems})
    else:
        for line in problems:
            click.echo(line)
        click.echo(f"{checked} suite{'s' * (checked != 1)} checked: {len(problems)} problem(s)")
    if problems:
        fail(ctx, 2)


@eval_.command()
@json_option
def reports(as_json: bool) -> None:
    """The kept eval reports, newest first."""
    from agentos.cli import views

    data = views.evals(workspace())
    if as_json:
        print_json(data)
        return
    reports = data["evals"]
    table(
        None,
        ["id", "suite", "split", "agent", "composite", "passed"],
        [
            (r["id"], r["suite"], r["split"], r["agent"], f"{r['composite']:.3f}", r["passed"])
            for r in reports
        ],
    )


@eval_.command()
@click.argument("eval_id", metavar="ID")
@json_option
def show(eval_id: str, as_json: bool) -> None:
    """An eval's report and each task's answer, score and feedback."""
    from agentos.evals.reports import load_report

    report, predictions = load_report(workspace(), eval_id)
    if as_json:
        print_json({**report, "predictions": predictions})
        return
    _print_report(report, predictions)


def _print_report(
    report: dict[str, Any], predictions: list[dict[str, Any]], tail: str = ""
) -> None:
    """A report for people: each task, then the dimensions and the composite."""
    table(
        f"eval {report['id']}: {report['agent']} on {report['suite']}/{report['split']}",
        ["task", "score", "seconds", "feedback"],
        [(p["task"], f"{p['score']:g}", f"{p['seconds']:.2f}", p["feedback"]) for p in predictions],
    )
    usage = report.get("usage") or {}
    if usage.get("reported"):
        said = ", ".join(f"{k} {usage[k]:g}" for k in ("tokens", "cost") if k in usage)
        console.print(
            f"the agent reported {said} over {usage['reported']} of {len(predictions)} tasks",
            markup=False,
        )
    dims = ", ".join(f"{k} {v:.3f}" for k, v in report["dimensions"].items())
    console.print(f"composite {report['composite']:.3f} ({dims}){tail}", markup=False)


@eval_.command("compare")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@json_option
def compare_(a: str, b: str, as_json: bool) -> None:
    """How eval B differs from eval A of the same suite and split: each dimension, the
    composite, and each task's score (B minus A). Evals of different suites: exit 2."""
    from agentos.evals.reports import compare

    diff = compare(workspace(), a, b)
    if as_json:
        print_json(diff)
        return
    table(
        f"{diff['a']['agent']} ({a}) -> {diff['b']['agent']} ({b}) on "
        f"{diff['suite']}/{diff['split']}",
        ["task", "A", "B", "delta"],
        [(t["task"], f"{t['a']:g}", f"{t['b']:g}", f"{t['delta']:+g}") for t in diff["tasks"]],
    )
    dims = ", ".join(f"{k} {v:+.3f}" for k, v in diff["dimensions"].items())
    console.print(f"composite {diff['composite']:+.3f} ({dims})", markup=False)
