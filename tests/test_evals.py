"""Evals (issue 18, under way): the evaluators that grade one answer, and eval suites as
folders, checked before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentos.errors import AgentOSError, BadInput
from agentos.evals import evaluators as ev
from agentos.evals.suite import load_suite

# evaluator, answer, expected (and options), score
TABLE: list[tuple[str, Any, float]] = [
    ("exact", ("42", "42", ()), 1.0),
    ("exact", (" 42\n", "42", ()), 0.0),
    ("exact", (" 42\n", "42", ("strip",)), 1.0),
    ("exact", ("Paris", "paris", ()), 0.0),
    ("exact", ("Paris", "paris", ("case",)), 1.0),
    ("exact", ("New   York", "new york", ("case", "whitespace")), 1.0),
    ("exact", ("Hello, world!", "hello world", ("case", "punctuation")), 1.0),
    ("contains", ("the answer is 42.", "42", ()), 1.0),
    ("contains", ("the answer is 41.", "42", ()), 0.0),
    ("contains", ("THE ANSWER", "answer", ("case",)), 1.0),
    ("numeric", ("about 3.14159", 3.14, 0.01, 0.0), 1.0),
    ("numeric", ("3.2", 3.14, 0.01, 0.0), 0.0),
    ("numeric", ("1,000,000 dollars", 1e6, 0.0, 0.0), 1.0),
    ("numeric", ("105", 100.0, 0.0, 0.05), 1.0),
    ("numeric", ("no number here", 1.0, 0.0, 0.0), 0.0),
    ("regex", ("order E501 and E302", r"\bE\d{3}\b"), 1.0),
    ("regex", ("nothing", r"\bE\d{3}\b"), 0.0),
    ("regex", ("a" * 10_000 + "b", r"(a+)+$"), 0.0),  # RE2: linear, no hang
    ("json_equal", ('{"b": [1, 2], "a": 1}', {"a": 1, "b": [1, 2]}), 1.0),
    ("json_equal", ('{"a": 2}', {"a": 1}), 0.0),
    ("json_equal", ("not json", {"a": 1}), 0.0),
]


@pytest.mark.parametrize(("kind", "args", "score"), TABLE)
def test_each_evaluator_scores_an_answer(kind: str, args: tuple[Any, ...], score: float) -> None:
    grade = getattr(ev, kind)(*args)
    assert grade.score == score, grade
    assert grade.feedback and "\n" not in grade.feedback


@pytest.mark.parametrize(
    ("output", "score", "feedback"),
    [
        ('{"score": 0.85, "reason": "mostly right"}', 0.85, "mostly right"),
        ('thinking...\n{"score": 1}\n', 1.0, "judged"),
        ("great!", 0.0, "judge did not return a JSON score"),
        ('{"score": "high"}', 0.0, "judge did not return a JSON score"),
        ('{"score": true}', 0.0, "judge did not return a JSON score"),
        ('{"verdict": 1}', 0.0, "judge did not return a JSON score"),
        ('{"score": 1.7}', 0.0, "judge score 1.7 is out of range (0..1)"),
        ('{"score": -0.1}', 0.0, "judge score -0.1 is out of range (0..1)"),
        ("", 0.0, "judge did not return a JSON score"),
    ],
)
def test_a_judges_output_is_a_score_or_zero_with_the_reason(
    output: str, score: float, feedback: str
) -> None:
    assert ev.judge_score(output) == ev.Grade(score, feedback)


def make_suite(root: Path, tasks: list[Any] | str, **spec: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data = {"name": "sums", "evaluator": {"kind": "numeric"}, **spec}
    (root / "suite.yaml").write_text(json.dumps(data))  # JSON is YAML
    text = tasks if isinstance(tasks, str) else "".join(json.dumps(t) + "\n" for t in tasks)
    (root / "tasks.jsonl").write_text(text)
    return root


def test_a_suite_loads_its_spec_and_tasks(tmp_path: Path) -> None:
    root = make_suite(
        tmp_path / "sums",
        [
            {"id": "a", "input": "2+2", "expected": 4},
            {"id": "b", "input": "say hi", "expected": "hi", "evaluator": {"kind": "exact"}},
        ],
        weights={"correctness": 0.8, "time": 0.2},
        staged={"samples": 1, "min_score": 0.5},
    )
    suite = load_suite(root)
    tasks = suite.tasks()

    assert (suite.name, suite.spec.mode, suite.splits()) == ("sums", "answer", ["tasks"])
    assert [t.id for t in tasks] == ["a", "b"]
    assert [suite.evaluator(t).kind for t in tasks] == ["numeric", "exact"]
    assert suite.spec.staged is not None and suite.spec.staged.samples == 1


@pytest.mark.parametrize(
    ("tasks", "spec", "message"),
    [
        (
            '{"id": "a", "expected": 1}\n{"id": "b", "expected": 2}\nnot json\n',
            {},
            "tasks.jsonl: line 3: not JSON (Expecting value, column 1)",
        ),
        (
            '{"id": "a", "expected": 1}\n{"id": "a", "expected": 2}\n',
            {},
            "tasks.jsonl: line 2: task id 'a' is also on line 1",
        ),
        ('{"expected": 1}\n', {}, "tasks.jsonl: line 1: id: required field is missing"),
        ('{"id": "a", "colour": 1}\n', {}, "tasks.jsonl: line 1: colour: unknown field"),
        ("[1, 2]\n", {}, "tasks.jsonl: line 1: a task is a JSON object"),
        ("\n\n", {}, "tasks.jsonl: the split has no tasks"),
        (
            '{"id": "a", "evaluator": {"kind": "telepathy"}}\n',
            {},
            "tasks.jsonl: line 1: evaluator.kind: Input should be 'exact', 'contains', "
            "'regex', 'numeric', 'json_equal', 'command' or 'judge'",
        ),
        (
            '{"id": "a"}\n',
            {"evaluator": {"kind": "judge"}},
            "suite.yaml: evaluator: a judge evaluator needs `agent` (a hub package)",
        ),
        ('{"id": "a"}\n', {"weights": {"correctness": 0}}, "weights must be >= 0 and not all 0"),
        ('{"id": "a"}\n', {"mode": "repo"}, "a repo-mode task needs `request` and `repo`"),
    ],
)
def test_a_bad_suite_is_one_line_naming_the_file(
    tmp_path: Path, tasks: str, spec: dict[str, Any], message: str
) -> None:
    root = make_suite(tmp_path / "bad", tasks, **spec)

    with pytest.raises(AgentOSError) as caught:
        load_suite(root).tasks()

    text = str(caught.value)
    assert message in text and "\n" not in text, text
    assert caught.value.exit_code == 2
    assert str(root) in text


def test_a_folder_without_a_suite_or_a_split_is_named(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"not an eval suite: no suite\.yaml"):
        load_suite(tmp_path)
    root = make_suite(tmp_path / "s", [{"id": "a"}])
    with pytest.raises(BadInput, match=r"no split 'val' \(the suite has: tasks\)"):
        load_suite(root).tasks("val")
