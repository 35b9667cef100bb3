"""Evals (issue 18, under way): the evaluators that grade one answer, and eval suites as
folders, checked before anything runs."""

from __future__ import annotations

import io
import json
import tarfile
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
        (
            '{"id": "a"}\n',
            {"mode": "repo", "checks": [{"name": "x", "run": "true"}]},
            "a repo-mode task needs `request` and `repo`",
        ),
        (
            '{"id": "a", "request": "fix it", "repo": "."}\n',
            {"mode": "repo"},
            "task 'a': no checks to judge the work (the task's or the suite's)",
        ),
        (
            '{"id": "a", "request": "fix it", "repo": "../../etc"}\n',
            {"mode": "repo", "checks": [{"name": "x", "run": "true"}]},
            "no fixture folder or archive (.tar.gz, .tgz, .tar) '../../etc' in the suite",
        ),
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


# --- running a suite ------------------------------------------------------------------------

# A scripted agent: it computes sums, and gets 7+7 wrong.
ADDER = (
    'if [ "$AGENTOS_REQUEST" = "7+7" ]; then echo 15; else echo $(( $AGENTOS_REQUEST )); fi'
    ' > "$AGENTOS_OUTPUT_FILE"\n'
)
SUMS = [
    {"id": "two", "input": "2+2", "expected": 4},
    {"id": "three", "input": "3+3", "expected": 6},
    {"id": "five", "input": "5+5", "expected": 10},
    {"id": "seven", "input": "7+7", "expected": 14},
]


@pytest.fixture
def adder(ws: Any, tmp_path: Path) -> Path:
    from conftest import write_package

    from agentos.hub.store import Hub

    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "adder", name="adder", files={"run.sh": ADDER}))
    )
    return make_suite(tmp_path / "sums", SUMS, threshold=0.5)


def test_a_scripted_agent_that_answers_three_of_four_scores_0_75(
    cli: Any, ws: Any, adder: Path
) -> None:
    from agentos.receipts import list_receipts, read_receipt

    out = cli("eval", "run", str(adder), "--agent", "adder", "--json")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["average"] == report["dimensions"]["correctness"] == 0.75
    assert report["passed"] is True and report["agent"] == "adder@1.0.0"
    assert [(p["task"], p["answer"].strip(), p["score"]) for p in report["predictions"]] == [
        ("two", "4", 1.0),
        ("three", "6", 1.0),
        ("five", "10", 1.0),
        ("seven", "15", 0.0),
    ]
    assert report["predictions"][3]["feedback"] == "expected 14, got 15"
    kept = ws.state_dir / "evals" / report["id"]
    assert json.loads((kept / "predictions.json").read_text()) == report["predictions"]
    (receipt,) = [r for r in list_receipts(ws, run_id=report["id"])]
    text = read_receipt(ws, receipt.id)
    assert "kind: eval" in text and "average: 0.75" in text
    from agentos.shared.fs import sha256_file

    assert f"report_sha256: {sha256_file(kept / 'report.json')}" in text
    assert not (kept / "run").exists()  # the agents' env files are gone

    strict = cli("eval", "run", str(adder), "--agent", "adder", "--min-score", "0.8")
    assert strict.returncode == 1, strict.stderr
    assert "composite" in strict.stdout and "did not pass" in strict.stdout


def test_a_seeded_sample_picks_the_same_tasks_and_jobs_do_not_change_scores(
    cli: Any, adder: Path
) -> None:
    def report(*extra: str) -> dict[str, Any]:
        out = cli("eval", "run", str(adder), "--agent", "adder", "--json", *extra)
        assert out.returncode in (0, 1), out.stderr
        return dict(json.loads(out.stdout))

    first = report("--samples", "2", "--seed", "7")
    again = report("--samples", "2", "--seed", "7")
    assert first["tasks"] == again["tasks"] and len(first["tasks"]) == 2
    assert first["sample"] == {"samples": 2, "seed": 7}
    one, four = report("--jobs", "1"), report("--jobs", "4")
    assert [p["score"] for p in one["predictions"]] == [p["score"] for p in four["predictions"]]
    assert one["tasks"] == four["tasks"] == [t["id"] for t in SUMS]


def test_eval_run_refuses_bad_input_in_one_line(cli: Any, ws: Any, adder: Path) -> None:
    cases = [
        (["eval", "run", str(adder), "--agent", "nobody"], "no package 'nobody'"),
        (["eval", "run", "no-such-suite", "--agent", "adder"], "no eval suite 'no-such-suite'"),
        (["eval", "run", str(adder), "--agent", "adder", "--split", "val"], "no split 'val'"),
    ]
    for argv, message in cases:
        out = cli(*argv)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr
    assert not (ws.state_dir / "evals").exists()  # nothing ran, nothing written


