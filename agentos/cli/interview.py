"""``agentos interview``: score a request and ask what is missing before any work starts."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from agentos.cli._common import (
    console,
    err_console,
    fail,
    json_option,
    print_json,
    table,
    workspace,
)
from agentos.interview.engine import AXES, Interview, amend, interview_in
from agentos.workspace.layout import Workspace

MAX_ROUNDS = 3


@click.command()
@click.argument("request")
@json_option
@click.option(
    "--no-input", is_flag=True, help="Never ask the questions interactively, even in a terminal."
)
@click.pass_context
def interview(ctx: click.Context, request: str, as_json: bool, no_input: bool) -> None:
    """Score REQUEST on goal, constraints, scope, context and success, and ask one question
    per weak axis when it is too vague to start.

    In a terminal (stdin a TTY, without --json or --no-input) the questions are asked;
    the answers are appended to the request and it is scored again.

    Exit status: 0 when the request passes; 1 when it is blocked; 2 for bad input (an empty
    request, an invalid agentos.yaml)."""
    ws = workspace()
    result = interview_in(ws, request)
    if not as_json and not no_input and sys.stdin.isatty():
        result = converse(ws, result)
    if as_json:
        print_json(result.as_dict())
    else:
        _show(result)
    if not result.passed:
        fail(ctx, 1)


def converse(ws: Workspace, result: Interview) -> Interview:
    """Ask the questions, append the answers, score again, until it passes or the person
    stops answering."""
    for _ in range(MAX_ROUNDS):
        if result.passed:
            break
        _show(result)
        if result.rewrite and click.confirm(
            "Use the proposed rewrite as the request?", default=False
        ):
            result = interview_in(ws, result.rewrite)
            continue
        console.print("Answer what you can; an empty answer skips the question.")
        answers: dict[str, str] = {}
        for q in result.questions:
            answer = click.prompt(
                f"{q.axis}: {q.text}\n>", default="", show_default=False, prompt_suffix=" "
            )
            if answer.strip():
                answers[q.axis] = answer
        if not answers:
            break
        result = interview_in(ws, amend(result.request, answers))
        console.print()
    return result


def _show(result: Interview) -> None:
    verdict = "[green]passed[/]" if result.passed else "[red]blocked[/]"
    console.print(f"{verdict}: ambiguity {result.ambiguity:.3f} (threshold {result.threshold})")
    for reason in result.reasons:
        console.print(f"  {escape(reason)}")
    table(
        None,
        ["axis", "score", "floor", "weight", "found"],
        [
            (
                a,
                f"{result.axes[a]:.3f}",
                f"{result.floors.get(a, 0.0):.2f}",
                f"{result.weights.get(a, 0.0):.2f}",
                "; ".join(result.evidence.get(a, [])),
            )
            for a in AXES
        ],
    )
    if result.questions:
        console.print("questions:")
        for q in result.questions:
            console.print(f"  {q.axis}: {escape(q.text)}")
    if result.proposed_checks:
        console.print("proposed checks:")
        for c in result.proposed_checks:
            detail = c.model_dump(mode="json", exclude_none=True, exclude={"name", "timeout"})
            what = ", ".join(f"{k}: {v}" for k, v in detail.items())
            console.print(f"  {escape(c.name)} ({escape(what)})")
    if result.rewrite:
        console.print("proposed rewrite:")
        console.print(escape(result.rewrite))
    if result.rewrite_error:
        err_console.print(f"note: {escape(result.rewrite_error)}")
