"""Executions and tasks in the state (issue 21), on SQLite and on PostgreSQL (issue 35):
deduplication against the live tasks of the same execution and phase."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.errors import BadInput, NotFound
from agentos.workflows.store import TaskStatus, WorkflowStore


@pytest.fixture
def store(ws: Any, backend: str) -> Any:
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
    ws: Any, backend: str
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
    cli: Any, ws: Any, tmp_path: Any, backend: str
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


def test_an_mcp_client_creates_lists_and_submits_and_saves_a_memory(
    ws: Any, tmp_path: Any, backend: str
) -> None:
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


# --- issue 37: the index's document frequencies, `tasks similar`, embeddings -------------


def test_the_term_counts_follow_the_live_tasks_as_they_come_and_go(store: Any) -> None:
    from collections import Counter

    from agentos.workflows.similarity import features

    texts = ["Add unit tests for parse_date", "Fix the parser in utils/dates.py"]
    first, second = (store.add_task("e1", 1, t, creator="sdk") for t in texts)
    again = store.add_task("e1", 1, "Write unit tests covering parse_date", creator="sdk")
    assert again.status == TaskStatus.DUPLICATED  # a duplicate is not counted

    def expected(*live: str) -> dict[str, int]:
        counts = Counter(t for text in live for t in features(text).terms())
        return {"": len(live), **counts} if live else {}

    assert store.term_counts("e1", 1) == expected(*texts)
    store.set_task(first.id, TaskStatus.FAILED, message="gate failed")
    assert store.term_counts("e1", 1) == expected(texts[1])
    store.set_task(second.id, TaskStatus.DONE)  # a done task is still one not to repeat
    assert store.term_counts("e1", 1) == expected(texts[1])
    store.set_task(second.id, TaskStatus.CANCELLED)
    assert store.term_counts("e1", 1) == {} and store.term_counts("e2", 1) == {}


def test_the_index_finds_what_a_plain_loop_over_every_live_task_finds(store: Any) -> None:
    """Every task the index leaves unread could not have reached the threshold: the
    duplicate check through it and by scoring every live task give the same answer, for
    new tasks it has never seen (the held-out pairs' texts, their labels unused)."""
    from test_workflow_similarity import PAIRS, labelled

    from agentos.workflows.similarity import DEFAULT_THRESHOLD

    live = sorted({str(t) for p in PAIRS for t in (p["a"], p["b"])})
    for text in live:
        store.add_task("e1", 1, text, creator="test", dedup=False)
    new = sorted({str(t) for p in labelled("heldout") for t in (p["a"], p["b"])})
    found = 0
    for text in new + [t.upper() for t in live[:40]]:
        by_index = store.similar(text, execution_id="e1", phase=1, limit=1, floor=DEFAULT_THRESHOLD)
        by_loop = store.plain_matches("e1", 1, text)
        by_loop = [m for m in by_loop if m.score >= DEFAULT_THRESHOLD][:1]
        assert [(m.task, m.score) for m in by_index] == [(m.task, m.score) for m in by_loop]
        found += bool(by_index)
    assert found >= 40  # the upper-cased live texts at least: the check was not vacuous


def test_tasks_similar_prints_the_nearest_live_tasks_with_their_scores(
    cli: Any, ws: Any, tmp_path: Any
) -> None:
    import json
    import re

    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import create_task, open_execution

    workflow = WorkflowDefinition.model_validate(
        {"id": "w", "name": "W", "phases": [{"id": 1, "name": "a", "description": "A"}]}
    )
    execution = open_execution(ws, workflow, tmp_path, {})
    first = create_task(ws, "Fix the memory leak when the config is reloaded", 1,
                        execution_id=execution)  # fmt: skip
    other = create_task(ws, "Add a --dry-run flag to the deploy command", 1,
                        execution_id=execution)  # fmt: skip
    refused = cli("tasks", "create", "Reloading the configuration leaks memory", "--phase", "1",
                  "--execution", execution)  # fmt: skip
    assert refused.returncode == 0, refused.stderr
    score = re.search(r"similarity (\d\.\d\d)", refused.stdout)
    assert score, refused.stdout
    assert refused.stdout == (
        f"task {other.id + 1}: a duplicate of task {first.id}: Fix the memory leak when the "
        f"config is reloaded (similarity {score[1]}); it will not run (agentos tasks similar "
        "TEXT shows the nearest tasks)\n"
    )

    shown = cli("tasks", "similar", "Reloading the configuration leaks memory")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (
        "similar tasks\n"
        f"task  {'execution':<{len(execution)}}  phase  score  method  duplicate     description\n"
        f"{first.id:<4}  {execution}  1      {score[1]}   words   yes (>= 0.5)  "
        "Fix the memory leak when the config is reloaded\n"
    )
    as_json = json.loads(cli("tasks", "similar", "Add a dry-run flag to deploy", "--json").stdout)
    assert [{**m, "score": None} for m in as_json] == [
        {
            "task": other.id,
            "execution": execution,
            "phase": 1,
            "score": None,
            "method": "words",
            "threshold": 0.5,
            "duplicate": as_json[0]["score"] >= 0.5,
            "description": "Add a --dry-run flag to the deploy command",
        }
    ]
    assert cli("tasks", "similar", "Reload", "--phase", "2", "--json").stdout == "[]\n"
    empty = cli("tasks", "similar", "   ")
    assert (empty.returncode, empty.stderr) == (2, "error: TEXT: a task needs a description\n")


@pytest.mark.process  # what a new process imports
def test_tasks_similar_imports_no_ollama_unless_embeddings_are_configured(
    cli: Any, ws: Any
) -> None:
    out = cli("tasks", "similar", "Fix the parser", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert out.returncode == 0, out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "agentos.workflows.similarity" in imported
    assert not {m for m in imported if m.split(".")[0] in ("ollama", "httpx")}


EMBED = "nomic-embed-text"


def _embedding_workflow(ws: Any, tmp_path: Any, model: str) -> str:
    from agentos.workflows.definitions import WorkflowDefinition
    from agentos.workflows.executions import open_execution

    ws.settings_file.write_text(
        f"run: {{guardian: false}}\nworkflows: {{dedup: {{embeddings: 'ollama:{model}'}}}}\n"
    )
    workflow = WorkflowDefinition.model_validate(
        {"id": "w", "name": "W", "phases": [{"id": 1, "name": "a", "description": "A"}]}
    )
    return open_execution(ws, workflow, tmp_path, {})


def test_embeddings_catch_a_paraphrase_the_words_miss_but_not_another_number(
    ws: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """Through the real ollama client against a scripted server: two wordings of one task
    with no content word in common are one task by their vectors; two tasks whose vectors
    are as close but that name other numbers are two."""
    from fake_ollama import FakeOllama

    from agentos.workflows.executions import create_task, similar_tasks
    from agentos.workflows.similarity import DEFAULT_THRESHOLD, text_similarity

    avatar, pictures = "Avatar images are stretched on mobile", "Profile pictures look distorted"
    retry, other = "Retry API requests that get HTTP 429", "Retry API requests that get HTTP 503"
    assert text_similarity(avatar, pictures) < DEFAULT_THRESHOLD  # the words miss it
    vectors = {
        avatar: [1.0, 0.0, 0.1],
        pictures: [0.98, 0.05, 0.12],  # cosine 0.998
        retry: [0.0, 1.0, 0.0],
        other: [0.01, 0.99, 0.0],  # cosine 0.9999
    }
    with FakeOllama(models=(EMBED,), vectors=vectors) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.host)
        execution = _embedding_workflow(ws, tmp_path, EMBED)
        first = create_task(ws, avatar, 1, execution_id=execution)
        again = create_task(ws, pictures, 1, execution_id=execution)
        asked = create_task(ws, retry, 1, execution_id=execution)
        apart = create_task(ws, other, 1, execution_id=execution)
        nearest = similar_tasks(ws, pictures)
    assert again.status == TaskStatus.DUPLICATED and again.duplicate_of == first.id
    assert again.similarity == pytest.approx(0.998, abs=0.001)
    assert apart.status == TaskStatus.PENDING and asked.status == TaskStatus.PENDING
    assert [(m.task, m.method.name, m.duplicate) for m in nearest] == [
        (first.id, "embeddings", True)
    ]
    embedded = [r["body"] for r in server.requests if r["path"] == "/api/embed"]
    assert embedded == [{"model": EMBED, "input": t} for t in (avatar, pictures, retry, other)] + [
        {"model": EMBED, "input": pictures}
    ]


@pytest.mark.parametrize("why", ["unreachable", "model-not-pulled"])
def test_embeddings_that_cannot_be_had_are_one_warning_and_the_words_decide(
    ws: Any, tmp_path: Any, monkeypatch: Any, caplog: Any, why: str
) -> None:
    import uuid

    from fake_ollama import FakeOllama

    from agentos.workflows.executions import create_task

    model = f"embed-{uuid.uuid4().hex[:8]}"  # one warning per process and model
    with FakeOllama(models=(EMBED,)) as server:
        host = server.host
        if why == "unreachable":
            server.server.shutdown()
            server.server.server_close()
        monkeypatch.setenv("OLLAMA_HOST", host)
        execution = _embedding_workflow(ws, tmp_path, model)
        with caplog.at_level("WARNING", logger="agentos.workflows.embeddings"):
            first = create_task(ws, "Add unit tests for parse_date", 1, execution_id=execution)
            again = create_task(ws, "Write unit tests covering parse_date", 1,
                                execution_id=execution)  # fmt: skip
            other = create_task(ws, "Add unit tests for format_date", 1, execution_id=execution)
    assert again.status == TaskStatus.DUPLICATED and again.duplicate_of == first.id
    assert other.status == TaskStatus.PENDING
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        f"deduplication by embeddings is off: Ollama model {model} gave no vector ("
    )
    assert warned[0].endswith("); comparing words only")


@pytest.mark.parametrize(
    ("dedup", "message"),
    [
        (
            "{embeddings: nomic-embed-text}",
            "workflows.dedup.embeddings: 'nomic-embed-text' is not ollama:MODEL "
            "(e.g. ollama:nomic-embed-text)",
        ),
        ("{threshold: 1.5}", "workflows.dedup.threshold: Input should be less than or equal to 1"),
        ("{embedings: 'ollama:x'}", "workflows.dedup.embedings: unknown field"),
    ],
    ids=["not-ollama-model", "threshold-out-of-range", "unknown-field"],
)
def test_bad_dedup_settings_are_one_line_errors(
    cli: Any, ws: Any, dedup: str, message: str
) -> None:
    ws.settings_file.write_text(f"workflows: {{dedup: {dedup}}}\n")
    out = cli("tasks", "similar", "Fix the parser")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"error: {ws.settings_file}: {message}\n"
