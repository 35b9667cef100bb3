"""The CLI as a whole: help for every command, the README reference in sync, exit codes."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT

from agentos.cli import COMMANDS, _docs

GROUPS = sorted(COMMANDS)


def test_help_lists_the_command_groups() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentos", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = out.split("Commands:")[1]
    for name in GROUPS:
        assert f"  {name} " in listed


def test_every_command_has_help_text() -> None:
    for name, help_text in _docs.commands():
        body = help_text.split("Options:")[0].strip().splitlines()
        assert len(body) > 1 and body[1:], f"{name} has no description"


def test_readme_cli_reference_is_in_sync_with_help() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert _docs.reference() in readme, (
        "README.md's CLI reference is stale: run `python -m agentos.cli._docs`"
    )