def test_two_evals_of_a_suite_compare_task_by_task_and_other_suites_do_not(
    cli: Any, ws: Any, adder: Path, tmp_path: Path
) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    better = ADDER.replace("echo 15", "echo 14")
    src = write_package(tmp_path / "src2", name="adder", version="1.1.0", files={"run.sh": better})
    first = json.loads(cli("eval", "run", str(adder), "--agent", "adder", "--json").stdout)
    Hub(ws.hub_dir).install(str(src))
    second = json.loads(cli("eval", "run", str(adder), "--agent", "adder", "--json").stdout)

    out = cli("eval", "compare", first["id"], second["id"], "--json")

    assert out.returncode == 0, out.stderr
    diff = json.loads(out.stdout)
    assert (diff["a"]["agent"], diff["b"]["agent"]) == ("adder@1.0.0", "adder@1.1.0")
    assert diff["dimensions"]["correctness"] == 0.25
    assert [(t["task"], t["delta"]) for t in diff["tasks"] if t["delta"]] == [("seven", 1.0)]
    shown = json.loads(cli("eval", "show", second["id"], "--json").stdout)
    assert shown["average"] == 1.0 and len(shown["predictions"]) == 4
    listed = json.loads(cli("eval", "reports", "--json").stdout)["evals"]
    assert [e["id"] for e in listed] == [second["id"], first["id"]]

    other = make_suite(tmp_path / "others", [{"id": "x", "input": "1+1", "expected": 2}])
    (other / "suite.yaml").write_text('{"name": "others", "evaluator": {"kind": "numeric"}}')
    third = json.loads(cli("eval", "run", str(other), "--agent", "adder", "--json").stdout)
    refused = cli("eval", "compare", first["id"], third["id"])
    assert refused.returncode == 2
    assert "only runs of one suite and split compare" in refused.stderr
    missing = cli("eval", "show", "../../etc")
    assert (missing.returncode, missing.stderr) == (2, "error: ID: not an eval id: '../../etc'\n")


def test_a_command_evaluator_reads_the_answer_on_stdin_confined(
    cli: Any, ws: Any, adder: Path
) -> None:
    (adder / "suite.yaml").write_text(
        json.dumps(
            {
                "name": "sums",
                "evaluator": {"kind": "command", "command": "read n; [ $((n % 2)) -eq 0 ]"},
            }
        )
    )
    (adder / "tasks.jsonl").write_text(
        '{"id": "even", "input": "2+2"}\n{"id": "odd", "input": "7+7"}\n'
        '{"id": "sneaky", "input": "1+1", "evaluator": {"kind": "command", '
        '"command": "touch planted && cat"}}\n'
        '{"id": "planted", "input": "3+3", "evaluator": {"kind": "command", '
        '"command": "python3 -c \'import json, sys; sys.exit(json.load(sys.stdin) != 7)\'"}}\n'
    )
    # The agent plants a json.py that says yes in its scratch folder, where `python3 -c`
    # would import it from: the evaluator never runs there.
    from conftest import write_package

    from agentos.hub.store import Hub

    planter = ADDER + "printf 'import sys\\nsys.exit(0)\\n' > json.py\n"
    src = write_package(adder.parent / "src" / "planter", name="planter", files={"run.sh": planter})
    Hub(ws.hub_dir).install(str(src))

    out = cli("eval", "run", str(adder), "--agent", "planter", "--json")

    report = json.loads(out.stdout)
    got = {p["task"]: (p["score"], p["feedback"]) for p in report["predictions"]}
    assert got["even"] == (1.0, "`read n; [ $((n % 2)) -eq 0 ]` accepted the answer")
    assert got["odd"][0] == 0.0 and got["odd"][1].startswith(
        "`read n; [ $((n % 2)) -eq 0 ]` exited 1"
    )
    # The evaluator's folder is read-only to it: it cannot leave anything behind.
    assert got["sneaky"][0] == 0.0 and "Read-only file system" in got["sneaky"][1]
    assert got["planted"][0] == 0.0 and "exited 1" in got["planted"][1]


