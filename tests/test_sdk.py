"""The Python SDK (issue 21): `from agentos.sdk import AgentOS`, with scripted agents on
real tmux and git."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, make_repo, needs_tmux, tmux_sessions, wait_until

from agentos.checks import CheckSpec
from agentos.sdk import AgentOS, Phase, WorkflowConfig
from agentos.workflows.store import TaskStatus

pytestmark = [needs_tmux]

FINDER = (
    'echo "cause: the timeout is 1s" > REPORT.md\n'
    'agentos tasks create "Raise the upload timeout to 30s in settings.txt" --phase 2\n'
)
FIXER = "echo 'timeout=30' > settings.txt\n"
PHASES = [
    Phase(
        id=1,
        name="find",
        description="Find the cause; write REPORT.md",
        checks=[CheckSpec.model_validate({"name": "report written", "file_exists": "REPORT.md"})],
        agent="finder",
    ),
    Phase(id=2, name="fix", description="Fix it", agent="fixer"),
]


@pytest.fixture
def repo(ws: Any, tmp_path: Path) -> Path:
    add_agent(ws, tmp_path, "finder", FINDER)
    add_agent(ws, tmp_path, "fixer", FIXER)
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    return make_repo(tmp_path / "repo", {"settings.txt": "timeout=1\n"})


def test_two_phases_from_code_both_done_and_nothing_of_ours_left(
    ws: Any, repo: Path, tmux_socket: str
) -> None:
    from conftest import git

    with AgentOS(workspace=ws.root, repo=repo, phases=PHASES, max_concurrent=2) as aos:
        first = aos.create_task("Find out why uploads time out", phase_id=1)
        tasks = aos.wait_for_completion(timeout=120)

    assert [(t.phase, t.status, t.parent) for t in tasks] == [
        (1, TaskStatus.DONE, None),
        (2, TaskStatus.DONE, first.id),
    ]
    assert (repo / "settings.txt").read_text() == "timeout=30\n"
    assert tmux_sessions(tmux_socket) == []
    assert git(repo, "worktree", "list").count("\n") == 0  # the main checkout only
    assert not [t for t in threading.enumerate() if t.name.startswith("agentos-scheduler")]


def test_waiting_too_long_raises_and_a_result_is_validated_by_its_checks(
    ws: Any, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    # It waits until the test lets it go (a file the test writes into its worktree).
    add_agent(
        ws, tmp_path, "slow", "until [ -e go ]; do sleep 0.05; done\nrm go; echo done > slow.txt\n"
    )
    add_agent(
        ws,
        tmp_path,
        "reviewer",
        'echo "verdict: approve" > REVIEW.md\nagentos results submit "approved"\n',
    )
    slow = [Phase(id=1, name="wait", description="Wait", agent="slow")]
    with AgentOS(workspace=ws.root, repo=repo, phases=slow) as aos:
        aos.create_task("Take your time", phase_id=1)
        with pytest.raises(TimeoutError):
            aos.wait_for_completion(timeout=1)
        worktree = wait_until(lambda: list(ws.worktrees_dir.glob("*/slow")), what="its worktree")
        (worktree[0] / "go").write_text("")
        assert aos.wait_for_completion(timeout=120)[0].status == TaskStatus.DONE

    review = [Phase(id=1, name="review", description="Review", agent="reviewer")]
    config = WorkflowConfig(
        has_result=True,
        result_checks=[
            CheckSpec.model_validate(
                {"name": "approved", "file_contains": {"path": "REVIEW.md", "pattern": "approve"}}
            )
        ],
        on_result_found="stop_all",
    )
    with AgentOS(workspace=ws.root, repo=repo, phases=review, workflow_config=config) as aos:
        aos.create_task("Review the change on main", phase_id=1)
        result = aos.wait_for_result(timeout=120)

    assert result.validated is True and result.summary == "approved"
    assert "1 of 1 checks passed" in result.detail


@pytest.mark.parametrize(("verdict", "code"), [("approve", 0), ("changes requested", 1)])
def test_the_readme_ci_example_works_as_written(
    ws: Any, tmp_path: Path, tmux_socket: str, verdict: str, code: int
) -> None:
    import os
    import re
    import subprocess
    import sys

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = re.search(
        r"<!-- sdk-ci-example -->\n```python\n(.*?)```\n<!-- /sdk-ci-example -->", readme, re.S
    )
    assert example is not None
    script = tmp_path / "ci_review.py"
    script.write_text(example.group(1))
    # The phase names no agent: routing picks the reviewer, as it would a real one.
    add_agent(
        ws,
        tmp_path,
        "reviewer",
        f'printf "looks fine\\nverdict: {verdict}\\n" > REVIEW.md\n'
        f'agentos results submit "{verdict}"\n',
        card={"triggers": {"keywords": ["review"]}},
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})

    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=repo,
        env={**os.environ, "AGENTOS_HOME": str(ws.root)},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert out.returncode == code, out.stdout + out.stderr
    assert ("✓ Review passed" in out.stdout) == (code == 0)
    assert tmux_sessions(tmux_socket) == []


def test_launch_a_registered_workflow_and_shut_down_without_waiting(
    ws: Any, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    from conftest import agent_wrote, branches, git

    from agentos.sdk import LaunchParameter, LaunchTemplate, WorkflowDefinition

    # Ran to its end, the nap would pass (exit 0): only a stop fails it.
    add_agent(ws, tmp_path, "sleeper", "echo napping > nap.txt\nsleep 120\n")
    workflow = WorkflowDefinition(
        id="nap",
        name="Nap",
        phases=[Phase(id=1, name="nap", description="Nap", agent="sleeper")],
        launch_template=LaunchTemplate(
            parameters=[LaunchParameter(name="minutes", type="number", required=True)],
            phase_1_task_prompt="Nap for {minutes} minutes",
        ),
    )
    aos = AgentOS(workspace=ws.root, repo=repo, workflow_definitions=[workflow]).start()
    execution = aos.launch("nap", minutes=2)
    (task,) = aos.tasks(execution)
    assert aos.get_task(task.id).description == "Nap for 2 minutes"
    wait_until(lambda: agent_wrote(ws, "sleeper", "nap.txt", "napping\n"), timeout=60)

    aos.shutdown(graceful=False)

    stopped = aos.get_task(task.id)
    assert stopped.status == TaskStatus.FAILED and stopped.run_id  # stopped, not waited for
    (kept,) = [b for b in branches(repo) if stopped.run_id in b]
    assert git(repo, "show", f"{kept}:nap.txt") == "napping"  # its work stays on its branch
    assert tmux_sessions(tmux_socket) == []
