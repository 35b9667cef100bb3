"""An environment that cannot run the repository's tests is the person's to fix, not an
agent's failure: the run stops before any agent starts, exit 2, with the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    CliRunner,
    add_agent,
    agent_started,
    branches,
    make_repo,
    needs_tmux,
    tmux_sessions,
)

from agentos.receipts import list_receipts
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]


@pytest.fixture
def fixer(ws: Workspace, tmp_path: Path) -> None:
    add_agent(ws, tmp_path, "fixer", "echo more >> notes.txt\n")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {".agentos.yaml": "python: /nonexistent/bin/python3\n"},
            "/nonexistent/bin/python3",
            id="missing-interpreter",
        ),
        pytest.param(
            {".agentos.yaml": "test: no-such-test-runner --all\n"},
            "no-such-test-runner",
            id="test-command-not-found",
        ),
        pytest.param(
            {
                ".agentos.yaml": f"python: {sys.executable}\n",
                "tests/test_broken.py": "def test_x(:\n    pass\n",
            },
            "tests/test_broken.py",
            id="suite-does-not-collect",
        ),
    ],
)
def test_an_environment_that_cannot_run_the_tests_stops_the_run_before_any_agent(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    fixer: None,
    tmux_socket: str,
    files: dict[str, str],
    expected: str,
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n", **files})

    out = cli(
        "run",
        "fixer-task: append a line to notes.txt; done when tests pass",
        "--repo",
        str(repo),
        "--force",
    )

    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {repo}: tests: the repository's tests cannot run")
    assert expected in line
    assert not agent_started(ws, "fixer")
    (record,) = RunStore(ws).list()
    assert record.status == "failed" and expected in (record.message or "")
    assert record.agents == ()
    assert [r.kind for r in list_receipts(ws, run_id=record.id)] == [
        "interview",
        "route",
        "run",
    ]
    assert branches(repo) == ["main"]
    assert tmux_sessions(tmux_socket) == []


def test_a_run_whose_checks_do_not_need_the_tests_does_not_pay_for_them(
    ws: Workspace, cli: CliRunner, tmp_path: Path, fixer: None
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"notes.txt": "start\n", "tests/test_broken.py": "def test_x(:\n    pass\n"},
    )

    out = cli("run", "fixer-task", "--repo", str(repo), "--force", "--json")

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"
    assert agent_started(ws, "fixer")


def test_a_plain_python3_without_pytest_stops_the_run_before_any_agent(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    fixer: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A repository without an environment is tested with the python3 on PATH: one without
    pytest stops the run before any agent works, naming it and the fix."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n"})

    out = cli(
        "run",
        "fixer-task: append a line to notes.txt; done when tests pass",
        "--repo",
        str(repo),
        "--force",
        "--json",
    )

    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    expected = f"pytest is not installed for {venv / 'bin' / 'python3'}"
    assert line.startswith(f"error: {repo}: tests: the repository's tests cannot run")
    assert expected in line
    assert not agent_started(ws, "fixer")
    (record,) = RunStore(ws).list()
    assert record.status == "failed" and expected in (record.message or "")
    assert branches(repo) == ["main"]