# A judge: reads the JSON request, gives 0.85 to a right answer, and prints garbage for 2+2.
JUDGE = r"""
python3 - <<'PY' > "$AGENTOS_OUTPUT_FILE"
import json, os
req = json.loads(os.environ["AGENTOS_REQUEST"])
if req["task"] == "2+2":
    print("great!")
elif req["task"] == "5+5":
    print(json.dumps({"score": 1.7}))
else:
    right = req["answer"].strip() == str(req["expected"])
    print(json.dumps({"score": 0.85 if right else 0.1, "reason": "checked by hand"}))
PY
"""


def test_a_judge_package_scores_each_answer(cli: Any, ws: Any, adder: Path, tmp_path: Path) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "judge", name="judge", files={"run.sh": JUDGE}))
    )
    (adder / "suite.yaml").write_text(
        json.dumps({"name": "sums", "evaluator": {"kind": "judge", "agent": "judge"}})
    )

    report = json.loads(cli("eval", "run", str(adder), "--agent", "adder", "--json").stdout)

    got = {p["task"]: (p["score"], p["feedback"]) for p in report["predictions"]}
    assert got == {
        "two": (0.0, "judge did not return a JSON score"),
        "three": (0.85, "checked by hand"),
        "five": (0.0, "judge score 1.7 is out of range (0..1)"),
        "seven": (0.1, "checked by hand"),
    }
    (adder / "suite.yaml").write_text(
        json.dumps({"name": "sums", "evaluator": {"kind": "judge", "agent": "nobody"}})
    )
    missing = cli("eval", "run", str(adder), "--agent", "adder")
    assert missing.returncode == 2
    assert missing.stderr == "error: evaluator.agent: no package 'nobody' in the hub\n"


def test_a_staged_suite_runs_the_rest_only_when_the_sample_clears_min_score(
    cli: Any, ws: Any, adder: Path, tmp_path: Path
) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    Hub(ws.hub_dir).install(
        str(
            write_package(
                tmp_path / "src" / "wrong",
                name="wrong",
                files={"run.sh": 'echo 0 > "$AGENTOS_OUTPUT_FILE"\n'},
            )
        )
    )
    spec = {"name": "sums", "evaluator": {"kind": "numeric"}, "threshold": 0.5}
    (adder / "suite.yaml").write_text(
        json.dumps({**spec, "staged": {"samples": 2, "min_score": 0.5}})
    )

    good = json.loads(cli("eval", "run", str(adder), "--agent", "adder", "--json").stdout)
    bad = cli("eval", "run", str(adder), "--agent", "wrong", "--json")

    assert good["staged"]["complete"] is True and len(good["predictions"]) == 4
    assert good["average"] == 0.75
    report = json.loads(bad.stdout)
    assert bad.returncode == 1
    assert report["staged"] == {"samples": 2, "min_score": 0.5, "score": 0.0, "complete": False}
    assert len(report["predictions"]) == 2 == len(report["tasks"])  # the rest never ran


def test_eval_list_names_the_suites_and_lint_names_each_problem(cli: Any, ws: Any) -> None:
    evals = ws.root / "evals"
    make_suite(evals / "good", [{"id": "a", "input": "1+1", "expected": 2}])
    bad = make_suite(evals / "bad", '{"id": "a"}\n{"id": "a"}\n')
    (bad / "val.jsonl").write_text("not json\n")

    listed = json.loads(cli("eval", "list", "--json").stdout)["suites"]
    linted = cli("eval", "lint")

    assert [(s["name"], s["path"]) for s in listed if s["path"].startswith(str(evals))] == [
        ("sums", str(evals / "bad")),
        ("sums", str(evals / "good")),
    ]
    assert linted.returncode == 2
    assert linted.stdout.splitlines() == [
        f"{bad / 'tasks.jsonl'}: line 2: task id 'a' is also on line 1",
        f"{bad / 'val.jsonl'}: line 1: not JSON (Expecting value, column 1)",
        "2 suites checked: 2 problem(s)",
    ]
    assert cli("eval", "lint", str(evals / "good")).returncode == 0


def test_the_bundled_calculator_answers_the_bundled_arithmetic_suite_but_the_words(
    cli: Any,
) -> None:
    out = cli("eval", "run", "arithmetic", "--agent", "calculator", "--json")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert {p["task"]: p["score"] for p in report["predictions"]} == {
        "add": 1.0,
        "precedence": 1.0,
        "parentheses": 1.0,
        "division": 1.0,
        "power": 1.0,
        "words": 0.0,
    }
    assert report["suite"] == "arithmetic" and report["passed"] is True


# --- repo mode -------------------------------------------------------------------------------


