"""The workflow scheduler (issue 21) with scripted agents, real tmux and git: each task a
run whose gate adds its phase's checks; tasks posted from inside a run; done only when the
gate says so."""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, agent_wrote, git, make_repo, needs_tmux, wait_until

from agentos.workflows.definitions import WorkflowDefinition
from agentos.workflows.executions import create_execution
from agentos.workflows.scheduler import Scheduler
from agentos.workflows.store import TaskStatus, WorkflowStore

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

# Phase 1's agent writes its report and posts the phase 2 task; phase 2's writes the fix.
FINDER = (
    'echo "cause: the timeout is 1s" > REPORT.md\n'
    'agentos tasks create "Raise the upload timeout to 30s in settings.txt" --phase 2\n'
)
FIXER = "echo 'timeout=30' > settings.txt\n"
LIAR = "echo 'all done, trust me'\n"  # exits 0 and claims done; writes no REPORT.md


def two_phases(finder: str = "finder") -> WorkflowDefinition:
    return WorkflowDefinition.model_validate(
        {
            "id": "two",
            "name": "Find and fix",
            "phases": [
                {
                    "id": 1,
                    "name": "find",
                    "description": "Find the cause; write REPORT.md",
                    "done_definitions": ["REPORT.md names the cause"],
                    "checks": [{"name": "report written", "file_exists": "REPORT.md"}],
                    "agent": finder,
                },
                {
                    "id": 2,
                    "name": "fix",
                    "description": "Fix it",
                    "agent": "fixer",
                    "changes": True,
                },
            ],
            "launch_template": {
                "parameters": [{"name": "bug", "required": True}],
                "phase_1_task_prompt": "Find out why {bug}",
            },
        }
    )


@pytest.fixture
def repo(ws: Any, tmp_path: Path) -> Path:
    add_agent(ws, tmp_path, "finder", FINDER)
    add_agent(ws, tmp_path, "fixer", FIXER)
    add_agent(ws, tmp_path, "liar", LIAR)
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    return make_repo(tmp_path / "repo", {"settings.txt": "timeout=1\n"})


def test_a_task_posts_a_phase_two_task_and_both_end_done(ws: Any, repo: Path) -> None:
    execution, first = create_execution(ws, two_phases(), repo, {"bug": "uploads time out"})

    status = Scheduler(ws, execution).run()

    store = WorkflowStore(ws)
    tasks = store.tasks(execution)
    store.close()
    assert status == "done"
    assert [(t.phase, t.status, t.parent) for t in tasks] == [
        (1, TaskStatus.DONE, None),
        (2, TaskStatus.DONE, first.id),
    ]
    assert tasks[1].description == "Raise the upload timeout to 30s in settings.txt"
    assert (repo / "settings.txt").read_text() == "timeout=30\n"  # merged
    # Phase 1 does not say `changes: true`: its report stays on its branch, unmerged.
    assert not (repo / "REPORT.md").exists()
    assert "cause" in git(repo, "show", f"agentos/{tasks[0].run_id}/finder:REPORT.md")
    assert git(repo, "status", "--porcelain") == ""


def test_done_is_the_gates_word_not_the_agents(ws: Any, repo: Path) -> None:
    from agentos.receipts import list_receipts, read_receipt

    execution, _ = create_execution(ws, two_phases("liar"), repo, {"bug": "x"})

    Scheduler(ws, execution).run()

    store = WorkflowStore(ws)
    (task,) = store.tasks(execution)
    store.close()
    assert task.status == TaskStatus.FAILED and task.run_id
    gates = [
        read_receipt(ws, r.id) for r in list_receipts(ws, run_id=task.run_id) if r.kind == "gate"
    ]
    assert gates and "report written" in gates[-1] and "accepted: false" in gates[-1]


