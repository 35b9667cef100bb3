"""Executions and tasks in state.db (issue 21): deduplication against the live tasks of
the same execution and phase."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.errors import BadInput, NotFound
from agentos.workflows.store import TaskStatus, WorkflowStore


@pytest.fixture
def store(ws: Any) -> Any:
    s = WorkflowStore(ws)
    s.create_execution("e1", {"id": "wf"}, "/repo", {"goal": "x"})
    s.create_execution("e2", {"id": "wf"}, "/repo", {})
    yield s
    s.close()


def test_a_paraphrase_in_the_same_phase_is_a_duplicate_pointing_at_the_original(
    store: Any,
) -> None:
    first = store.add_task("e1", 1, "Add unit tests for parse_date", creator="sdk")
    again = store.add_task("e1", 1, "Write unit tests covering parse_date", creator="agent")
    other = store.add_task("e1", 1, "Add unit tests for format_date", creator="agent")

    assert first.status == TaskStatus.PENDING and first.duplicate_of is None
    assert again.status == TaskStatus.DUPLICATED
    assert again.duplicate_of == first.id and again.similarity >= 0.75
    assert other.status == TaskStatus.PENDING and other.duplicate_of is None


def test_another_phase_another_execution_or_dedup_off_is_no_duplicate(store: Any) -> None:
    text = "Fix the timezone bug in format_timestamp"
    first = store.add_task("e1", 1, text, creator="sdk")
    other_phase = store.add_task("e1", 2, text, creator="sdk")
    other_execution = store.add_task("e2", 1, text, creator="sdk")
    off = store.add_task("e1", 1, text, creator="sdk", dedup=False)

    assert [t.status for t in (first, other_phase, other_execution, off)] == [
        TaskStatus.PENDING
    ] * 4


def test_a_related_task_runs_and_is_linked_and_ended_tasks_are_not_repeated(
    store: Any,
) -> None:
    first = store.add_task("e1", 1, "Write a test for the empty cart case", creator="sdk")
    related = store.add_task("e1", 1, "Fix the empty cart case", creator="sdk")
    assert related.status == TaskStatus.PENDING and related.related_to == first.id
    store.set_task(first.id, TaskStatus.FAILED, message="gate failed")
    retry = store.add_task("e1", 1, "Write a test for the empty cart case", creator="sdk")
    assert retry.status == TaskStatus.PENDING  # a failed task is no task to repeat


def test_bad_input_is_named(store: Any) -> None:
    with pytest.raises(BadInput, match="a task needs a description"):
        store.add_task("e1", 1, "   ", creator="sdk")
    with pytest.raises(NotFound, match="no execution 'nope'"):
        store.add_task("nope", 1, "do the thing", creator="sdk")


def test_the_indexed_lookup_decides_every_labelled_pair_as_the_similarity_does(
    ws: Any,
) -> None:
    from test_workflow_similarity import PAIRS  # the calibration part

    from agentos.workflows.similarity import (
        DEFAULT_THRESHOLD,
        RELATED_THRESHOLD,
        text_similarity,
    )

    store = WorkflowStore(ws)
    try:
        for i, pair in enumerate(PAIRS):
            store.create_execution(f"p{i}", {"id": "wf"}, "/repo", {})
            first = store.add_task(f"p{i}", 1, pair["a"], creator="test")
            second = store.add_task(f"p{i}", 1, pair["b"], creator="test")
            score = text_similarity(pair["a"], pair["b"])
            assert (second.status == TaskStatus.DUPLICATED) == (score >= DEFAULT_THRESHOLD)
            linked = second.duplicate_of or second.related_to
            assert (linked == first.id) == (score >= RELATED_THRESHOLD), (pair, score)
    finally:
        store.close()


def test_tasks_create_from_a_runs_environment_with_its_parent_and_dedup(
    cli: Any, ws: Any, tmp_path: Any
) -> None:
    import json

    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_execution

    workflow = WorkflowDefinition.model_validate(
        {
            "id": "two",
            "name": "Two",
            "phases": [
                {"id": 1, "name": "find", "description": "Find"},
                {"id": 2, "name": "fix", "description": "Fix"},
            ],
            "launch_template": {
                "parameters": [{"name": "goal", "required": True}],
                "phase_1_task_prompt": "Find out about {goal}",
            },
        }
    )
    execution, first = create_execution(ws, workflow, tmp_path, {"goal": "the flaky upload"})
    assert first.description == "Find out about the flaky upload" and first.phase == 1
    env = {"AGENTOS_EXECUTION_ID": execution, "AGENTOS_TASK_ID": str(first.id)}

    made = cli("tasks", "create", "Fix the timeout in upload.py", "--phase", "2", "--json", env=env)
    again = cli("tasks", "create", "Repair the upload.py timeout", "--phase", "2", env=env)
    no_phase = cli("tasks", "create", "Fix x", "--phase", "9", env=env)
    nowhere = cli("tasks", "create", "Fix x", "--phase", "1")

    task = json.loads(made.stdout)
    assert (task["phase"], task["parent"], task["status"]) == (2, first.id, "pending")
    assert f"a duplicate of task {task['id']}" in again.stdout, again.stdout + again.stderr
    assert no_phase.returncode == 2 and "workflow two has no phase 9" in no_phase.stderr
    assert nowhere.returncode == 2 and "which execution?" in nowhere.stderr
    shown = json.loads(cli("executions", "show", execution, "--json").stdout)
    assert [t["status"] for t in shown["tasks"]] == ["pending", "pending", "duplicated"]


def test_an_mcp_client_creates_lists_and_submits_and_saves_a_memory(ws: Any, tmp_path: Any) -> None:
    import anyio
    from conftest import make_repo
    from test_mcp_server import connect, ok

    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import open_execution

    repo = make_repo(tmp_path / "repo", {"RESULT.md": "done\n"})
    workflow = WorkflowDefinition.model_validate(
        {
            "id": "w",
            "name": "W",
            "phases": [{"id": 1, "name": "a", "description": "A"}],
            "config": {
                "has_result": True,
                "result_checks": [{"name": "result there", "file_exists": "RESULT.md"}],
            },
        }
    )
    execution = open_execution(ws, workflow, repo, {})

    async def scenario() -> None:
        async with connect("stdio", ws) as s:
            made = ok(
                await s.call_tool(
                    "create_task",
                    {"description": "Add unit tests for parse_date", "phase": 1,
                     "execution": execution},
                )
            )  # fmt: skip
            again = ok(
                await s.call_tool(
                    "create_task",
                    {"description": "Write unit tests covering parse_date", "phase": 1,
                     "execution": execution},
                )
            )  # fmt: skip
            assert made["status"] == "pending"
            assert again["status"] == "duplicated" and again["duplicate_of"] == made["id"]
            listed = ok(await s.call_tool("get_tasks", {"execution": execution}))
            assert [t["id"] for t in listed["tasks"]] == [made["id"], again["id"]]
            result = ok(
                await s.call_tool("submit_result", {"execution": execution, "summary": "ok"})
            )
            assert result["validated"] is True
            memory = ok(
                await s.call_tool(
                    "save_memory", {"text": "The flaky upload test needs a 30s timeout."}
                )
            )
            assert memory["path"].startswith(str(ws.root / "memory"))
            hits = ok(await s.call_tool("kb_search", {"query": "flaky upload timeout"}))
            assert hits["hits"][0]["path"] == memory["path"]

    anyio.run(scenario)


def test_an_execution_takes_at_most_max_tasks(ws: Any, tmp_path: Any) -> None:
    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_task, open_execution

    workflow = WorkflowDefinition.model_validate(
        {
            "id": "w",
            "name": "W",
            "phases": [{"id": 1, "name": "a", "description": "A"}],
            "config": {"max_tasks": 2, "task_deduplication_enabled": False},
        }
    )
    execution = open_execution(ws, workflow, tmp_path, {})
    create_task(ws, "Fix the parser", 1, execution_id=execution)
    create_task(ws, "Fix the lexer", 1, execution_id=execution)
    with pytest.raises(BadInput, match="has 2 tasks, its workflow's max_tasks"):
        create_task(ws, "Fix the printer", 1, execution_id=execution)


def test_tasks_create_in_a_plain_run_is_refused(cli: Any, tmp_path: Any) -> None:
    out = cli("tasks", "create", "x", "--phase", "1", env={"AGENTOS_OUTBOX": str(tmp_path / "o")})
    assert out.returncode == 2 and "not a workflow task's" in out.stderr
    assert not (tmp_path / "o").exists()
