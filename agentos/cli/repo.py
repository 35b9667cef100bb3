"""``agentos repo``: how a repository is tested (its test command, interpreter, environment)."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import console, json_option, print_json, workspace


@click.group()
def repo() -> None:
    """How a target repository is tested: its own test command, in its own environment."""


@repo.command()
@click.option(
    "--repo",
    "path",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The repository (default: the git repository holding the current directory).",
)
@json_option
def show(path: Path | None, as_json: bool) -> None:
    """Print how the repository's tests are run: where the settings come from
    (agentos.yaml `repos:`, the repository's .agentos.yaml, or detected), the tool, the test
    command, the interpreter and its version, the virtual environment, extra variables,
    the timeout, why each was chosen, and what is missing.

    Detection order: a .venv/venv in the repository, uv, Poetry, Hatch, PDM; then pytest in
    that environment, tox, nox, a Makefile `test` target, or plain pytest.
    `agentos doctor --repo PATH` also checks that the suite can start."""
    from agentos.gate.repo import python_version, repo_profile, repo_root

    profile = repo_profile(workspace(), repo_root(path or Path.cwd()))
    version = python_version(profile.python)
    if as_json:
        print_json({**profile.as_dict(), "python_version": version})
        return
    from rich.markup import escape

    python = (
        "(none)" if profile.python is None else f"{profile.python} ({version or 'does not run'})"
    )
    env = " ".join(f"{k}={v}" for k, v in sorted(profile.env.items())) or "(none)"
    rows = [
        ("repository", str(profile.repo)),
        (
            "source",
            profile.source + (f" ({profile.settings_file})" if profile.settings_file else ""),
        ),
        ("tool", profile.tool),
        ("test", profile.test),
        ("python", python),
        ("venv", str(profile.venv) if profile.venv else "(none)"),
        ("env", env),
        ("timeout", f"{profile.timeout:g}s"),
    ]
    for label, value in rows:
        console.print(f"{label:<11} {escape(value)}")
    for heading, lines in (("why", profile.reasons), ("problems", profile.problems)):
        if lines:
            console.print(f"{heading}:")
            for line in lines:
                console.print(f"  - {escape(line)}")