def repo_suite(root: Path) -> Path:
    fixture = root / "fixtures" / "two-problems"
    fixture.mkdir(parents=True)
    (fixture / "a.txt").write_text("broken\n")
    (fixture / "b.txt").write_text("broken\n")
    checks = [
        {"name": "a fixed", "file_contains": {"path": "a.txt", "pattern": "^fixed$"}},
        {"name": "b fixed", "file_contains": {"path": "b.txt", "pattern": "^fixed$"}},
    ]
    (root / "suite.yaml").write_text(
        json.dumps({"name": "fixes", "mode": "repo", "checks": checks, "threshold": 0.5})
    )
    # The same fixture as an archive, its files under one top folder (as `tar czf` makes it).
    with tarfile.open(root / "fixtures" / "two-problems.tar.gz", "w:gz") as tar:
        tar.add(fixture, arcname="two-problems")
    tasks = [
        {"id": "both", "request": "fix a.txt and b.txt", "repo": "fixtures/two-problems"},
        {"id": "packed", "request": "fix a.txt and b.txt", "repo": "fixtures/two-problems.tar.gz"},
    ]
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return root


@pytest.mark.slow
def test_repo_mode_scores_the_suites_checks_on_the_agents_work(
    cli: Any, ws: Any, tmp_path: Path, tmux_socket: str
) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    hub = Hub(ws.hub_dir)
    half = "echo fixed > a.txt\n"
    # It fixes nothing, and writes checks of its own that would pass: they are not used.
    cheat = (
        "printf 'checks:\\n  - {name: a fixed, run: \"true\"}\\n' > .agentos.yaml\n"
        "printf -- '- {name: b fixed, run: \"true\"}\\n' > checks.yaml\n"
    )
    for name, script in (("half", half), ("cheat", cheat)):
        hub.install(
            str(write_package(tmp_path / "src" / name, name=name, files={"run.sh": script}))
        )
    suite = repo_suite(tmp_path / "fixes")

    halfway = json.loads(cli("eval", "run", str(suite), "--agent", "half", "--json").stdout)
    cheated = cli("eval", "run", str(suite), "--agent", "cheat", "--json")

    for done in halfway["predictions"]:  # the folder and the archive alike
        assert (done["score"], done["feedback"]) == (
            0.5,
            "gate failed: 1 of 2 checks failed (b fixed)",
        )
        assert done["lines_changed"] == 2  # a.txt: one line out, one in
    assert halfway["dimensions"]["diff_size"] == 0.99  # of the suite's 200-line budget
    assert halfway["passed"] is True
    report = json.loads(cheated.stdout)
    assert cheated.returncode == 1
    assert [p["score"] for p in report["predictions"]] == [0.0, 0.0]


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ("../outside.txt", "member '../outside.txt' leaves the fixture ('..')"),
        ("/etc/cron.d/x", "member '/etc/cron.d/x' has an absolute path"),
    ],
)
def test_a_hostile_fixture_archive_stops_the_eval_before_anything_runs(
    cli: Any, ws: Any, adder: Path, tmp_path: Path, member: str, problem: str
) -> None:
    suite = repo_suite(tmp_path / "fixes")
    archive = suite / "fixtures" / "two-problems.tar.gz"
    archive.unlink()
    with tarfile.open(archive, "w:gz") as tar:
        data = b"planted\n"
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    ran = cli("eval", "run", str(suite), "--agent", "adder")
    linted = cli("eval", "lint", str(suite))

    for out in (ran, linted):
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"two-problems.tar.gz: {problem}" in out.stdout + out.stderr
    assert len(ran.stderr.splitlines()) == 1
    assert not (ws.state_dir / "evals").exists()
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.slow
def test_the_bundled_repo_suite_ruff_fixer_fixes_the_lint_and_not_the_failing_test(
    cli: Any, tmux_socket: str
) -> None:
    out = cli("eval", "run", "repo-basics", "--agent", "ruff-fixer", "--json")

    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout)
    got = {p["task"]: (p["score"], p["feedback"]) for p in report["predictions"]}
    assert got == {
        "lint": (1.0, "gate passed: 1 of 1 checks passed"),
        "failing-test": (0.0, "gate failed: 1 of 1 checks failed (tests pass)"),
    }


