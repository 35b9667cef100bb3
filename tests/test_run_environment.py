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


@pytest.fixture
def bare_python3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The python3 first on PATH: one with nothing installed (a virtual environment without
    pip), which a repository without an environment of its own is tested with."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return venv / "bin" / "python3"


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
    bare_python3: Path,
) -> None:
    """A repository without an environment is tested with the python3 on PATH: one without
    pytest stops the run before any agent works, naming it and the fix."""
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
    expected = f"pytest is not installed for {bare_python3}"
    assert line.startswith(f"error: {repo}: tests: the repository's tests cannot run")
    assert expected in line
    assert not agent_started(ws, "fixer")
    (record,) = RunStore(ws).list()
    assert record.status == "failed" and expected in (record.message or "")
    assert branches(repo) == ["main"]


def test_a_profile_made_without_asking_python3_is_completed_to_the_one_asked_first(
    ws: Workspace, tmp_path: Path, bare_python3: Path
) -> None:
    """A run profiles the repository without starting plain python3 (its answer changes a
    problem, never the command) and asks it beside the run: the profile it ends with is the
    one asked first, and check_profile asks for itself."""
    from agentos.gate.repo import asked, check_profile, repo_profile

    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n"})

    first = repo_profile(ws, repo)
    later = repo_profile(ws, repo, ask=False)

    missing = (
        f"pytest is not installed for {bare_python3}: create the project's "
        "environment (python3 -m venv .venv, then install the project and its test "
        "dependencies into it), or set `python:` or `test:` for it (`repos:` in "
        "agentos.yaml, or .agentos.yaml)"
    )
    assert (later.unasked, first.unasked) == (True, False)
    assert [p for p in first.problems if p not in later.problems] == [missing]
    assert asked(later, ws) == first
    assert asked(first, ws) is first
    assert missing in check_profile(later, collect=False)
    # A test command of the settings' own: there is nothing to ask.
    (repo / ".agentos.yaml").write_text("test: make check\n")
    assert not repo_profile(ws, repo, ask=False).unasked


def test_a_run_without_tests_to_run_still_reports_what_python3_answered(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    fixer: None,
    bare_python3: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n"})

    out = cli("run", "fixer-task", "--repo", str(repo), "--force", "--json")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "succeeded"
    (problem,) = report["repo_profile"]["problems"]
    assert problem.startswith(f"pytest is not installed for {bare_python3}:")


def test_a_settings_test_left_blank_still_asks_python3(
    ws: Workspace, tmp_path: Path, bare_python3: Path
) -> None:
    """`test:` with no value is no test command: the detected one stands, and so does
    what python3 answers about it."""
    from agentos.gate.repo import repo_profile

    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n", ".agentos.yaml": "test:\n"})

    later = repo_profile(ws, repo, ask=False)

    assert later.test == "python3 -m pytest -q" and later.unasked
    assert any(p.startswith("pytest is not installed for") for p in repo_profile(ws, repo).problems)


def test_a_run_routes_without_waiting_for_python3s_answer(
    ws: Workspace, tmp_path: Path, fixer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question starts the interpreter (~100 ms for pyenv's script): the run routes and
    sets its agent up meanwhile. Here python3 answers once the agent has started, or after
    5 s saying it waited in vain (a run that waited for its answer first)."""
    from agentos.run.orchestrator import start_run

    started, in_vain = tmp_path / "agent-started", tmp_path / "waited-in-vain"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(
        f"#!/bin/sh\ni=0\nwhile [ ! -e {started} ]; do\n"
        f"  i=$((i + 1)); if [ $i -gt 250 ]; then touch {in_vain}; break; fi\n"
        "  sleep 0.02\ndone\n"
        f'exec {sys.executable} "$@"\n'
    )
    (shim / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n"})

    def seen(event: object) -> None:
        if "started in tmux session" in str(getattr(event, "message", "")):
            started.touch()

    report = start_run(ws, "fixer-task", repo, force=True, on_event=seen)

    assert report.status == "succeeded", report.message
    assert started.exists() and not in_vain.exists()
    assert report.repo_profile is not None and not report.repo_profile.unasked
