"""The CLI as a whole: help for every command, the README reference in sync, exit codes."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT, CliRunner

from agentos.cli import COMMANDS, _docs
from agentos.workspace import Workspace

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


HEAVY = ("pydantic", "yaml", "langchain", "crewai", "ollama", "mcp", "textual", "starlette")


def test_read_only_commands_and_the_version_do_not_import_heavy_modules(
    cli: CliRunner, ws: Workspace
) -> None:
    """What makes `agentos runs list`, `status` and `--version` fast (benchmarks/cli_bench.py):
    none of them loads pydantic or YAML, once agentos.yaml was found valid."""
    assert cli("runs", "list").returncode == 0  # checks agentos.yaml once, by digest after
    for argv in (["--version"], ["runs", "list"], ["status"], ["runs", "list", "--json"]):
        where = None if argv == ["--version"] else ws.root
        out = cli(*argv, env={"PYTHONPROFILEIMPORTTIME": "1"}, workspace=where)
        assert out.returncode == 0, out.stderr
        imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        assert not {m for m in imported if m.split(".")[0] in HEAVY}, argv
    ws.settings_file.write_text("run: [\n")  # a broken agentos.yaml is still refused up front
    out = cli("runs", "list")
    assert (out.returncode, out.stderr.startswith(f"error: {ws.settings_file}")) == (2, True)