def test_an_answer_that_is_a_link_or_a_fifo_is_no_answer(cli: Any, ws: Any, tmp_path: Path) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    secret = tmp_path / "secret.txt"
    secret.write_text("42\n")  # a file of the host: the right answer, if it were read
    script = (
        'case "$AGENTOS_REQUEST" in\n'
        f'  link) ln -s {secret} "$AGENTOS_OUTPUT_FILE" ;;\n'
        '  fifo) mkfifo "$AGENTOS_OUTPUT_FILE" ;;\n'
        "esac\n"
    )
    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "sly", name="sly", files={"run.sh": script}))
    )
    suite = make_suite(
        tmp_path / "s",
        [
            {"id": "link", "input": "link", "expected": 42},
            {"id": "fifo", "input": "fifo", "expected": 42},
        ],
    )

    report = json.loads(cli("eval", "run", str(suite), "--agent", "sly", "--json").stdout)

    assert [(p["score"], p["answer"]) for p in report["predictions"]] == [(0.0, ""), (0.0, "")]
    assert {p["feedback"] for p in report["predictions"]} == {
        "the agent wrote no answer to $AGENTOS_OUTPUT_FILE"
    }


def test_tokens_and_cost_the_agent_reports_are_dimensions_against_the_suites_budgets(
    cli: Any, ws: Any, tmp_path: Path
) -> None:
    from conftest import write_package

    from agentos.hub.store import Hub

    script = (
        'echo $(( $AGENTOS_REQUEST )) > "$AGENTOS_OUTPUT_FILE"\n'
        'case "$AGENTOS_REQUEST" in\n'
        '  2+2) echo \'{"tokens": 200, "cost": 0.5}\' > "$AGENTOS_USAGE_FILE" ;;\n'
        '  3+3) echo \'{"tokens": 600}\' > "$AGENTOS_USAGE_FILE" ;;\n'
        '  5+5) echo \'{"tokens": "few"}\' > "$AGENTOS_USAGE_FILE" ;;\n'
        "esac\n"  # 7+7: says nothing
    )
    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "thrifty", name="thrifty", files={"run.sh": script}))
    )
    suite = make_suite(
        tmp_path / "sums",
        SUMS,
        weights={"correctness": 1, "tokens": 1},
        token_budget=1000,
        cost_budget=1.0,
    )

    out = cli("eval", "run", str(suite), "--agent", "thrifty", "--json")
    shown = cli("eval", "show", json.loads(out.stdout)["id"])

    report = json.loads(out.stdout)
    assert [(p["tokens"], p["cost"]) for p in report["predictions"]] == [
        (200, 0.5),
        (600, None),
        (None, None),  # a report that is not one is none
        (None, None),
    ]
    # A task that reported nothing scores 0 on the dimension: silence is not thrift.
    assert report["dimensions"]["tokens"] == pytest.approx((0.8 + 0.4) / 4)
    assert report["dimensions"]["cost"] == pytest.approx(0.5 / 4)
    assert report["composite"] == pytest.approx((1.0 + 0.3) / 2)  # cost is not weighted
    assert report["usage"] == {"tokens": 800, "cost": 0.5, "reported": 2}
    assert "the agent reported tokens 800, cost 0.5 over 2 of 4 tasks" in shown.stdout


def test_a_weight_on_tokens_needs_a_token_budget(tmp_path: Path) -> None:
    root = make_suite(tmp_path / "s", [{"id": "a"}], weights={"correctness": 1, "tokens": 1})
    with pytest.raises(AgentOSError, match="a weight on tokens needs `token_budget`"):
        load_suite(root)


def test_the_agent_cannot_read_the_suites_expected_answers(
    cli: Any, ws: Any, tmp_path: Path
) -> None:
    import shutil
    import tempfile

    from conftest import missing, write_package

    from agentos.hub.store import Hub
    from agentos.sandbox import choose

    if not choose(ws.settings.sandbox).confined:
        missing("no sandbox works here (bubblewrap, or unshare)")
    # Outside /tmp, the home and the workspace (each hidden or private in any sandbox).
    outside = Path(tempfile.mkdtemp(prefix="agentos-suite-", dir="/var/tmp"))
    try:
        suite = make_suite(
            outside / "s",
            [{"id": "peek", "input": str(outside / "s" / "tasks.jsonl"), "expected": "s3cr3t"}],
            evaluator={"kind": "contains"},
        )
        script = 'cat "$AGENTOS_REQUEST" > "$AGENTOS_OUTPUT_FILE" 2>&1\n'
        Hub(ws.hub_dir).install(
            str(write_package(tmp_path / "src" / "peek", name="peek", files={"run.sh": script}))
        )

        out = cli("eval", "run", str(suite), "--agent", "peek", "--json")

        (prediction,) = json.loads(out.stdout)["predictions"]
        assert prediction["score"] == 0.0 and "s3cr3t" not in prediction["answer"]
        assert "No such file" in prediction["answer"]  # it tried, and found nothing there
    finally:
        shutil.rmtree(outside)
