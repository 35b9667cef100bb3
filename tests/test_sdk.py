"""The Python SDK (issue 21): `from agentos.sdk import AgentOS`, with scripted agents on
real tmux and git."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, make_repo, needs_tmux, tmux_sessions, wait_until

from agentos.sdk import AgentOS, Phase, WorkflowConfig
from agentos.shared.checks import CheckSpec
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
    Phase(id=2, name="fix", description="Fix it", agent="fixer", changes=True),
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
    import subprocess
    import sys

    script = tmp_path / "ci_review.py"
    script.write_text(_readme_sdk_example())
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


def _readme_sdk_example() -> str:
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "workflows.md").read_text()
    found = re.search(
        r"<!-- sdk-ci-example -->\n```python\n(.*?)```\n<!-- /sdk-ci-example -->", text, re.S
    )
    assert found is not None
    return found.group(1)


@pytest.mark.process
def test_the_sdk_example_on_a_fresh_workspace_says_why_its_task_failed_the_first_time(
    ws: Any, tmp_path: Path, tmux_socket: str
) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "ci_review.py"
    script.write_text(_readme_sdk_example())
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})

    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=repo,
        env={**os.environ, "AGENTOS_HOME": str(ws.root)},
        capture_output=True,
        text=True,
        timeout=300,
    )

    reason = "no routing card matches the request"
    assert out.returncode == 1
    assert out.stdout == ""
    # As the task fails, then in the exception the script did not catch.
    said = [line for line in out.stderr.splitlines() if reason in line]
    assert said[0].startswith("agentos: task 1 (phase 1) failed: " + reason), out.stderr
    assert said[1].startswith("agentos.errors.TaskFailed: task 1 failed: " + reason), out.stderr


def test_wait_for_result_raises_task_failed_naming_each_task_and_why(
    ws: Any, repo: Path, tmux_socket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentos.errors import TaskFailed

    nobody = [Phase(id=1, name="review", description="Review the change")]
    with AgentOS(workspace=ws.root, repo=repo, phases=nobody) as aos:
        aos.create_task("Review PR #123", phase_id=1)
        with pytest.raises(TaskFailed) as caught:
            aos.wait_for_result(timeout=120)

    ((task, reason),) = caught.value.failures
    assert reason.startswith("no routing card matches the request")
    assert reason.endswith("or name the agent of phase 1 (`agent:` in the workflow)")
    assert str(caught.value) == (
        f"task {task} failed: {reason} (no result was submitted; `agentos tasks show ID`)"
    )
    assert capsys.readouterr().err == (
        f"agentos: task {task} (phase 1) failed: {reason} (`agentos tasks show {task}`)\n"
    )


def test_workflows_launch_and_executions_wait_say_why_a_task_failed_on_stderr(
    ws: Any, cli: Any, tmp_path: Path
) -> None:
    import json

    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    (ws.root / "workflows").mkdir(exist_ok=True)
    (ws.root / "workflows" / "ask.yaml").write_text(
        "id: ask\nname: Ask\nphases: [{id: 1, name: ask, description: Answer it}]\n"
        "launch_template: {phase_1_task_prompt: 'Ponder the meaning of {what}',"
        " parameters: [{name: what, required: true}]}\n"
    )

    launched = cli("workflows", "launch", "ask", "--param", "what=life", "--repo", str(repo))
    waited = cli(
        "executions", "wait", json.loads(cli("executions", "list", "--json").stdout)[0]["id"]
    )

    reason = "no routing card matches the request"
    assert launched.returncode == 1 and waited.returncode == 1
    for out in (launched, waited):
        (line,) = out.stderr.splitlines()
        assert line.startswith(f"task 1 (phase 1) failed: {reason}"), out.stderr


@pytest.mark.parametrize(
    ("changes", "lands"), [(False, False), (True, True)], ids=["review-only", "changes-true"]
)
def test_a_review_phase_changes_nothing_in_the_target_unless_it_says_changes_true(
    ws: Any, repo: Path, tmp_path: Path, tmux_socket: str, changes: bool, lands: bool
) -> None:
    from conftest import git

    add_agent(
        ws,
        tmp_path,
        "reviewer",
        'printf "fine\\nverdict: approve\\n" > REVIEW.md\nagentos results submit "approved"\n',
    )
    review = [
        Phase(
            id=1,
            name="review",
            description="Review the change; write REVIEW.md",
            checks=[CheckSpec(name="review written", file_exists="REVIEW.md")],
            agent="reviewer",
            changes=changes,
        )
    ]
    config = WorkflowConfig(
        has_result=True,
        result_checks=[
            CheckSpec.model_validate(
                {"name": "approved", "file_contains": {"path": "REVIEW.md", "pattern": "approve$"}}
            )
        ],
    )
    before = git(repo, "rev-parse", "HEAD")

    with AgentOS(workspace=ws.root, repo=repo, phases=review, workflow_config=config) as aos:
        aos.create_task("Review the change on main", phase_id=1)
        result = aos.wait_for_result(timeout=120)
        (task,) = aos.tasks()

    # Done either way, and the result checked on what the reviewer wrote.
    assert task.status == TaskStatus.DONE
    assert result.validated is True, result.detail
    assert (git(repo, "rev-parse", "HEAD") != before) is lands
    assert (repo / "REVIEW.md").exists() is lands
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 0  # the result's scratch tree too
    if not lands:
        assert task.message.startswith("phase 1 changes nothing (no `changes: true`)")
        # The review is kept on its branch, where `runs diff` shows it.
        assert "verdict: approve" in git(repo, "show", f"agentos/{task.run_id}/reviewer:REVIEW.md")
