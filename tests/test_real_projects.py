"""The main job on real projects from PyPI: their own tests, the worktree's own code.

Each project (tests/_projects.py) is its sdist as a git repository with its own .venv
holding an editable install of the main checkout, and a seeded bug in the code *and* its
test (so the suite passes on main). A scripted agent makes the right fix (code and test)
or a wrong one (the code only, which passes only where the main checkout's buggy code is
imported): the right one merges, the wrong one fails the gate, and the gate receipt holds
what the project's own test command printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _projects import ProjectRepo, _built_projects, project_repo  # noqa: F401 -- fixtures
from conftest import CliRunner, add_agent, branches, git, needs_tmux

from agentos.gate.repo import prepare_worktree, repo_profile
from agentos.receipts import load_receipt, read_receipt
from agentos.run.orchestrator import start_run
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket"), pytest.mark.slow]

PROJECTS = ["humanize", "six", "markdown"]

# What each project's own test command prints when the tests it ran pass.
PASSED = {
    "humanize": r"\d{2,} passed",
    "six": r"\d{2,} passed",
    "markdown": r"Ran \d{3,} tests.*\n\s*OK",
}


def request_for(proj: ProjectRepo) -> str:
    """The fix, done when the test file passes: the project's own command runs it (pytest
    takes the file; `make test` always runs the whole suite)."""
    code, test = proj.project.code.path, proj.project.test_file
    return (
        f"Fix the seeded bug in {code} and its test in {test}, without changing any other "
        f"file; the value it returns today is wrong. Done when {test} passes."
    )


def test_detected_setups_are_the_projects_own(
    ws: Workspace,
    project_repo: Callable[[str], ProjectRepo],  # noqa: F811 -- the fixture imported above
) -> None:
    found = {}
    for name in PROJECTS:
        proj = project_repo(name)
        profile = repo_profile(ws, proj.repo)
        found[name] = (profile.tool, profile.runner, profile.test)
    python = {name: str(project_repo(name).python) for name in PROJECTS}
    assert found == {
        "humanize": ("venv", "pytest", f"{python['humanize']} -m pytest -q"),
        "six": ("venv", "pytest", f"{python['six']} -m pytest -q"),
        "markdown": ("make", "make", "make test"),
    }


@pytest.mark.parametrize("name", PROJECTS)
def test_the_right_fix_merges_and_a_wrong_one_fails_the_projects_own_tests(
    ws: Workspace,
    tmp_path: Path,
    project_repo: Callable[[str], ProjectRepo],  # noqa: F811 -- the fixture imported above
    name: str,
) -> None:
    proj = project_repo(name)
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    profile = repo_profile(ws, proj.repo)
    add_agent(
        ws,
        tmp_path / "right",
        "fixer",
        proj.fix_script(proj.right_fix()),
        card={"triggers": {"keywords": ["correctly"]}},
    )
    add_agent(
        ws,
        tmp_path / "wrong",
        "wrong-fixer",
        proj.fix_script(proj.wrong_fix()),
        card={"triggers": {"keywords": ["wrongly"]}},
    )
    code_file = proj.project.code.path

    wrong = start_run(ws, request_for(proj) + " Do it wrongly.", proj.repo)

    assert wrong.status == "failed", wrong.message
    assert [a.agent for a in wrong.agents] == ["wrong-fixer"]
    assert git(proj.repo, "rev-parse", "main") == proj.base, "a wrong fix reached main"
    (receipt,) = wrong.agents[0].receipts
    text = read_receipt(ws, receipt)
    assert "kind: tests" in text and profile.test in text
    assert "result: fail" in text

    right = start_run(ws, request_for(proj) + " Do it correctly.", proj.repo)

    assert right.status == "succeeded", right.message + str(right.agents)
    assert [a.agent for a in right.agents] == ["fixer"]
    assert proj.project.code.good in (proj.repo / code_file).read_text()
    assert git(proj.repo, "rev-list", "--count", f"{proj.base}..main") == "1"
    assert git(proj.repo, "status", "--porcelain") == ""
    # The failed run's work is kept on its branch; the merged run's left the branch list.
    assert branches(proj.repo) == [f"agentos/{wrong.run_id}/wrong-fixer", "main"]
    (receipt,) = right.agents[0].receipts
    text = read_receipt(ws, receipt)
    assert profile.test in text
    assert re.search(PASSED[name], text), text
    # The request asked for the test to change ("and its test in ..."): the change to the
    # base's test is recorded as allowed, and who allowed it.
    checks = load_receipt(ws, receipt).fields["checks"]
    assert isinstance(checks, list)
    (check,) = checks
    evidence = check["evidence"]
    test_file = proj.project.test_file
    assert [(f["kind"], f["allowed"]) for f in evidence["findings"]] == [("test changed", True)]
    assert evidence["findings"][0]["path"].startswith(test_file + "::")
    assert evidence["test_changes_allowed"] == {
        "everything": False,
        "paths": [test_file],
        "why": f"the request: 'Fix the seeded bug in {code_file} and its test'",
    }


def test_the_test_runner_agent_runs_the_projects_own_command(
    ws: Workspace,
    project_repo: Callable[[str], ProjectRepo],  # noqa: F811 -- the fixture imported above
) -> None:
    proj = project_repo("six")
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    report = start_run(ws, "run the tests and report what fails", proj.repo)

    assert report.status == "succeeded", report.message
    (agent,) = report.agents
    assert agent.agent == "test-runner" and agent.version == "1.1.0"
    log = agent.log.read_text()
    assert f"test-runner: running `{proj.python} -m pytest -q`" in log
    assert re.search(PASSED["six"], log)
    assert git(proj.repo, "rev-parse", "main") == proj.base  # a read-only run changes nothing


def test_gate_run_the_stop_hook_and_a_run_judge_one_tree_alike(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    project_repo: Callable[[str], ProjectRepo],  # noqa: F811 -- the fixture imported above
) -> None:
    proj = project_repo("six")  # its suite takes a second; humanize's above takes ten
    ws.settings_file.write_text("checks: [{name: tests pass, tests: []}]\n")
    verdicts: dict[str, list[int]] = {"gate run": [], "gate hook": []}
    allow = "--allow-test-changes"  # the seeded bug is in a test too: the fix changes it
    for fix in (proj.wrong_fix(), proj.right_fix()):
        tree = proj.add_worktree(tmp_path / f"wt-{len(verdicts['gate run'])}")
        prepare_worktree(repo_profile(ws, proj.repo), tree)  # as a run prepares its worktrees
        proj.write(tree, fix)
        verdicts["gate run"].append(cli("gate", "run", allow, "--repo", str(tree)).returncode)
        hook_input = json.dumps({"cwd": str(tree), "hook_event_name": "Stop"})
        verdicts["gate hook"].append(cli("gate", "hook", allow, input=hook_input).returncode)
    # Without the allowance, the right fix's change to a test of the base is refused.
    refused = cli("gate", "run", "--json", "--repo", str(tree))
    (check,) = json.loads(refused.stdout)["checks"]
    assert refused.returncode == 1
    assert check["evidence"]["findings"] == [
        {"kind": "test changed", "path": "test_six.py::test_b", "detail": "", "allowed": False}
    ]
    # The wrong fix fails and the right one passes, from the worktree, as in a run.
    assert verdicts == {"gate run": [1, 0], "gate hook": [2, 0]}
