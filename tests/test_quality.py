"""The code base passes its own linters: ruff (lint and format) and mypy --strict, the tests
included (pyproject.toml says what each checks; .pre-commit-config.yaml runs the same)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    """The linter ``name``; a missing one fails the check (it never skips: a check that
    cannot run has not passed)."""
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert path is not None, f"{name} is not installed (pip install -e '.[dev]', scripts/setup)"
    return path


@pytest.mark.parametrize(
    "argv",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."]],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff_finds_nothing(argv: list[str]) -> None:
    result = subprocess.run(
        [_tool(argv[0]), *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["mypy"], ["mypy", "tests"]], ids=["library", "tests"])
def test_mypy_strict_passes(argv: list[str]) -> None:
    result = subprocess.run(
        [_tool(argv[0]), *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