def test_max_concurrent_one_runs_one_task_at_a_time(ws: Any, repo: Path, tmp_path: Path) -> None:
    add_agent(ws, tmp_path, "scribe", 'echo x > "out-$AGENTOS_TASK_ID.txt"\n')
    workflow = WorkflowDefinition.model_validate(
        {
            "id": "one",
            "name": "One phase",
            "phases": [{"id": 1, "name": "do", "description": "Do", "agent": "scribe"}],
            "config": {"max_concurrent": 1, "task_deduplication_enabled": False},
        }
    )
    execution, _ = create_execution(ws, workflow, repo, {"task": "Write out-1.txt"})
    from agentos.workflows.executions import create_task

    for n in (2, 3):
        create_task(ws, f"Write the file number {n}", 1, execution_id=execution)
    Scheduler(ws, execution).run()

    store = WorkflowStore(ws)
    tasks = store.tasks(execution)
    store.close()
    assert [t.status for t in tasks] == [TaskStatus.DONE] * 3
    spans = sorted((t.started_at, t.ended_at) for t in tasks if t.started_at and t.ended_at)
    assert len(spans) == 3, tasks
    # Each task started after the one before it had ended (the store's own record).
    assert all(end <= start for (_, end), (start, _) in pairwise(spans))


def test_launch_from_the_cli_runs_in_the_background_and_waits(
    cli: Any, ws: Any, repo: Path
) -> None:
    import yaml

    (ws.root / "workflows").mkdir()
    (ws.root / "workflows" / "two.yaml").write_text(
        yaml.safe_dump(two_phases().model_dump(mode="json"))
    )

    out = cli("workflows", "launch", "two", "--param", "bug=uploads time out", "--repo",
              str(repo), "--detach")  # fmt: skip
    execution = out.stdout.strip()
    waited = cli("executions", "wait", execution, "--timeout", "120")
    shown = cli("executions", "show", execution, "--json")

    assert out.returncode == 0, out.stderr
    assert waited.returncode == 0, waited.stdout + waited.stderr
    import json

    tasks = json.loads(shown.stdout)["tasks"]
    assert [(t["phase"], t["status"]) for t in tasks] == [(1, "done"), (2, "done")]
    assert tasks[0]["description"] == "Find out why uploads time out"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([], "bug: a required parameter is missing"),
        (["bug=x", "colour=red"], "unknown parameter 'colour'"),
        (["nonsense"], "'nonsense' is not NAME=VALUE"),
    ],
)
def test_bad_launch_parameters_are_one_line_exit_2_and_start_nothing(
    cli: Any, ws: Any, repo: Path, params: list[str], message: str
) -> None:
    import yaml

    (ws.root / "workflows").mkdir(exist_ok=True)
    (ws.root / "workflows" / "two.yaml").write_text(
        yaml.safe_dump(two_phases().model_dump(mode="json"))
    )
    argv = [x for p in params for x in ("--param", p)]

    out = cli("workflows", "launch", "two", *argv, "--repo", str(repo))

    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert message in out.stderr
    assert cli("executions", "list", "--json").stdout.strip() in ("[]", "")


def test_a_validated_result_with_stop_all_stops_the_rest_and_keeps_their_branches(
    ws: Any, repo: Path, tmp_path: Path
) -> None:
    from conftest import branches

    add_agent(ws, tmp_path, "winner", 'echo ok > RESULT.md\nagentos results submit "found it"\n')
    # Works slowly, and commits as it goes: what it did must stay on its branch.
    add_agent(ws, tmp_path, "plodder", "echo partial > partial.txt\nsleep 120\n")
    workflow = WorkflowDefinition.model_validate(
        {
            "id": "race",
            "name": "Race",
            "phases": [
                {"id": 1, "name": "win", "description": "Win", "agent": "winner"},
                {"id": 2, "name": "plod", "description": "Plod", "agent": "plodder"},
            ],
            "config": {
                "has_result": True,
                "result_checks": [{"name": "result file", "file_exists": "RESULT.md"}],
                "on_result_found": "stop_all",
                "max_concurrent": 2,
            },
        }
    )
    from agentos.workflows.executions import create_task, open_execution

    execution = open_execution(ws, workflow, repo, {})
    plod = create_task(ws, "Plod along slowly", 2, execution_id=execution)
    scheduler = Scheduler(ws, execution, max_concurrent=2)
    ended: list[str] = []
    running = threading.Thread(target=lambda: ended.append(scheduler.run()))
    running.start()
    try:
        # The answer is found once the plodder has done part of its work (tasks posted
        # while the execution runs are picked up in order: the last one finds no room).
        wait_until(lambda: agent_wrote(ws, "plodder", "partial.txt", "partial\n"), timeout=60)
        create_task(ws, "Find the answer", 1, execution_id=execution)
        waiting = create_task(ws, "Plod along once more, later on", 2, execution_id=execution)
    except BaseException:
        scheduler.stop.set()
        raise
    finally:
        running.join()
    (status,) = ended

    store = WorkflowStore(ws)
    tasks = {t.id: t for t in store.tasks(execution)}
    (result,) = store.results(execution)
    store.close()
    assert status == "stopped" and result.validated and result.summary == "found it"
    assert tasks[plod.id].status == TaskStatus.FAILED  # stopped mid-way, not waited for
    assert tasks[waiting.id].status == TaskStatus.CANCELLED  # never started
    plodded = tasks[plod.id].run_id
    assert plodded
    (kept,) = [b for b in branches(repo) if plodded in b]
    assert git(repo, "show", f"{kept}:partial.txt") == "partial"


