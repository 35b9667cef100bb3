"""The README's main job, as `scripts/demo` runs it: the bundled ruff-fixer on the bundled
example project, with AgentOS called by its path and its virtual environment not
activated (nothing of it on PATH)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT, CliRunner, git, make_repo, needs_tmux

from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

REQUEST = (
    "Fix the ruff lint errors in app.py of the example project without changing its "
    "behaviour; done when ruff check passes."
)
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_the_demo_succeeds_without_the_virtual_environment_on_path(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    assert shutil.which("ruff", path=SYSTEM_PATH) is None, "ruff on the system PATH hides the bug"
    repo = tmp_path / "lint-demo"
    shutil.copytree(REPO_ROOT / "examples" / "lint-demo", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lint-demo: initial")

    out = cli("run", REQUEST, "--repo", str(repo), "--json", env={"PATH": SYSTEM_PATH})

    report = json.loads(out.stdout)
    assert out.returncode == 0, report["message"]
    assert report["status"] == "succeeded"
    (agent,) = report["agents"]
    assert agent["agent"] == "ruff-fixer" and agent["attempts"] == 1
    assert git(repo, "status", "--porcelain") == ""


def test_a_check_whose_program_is_not_installed_stops_the_run_before_any_agent(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    ws.settings_file.write_text(
        "run: {guardian: false}\nchecks: [{name: lint, run: no-such-linter check .}]\n"
    )

    out = cli("run", REQUEST, "--repo", str(repo), "--force")

    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"error: {repo}: checks: the run's checks cannot run here, so no agent was started: "
        "`no-such-linter` (check 'lint') is not installed or not on PATH: install it, or "
        "change the check"
    )
    assert git(repo, "branch", "--format=%(refname:short)") == "main"
