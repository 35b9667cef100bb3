"""``agentos doctor``: is this machine ready to run agents, and what fixes what is missing."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import console, fail, json_option, located, print_json, table
from agentos.errors import AgentOSError
from agentos.workspace.layout import Workspace


def _workspace(ctx: click.Context) -> Workspace | None:
    """The workspace, when there is one: doctor also runs where none exists yet."""
    try:
        return located(ctx).workspace
    except AgentOSError:
        return None


@click.command()
@click.option(
    "--repo",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Also check that this repository's tests can run (see `agentos repo show`).",
)
@json_option
@click.pass_context
def doctor(ctx: click.Context, repo: Path | None, as_json: bool) -> None:
    """Check tmux, git, the state (its database opens, on PostgreSQL the server answers and
    takes the credentials, and its schema is this AgentOS's), the Ollama server
    (OLLAMA_HOST), each runtime (its CLI or Python extra), the Ollama models of the
    workspace's active packages, for each active package of an installed agent CLI (Claude
    Code, Gemini CLI, Codex) whether its model API takes its key, and the programs the
    checks of the workspace, its active packages and its cards run (ruff for ruff-fixer);
    print the command that fixes each missing one, and which agents cannot run yet. With
    --repo, also check the repository's tests: its interpreter exists, its test program is
    installed, its suite collects.

    Exit code 1 when tmux, git, the state or a program a check runs is missing (a run
    stops before any agent starts) or, with --repo, when the repository's tests cannot run
    (one line per problem, naming the fix); a missing runtime or key only matters to the
    packages that use it."""
    from agentos.run.doctor import diagnose

    top = None
    if repo is not None:
        from agentos.gate.repo import repo_root

        top = repo_root(repo)
    result = diagnose(_workspace(ctx), repo=top)
    if as_json:
        print_json(result.as_dict())
    else:
        table(
            None,
            ["check", "kind", "ready", "detail", "fix"],
            [(c.name, c.kind, "yes" if c.ready else "NO", c.detail, c.fix) for c in result.checks],
        )
        from rich.markup import escape

        repo_problems = [c.detail for c in result.checks if c.kind == "repo" and not c.ready]
        for problem in repo_problems:
            console.print(f"repo: {escape(problem)}")
        settings = [c.detail for c in result.checks if c.kind == "workspace" and not c.ready]
        for problem in settings:
            console.print(f"settings: {escape(problem)}")
        state = [c.detail for c in result.checks if c.kind == "state" and not c.ready]
        for problem in state:
            console.print(f"state: {problem}", markup=False)
        for c in result.checks:
            if c.kind == "program" and not c.ready:
                console.print(f"program: {c.detail}; fix: {c.fix}", markup=False)
        waiting = [a for a in result.agents if not a.ready]
        if waiting and result.ready:
            names = ", ".join(f"{a.name} ({', '.join(a.needs)})" for a in waiting)
            console.print(f"agents that cannot run until their fixes above: {names}", markup=False)
        if result.ready:
            console.print("ready to run agents")
        elif settings:
            console.print("not ready: fix the workspace's agentos.yaml (every command fails on it)")
        elif state:
            console.print("not ready: the state cannot be used (fix what the `state:` line says)")
        elif repo_problems:
            console.print("not ready: the repository's tests cannot run (fix each `repo:` line)")
        else:
            console.print("not ready: install what the required tools' fixes name")
    if not result.ready:
        fail(ctx, 1)