def test_a_duplicate_task_starts_no_run(ws: Any, repo: Path, tmp_path: Path) -> None:
    from agentos.run.store import RunStore
    from agentos.workflows.executions import create_task

    execution, first = create_execution(ws, two_phases(), repo, {"bug": "uploads time out"})
    again = create_task(ws, "Find out why the uploads time out", 1, execution_id=execution)
    assert again.status == TaskStatus.DUPLICATED and again.duplicate_of == first.id

    Scheduler(ws, execution).run()

    store = WorkflowStore(ws)
    tasks = store.tasks(execution)
    store.close()
    runs = RunStore(ws)
    try:
        ran = {r.id for r in runs.list()}
    finally:
        runs.close()
    assert [t.status for t in tasks] == [TaskStatus.DONE, TaskStatus.DUPLICATED, TaskStatus.DONE]
    assert tasks[1].run_id is None
    assert ran == {tasks[0].run_id, tasks[2].run_id}


def test_cancelling_a_background_execution_stops_it_and_keeps_the_work(
    cli: Any, ws: Any, repo: Path, tmp_path: Path
) -> None:
    import json

    import yaml
    from conftest import branches

    add_agent(ws, tmp_path, "sleeper", "echo partial > partial.txt\nsleep 60\n")
    (ws.root / "workflows").mkdir()
    workflow = {
        "id": "nap",
        "name": "Nap",
        "phases": [{"id": 1, "name": "nap", "description": "Nap", "agent": "sleeper"}],
    }
    (ws.root / "workflows" / "nap.yaml").write_text(yaml.safe_dump(workflow))
    execution = cli(
        "workflows", "launch", "nap", "--param", "task=Nap a while", "--repo", str(repo),
        "--detach",
    ).stdout.strip()  # fmt: skip

    def running() -> bool:
        tasks = json.loads(cli("tasks", "list", "--execution", execution, "--json").stdout)
        return bool(tasks) and tasks[0]["status"] == "running"

    wait_until(running, timeout=60)
    wait_until(lambda: agent_wrote(ws, "sleeper", "partial.txt", "partial\n"), timeout=60)
    out = cli("executions", "cancel", execution)

    assert out.returncode == 0 and "cancelled" in out.stdout, out.stdout + out.stderr
    (task,) = json.loads(cli("tasks", "list", "--execution", execution, "--json").stdout)
    assert task["status"] == "failed" and task["run_id"]
    (kept,) = [b for b in branches(repo) if task["run_id"] in b]
    assert git(repo, "show", f"{kept}:partial.txt") == "partial"
    waited = cli("executions", "wait", execution)
    assert waited.returncode == 1 and "cancelled" in waited.stdout


def test_a_task_whose_run_cannot_start_fails_and_the_execution_ends(
    ws: Any, repo: Path, tmp_path: Path
) -> None:
    workflow = WorkflowDefinition.model_validate(
        {
            "id": "odd",
            "name": "Odd",
            "phases": [{"id": 1, "name": "a", "description": "A", "agent": "finder"}],
        }
    )
    # Not a git repository: the run refuses to start.
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    execution, _ = create_execution(ws, workflow, elsewhere, {"task": "Do it somewhere"})

    status = Scheduler(ws, execution).run()

    store = WorkflowStore(ws)
    (ended,) = store.tasks(execution)
    store.close()
    assert status == "done"
    assert ended.status == TaskStatus.FAILED and "git" in ended.message
