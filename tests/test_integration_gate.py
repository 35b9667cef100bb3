"""What lands is what was judged (issue 31): the integration gate, task forces whose
verifiers judge the integrated work, `runs merge --agent`, and the run's lifecycle promises
(a tie stays a tie, a dirty checkout is never merged into, a live run is never pruned,
nothing AgentOS runs writes into an agent's commit)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _projects import ProjectRepo, _built_projects, project_repo  # noqa: F401 -- fixtures
from conftest import (
    CliRunner,
    add_agent,
    branches,
    git,
    make_repo,
    needs_bwrap,
    needs_tmux,
    write_package,
)

from agentos.hub.store import Hub
from agentos.receipts import list_receipts, load_receipt
from agentos.routing.router import decide
from agentos.run.orchestrator import RunOptions, start_run
from agentos.run.review import prune
from agentos.run.store import RunStatus, RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

# Two changes, each fine alone, wrong together: the total grows, the limit shrinks.
FILES = {
    ".agentos.yaml": f"python: {sys.executable}\n",
    "config.py": "LIMIT = 10\n",
    "calc.py": "def total():\n    return 4\n",
    "tests/test_calc.py": (
        "import calc\nimport config\n\n\n"
        "def test_the_total_stays_within_the_limit():\n"
        "    assert calc.total() <= config.LIMIT\n"
    ),
}
GROW = "sed -i 's/return 4/return 8/' calc.py\n"
SHRINK = "sed -i 's/LIMIT = 10/LIMIT = 5/' config.py\n"
REQUEST = "Rebalance calc.py and config.py for the new quota; done when tests pass"


def _repo(ws: Workspace, tmp_path: Path) -> Path:
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    return make_repo(tmp_path / "repo", FILES)


def test_runs_merge_onto_a_target_that_moved_judges_the_combination_and_refuses_it(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    # Meanwhile the target gains a commit that touches no file the agent changed, and
    # passes its own tests, but not with the agent's work.
    (repo / "config.py").write_text("LIMIT = 5\n")
    git(repo, "commit", "-qam", "A smaller limit")
    moved = git(repo, "rev-parse", "main")

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert out.returncode == 1 and merged["merged"] is False, merged
    assert "grower on main" in merged["message"] and "fails its checks" in merged["message"]
    assert git(repo, "rev-parse", "main") == moved
    gate = load_receipt(ws, _receipts(ws, "gate")[-1])
    assert gate.fields["via"] == "integration gate" and gate.fields["onto"] == moved
    assert gate.fields["passed"] is False
    assert RunStore(ws).get(report.run_id).status == "ready"  # it may be merged later


@pytest.mark.parametrize("first", ["silent", "long"])
def test_runs_merge_names_the_first_check_the_combination_fails_and_the_receipt_what_it_judged(
    ws: Workspace, cli: CliRunner, tmp_path: Path, first: str
) -> None:
    repo = _repo(ws, tmp_path)
    said = "the limit: " + "0" * 450
    silent = {"name": "limit kept", "run": "grep -q 'LIMIT = 10' config.py"}
    loud = {
        "name": "limit said",
        "run": f"grep -q 'LIMIT = 10' config.py || {{ printf '\\n  {said}\\n'; exit 1; }}",
    }
    checks = [silent, loud] if first == "silent" else [loud, silent]
    card = {"triggers": {"keywords": ["quota"]}}
    add_agent(ws, tmp_path, "grower", GROW, card=card, checks=checks)
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    (repo / "config.py").write_text("LIMIT = 5\n")
    git(repo, "commit", "-qam", "A smaller limit")
    moved = git(repo, "rev-parse", "main")

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    verdict = load_receipt(ws, merged["receipt"]).fields["integration_gate"]
    assert isinstance(verdict, dict)
    gate = load_receipt(ws, verdict["receipt"])
    # Its first failing check's first line that says something, within 400 characters
    failure = "; limit kept: " if first == "silent" else f"; limit said: {said}"[:400]
    summary = f"{gate.fields['summary']}{failure}"
    assert verdict == {"passed": False, "summary": summary, "receipt": gate.id, "skipped": None}
    assert (
        merged["message"]
        == f"not merged: grower on main ({moved[:12]}) fails its checks: {summary}"
    )
    assert gate.id in [r.id for r in list_receipts(ws, run_id=report.run_id)]
    context = {k: gate.fields[k] for k in ("via", "agents", "onto", "passed")}
    assert context == {
        "via": "integration gate",
        "agents": ["grower"],
        "onto": moved,
        "passed": False,
    }
    integrated = str(gate.fields["commit"])  # the grower's work made on the moved target
    assert git(repo, "rev-parse", f"{integrated}^") == moved
    assert git(repo, "show", f"{integrated}:calc.py") == "def total():\n    return 8"
    assert git(repo, "rev-parse", "main") == moved


def test_two_agents_whose_combination_fails_are_not_merged_together(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    before = git(repo, "rev-parse", "main")
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})
    add_agent(ws, tmp_path, "shrinker", SHRINK, card={"triggers": {"keywords": ["quota"]}})

    report = start_run(ws, REQUEST, repo, RunOptions(force=True))

    assert [a.status for a in report.agents] == ["passed", "passed"]  # each alone is fine
    assert report.status == "failed", report.message
    assert "grower + shrinker on main" in report.message, report.message
    assert "fails its checks" in report.message
    assert git(repo, "rev-parse", "main") == before
    assert {f"agentos/{report.run_id}/grower", f"agentos/{report.run_id}/shrinker"} <= set(
        branches(repo)
    )
    # Both together failed: `runs merge` does not try again; one of them may land (--agent).
    refused = cli("runs", "merge", report.run_id)
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: ID: run {report.run_id} has status failed; only a run that passed its gate "
        "and was not merged (run --no-merge: ready, or a conflict) can be merged\n",
    )
    assert git(repo, "rev-parse", "main") == before


def test_one_agent_onto_the_target_it_started_from_is_not_gated_twice(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})

    report = start_run(ws, REQUEST, repo, RunOptions(force=True))

    assert report.status == "succeeded", report.message
    assert report.merge is not None
    gate = report.merge["integration_gate"]
    assert gate == {
        "passed": True,
        "summary": "the integrated tree is the one grower's gate passed",
        "receipt": None,
        "skipped": "the tree was already gated",
    }


@pytest.mark.parametrize("node", [None, "node-1"], ids=["gated-here", "gated-on-a-node"])
def test_runs_merge_judges_again_the_tree_a_cluster_node_gated_never_one_gated_here(
    ws: Workspace, cli: CliRunner, tmp_path: Path, node: str | None
) -> None:
    repo = _repo(ws, tmp_path)
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    if node is not None:  # where the agent ran, as a cluster's driver records it
        store = RunStore(ws)
        options = store.get(report.run_id).options or {}
        store.update(report.run_id, options={**options, "cluster": {"grower": {"node": node}}})
        store.close()

    out = cli("runs", "merge", report.run_id, "--json")

    assert out.returncode == 0, out.stderr
    merge = load_receipt(ws, json.loads(out.stdout)["receipt"])
    gate = merge.fields["integration_gate"]
    assert isinstance(gate, dict)
    if node is None:
        assert gate == {
            "passed": True,
            "summary": "the integrated tree is the one grower's gate passed",
            "receipt": None,
            "skipped": "the tree was already gated",
        }
    else:
        judged = load_receipt(ws, gate["receipt"])
        assert (judged.kind, judged.fields["via"], judged.fields["passed"]) == (
            "gate",
            "integration gate",
            True,
        )
        assert (gate["passed"], gate["skipped"]) == (True, None)


def test_runs_merge_judges_the_combination_by_the_targets_settings_whatever_is_checked_out(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    (repo / "notes.txt").write_text("meanwhile\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "meanwhile")  # the target moved: the checks run again
    moved = git(repo, "rev-parse", "main")
    git(repo, "checkout", "-qb", "elsewhere")  # a branch tested otherwise is checked out
    (repo / ".agentos.yaml").write_text(f"python: {sys.executable}\ntest: 'false'\n")
    git(repo, "commit", "-qam", "tested otherwise")

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["merged"]) == (0, True), merged
    assert git(repo, "rev-parse", "main^") == moved
    assert git(repo, "show", "main:calc.py") == "def total():\n    return 8"


def test_runs_merge_judges_the_combination_with_the_tests_the_request_named_and_let_change(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    files = {
        **FILES,
        "tests/test_other.py": "def test_already_broken():\n    assert False\n",
    }
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    repo = make_repo(tmp_path / "repo", files)
    raise_limit = (
        "sed -i 's/return 4/return 12/' calc.py\n"
        "sed -i 's/<= config.LIMIT/<= config.LIMIT + 2/' tests/test_calc.py\n"
    )
    add_agent(ws, tmp_path, "raiser", raise_limit, card={"triggers": {"keywords": ["quota"]}})
    request = (
        "Raise the quota in calc.py and update tests/test_calc.py to allow it; done when tests pass"
    )
    report = start_run(ws, request, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    (repo / "notes.txt").write_text("meanwhile\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "meanwhile")  # the target moved: the checks run again

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["merged"]) == (0, True), merged
    assert "return 12" in git(repo, "show", "main:calc.py")


def test_runs_merge_judges_the_combination_in_the_repositorys_environment_on_its_own_code(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    repo = make_repo(
        tmp_path / "repo",
        {
            ".agentos.yaml": "env: {QUOTA_EXPECTED: '8'}\n",
            "src/quota/__init__.py": "def total():\n    return 4\n",
            "notes.txt": "start\n",
        },
    )
    (repo / ".git" / "info" / "exclude").write_text("/.venv\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", repo / ".venv"], check=True)
    site = next((repo / ".venv" / "lib").glob("python*/site-packages"))
    (site / "quota.pth").write_text(f"{repo}/src\n")  # an editable install of the checkout
    expected = "import os, sys, quota; sys.exit(quota.total() != int(os.environ['QUOTA_EXPECTED']))"
    add_agent(
        ws,
        tmp_path,
        "grower",
        "sed -i 's/return 4/return 8/' src/quota/__init__.py\n",
        card={"triggers": {"keywords": ["quota"]}},
        checks=[{"name": "the quota expected", "run": f'python -c "{expected}"'}],
    )
    report = start_run(ws, "Raise the quota", repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    (repo / "notes.txt").write_text("meanwhile\n")
    git(repo, "commit", "-qam", "meanwhile")  # the target moved: the checks run again

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["merged"]) == (0, True), merged
    assert "return 8" in git(repo, "show", "main:src/quota/__init__.py")


@needs_bwrap
def test_runs_merge_judges_the_combination_confined_as_the_agents_gates_did(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\nsandbox: {backend: bwrap}\n")
    hidden = {"name": "the workspace out of sight", "run": f"test ! -e {ws.settings_file}"}
    card = {"triggers": {"keywords": ["quota"]}}
    add_agent(ws, tmp_path, "grower", GROW, card=card, checks=[hidden])
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    (repo / "notes.txt").write_text("meanwhile\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "meanwhile")  # the target moved: the checks run again

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["merged"]) == (0, True), merged


# --- task forces ----------------------------------------------------------------------------


def test_bundled_cards_and_a_default_agent_fix_a_failing_test_and_verify_the_fix(
    ws: Workspace,
    tmp_path: Path,
    project_repo: Callable[..., ProjectRepo],  # noqa: F811 -- the fixture imported above
) -> None:
    proj = project_repo("six", regression=True)
    code = proj.project.code
    add_agent(ws, tmp_path, "fixer", f"sed -i 's/{code.bad}/{code.good}/' six.py\n")
    ws.settings_file.write_text("run: {guardian: false, retries: 0, default_agent: fixer}\n")
    request = "Fix the failing test in test_six.py; done when tests pass"

    report = start_run(ws, request, proj.repo, RunOptions(force=True))

    assert report.status == "succeeded", report.message
    assert report.decision is not None
    assert report.decision.decided_by == "cards and run.default_agent"
    assert [(a.agent, a.status) for a in report.agents] == [
        ("fixer", "passed"),
        ("test-runner", "passed"),
    ]
    assert git(proj.repo, "rev-list", "--count", f"{proj.base}..main") == "1"
    assert code.good in (proj.repo / "six.py").read_text()
    # The verifier judged the fixer's integrated work, after it: never the unfixed base.
    fixer, runner = report.agents
    assert runner.gated_commit and runner.gated_commit != proj.base
    assert git(proj.repo, "show", f"{runner.gated_commit}:six.py") == (
        proj.repo / "six.py"
    ).read_text().rstrip("\n")
    fixed_at = load_receipt(ws, fixer.receipts[-1]).time
    runner_started = load_receipt(ws, runner.receipts[0]).time
    assert fixed_at < runner_started


def test_runs_merge_of_a_task_force_lands_the_changers_work_and_nothing_of_its_verifier(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "calc.py": "def total():\n    return 40\n"})
    base = git(repo, "rev-parse", "main")
    add_agent(ws, tmp_path, "fixer", "sed -i 's/return 40/return 4/' calc.py\n")
    ws.settings_file.write_text("run: {guardian: false, retries: 0, default_agent: fixer}\n")
    report = start_run(
        ws,
        "Fix the failing test in tests/test_calc.py",
        repo,
        RunOptions(force=True, merge=False),
    )
    assert report.status == "ready", report.message
    fixer, runner = report.agents
    assert (fixer.agent, runner.agent) == ("fixer", "test-runner")

    out = cli("runs", "merge", report.run_id, "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["status"]) == (0, "succeeded"), out.stderr
    assert merged["commits"] == [git(repo, "rev-parse", "main")]
    assert git(repo, "rev-list", "--count", f"{base}..main") == "1"
    assert git(repo, "show", "main:calc.py") == "def total():\n    return 4"
    assert load_receipt(ws, merged["receipt"]).fields["landed"] == {"fixer": fixer.gated_commit}


def test_a_change_request_only_a_verifier_matches_says_so_once(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)

    report = start_run(
        ws, "Fix the failing test in tests/test_calc.py", repo, RunOptions(force=True)
    )

    assert report.status == "no_match"
    assert report.message == (
        "no agent that changes code matched the request, only test-runner, which changes "
        "nothing: set run.default_agent in agentos.yaml, or pick one with --agent"
    )
    assert report.agents == []  # nothing started, nothing retried


def test_a_package_that_changes_nothing_runs_after_the_agents_that_do(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    src = write_package(
        tmp_path / "src" / "checker",
        name="checker",
        changes=False,
        files={"run.sh": "grep -q 'return 8' calc.py\n"},  # fails on the base
    )
    Hub(ws.hub_dir).install(str(src))
    (ws.cards_dir / "checker.yaml").write_text(
        "id: checker-card\nagent: checker\ndescription: d\ngroup: review\n"
        "triggers: {keywords: [quota]}\n"
    )
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})

    report = start_run(ws, REQUEST, repo, RunOptions(force=True))

    assert report.status == "succeeded", report.message
    assert {a.agent: (a.status, a.exit_code) for a in report.agents} == {
        "checker": ("passed", 0),
        "grower": ("passed", 0),
    }


def test_runs_merge_agent_lands_the_agent_that_passed_of_a_run_where_another_failed(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    project_repo: Callable[..., ProjectRepo],  # noqa: F811 -- the fixture imported above
) -> None:
    proj = project_repo("six", regression=True)
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    code = proj.project.code
    fix = f"sed -i 's/{code.bad}/{code.good}/' six.py\n"
    add_agent(ws, tmp_path, "fixer", fix, card={"triggers": {"keywords": ["latin"]}})
    add_agent(
        ws,
        tmp_path,
        "deleter",
        "git rm -q test_six.py\n",
        card={"triggers": {"keywords": ["latin"]}},
    )
    report = start_run(
        ws,
        "Make six.b return latin bytes again; done when tests pass",
        proj.repo,
        RunOptions(force=True),
    )
    assert report.status == "failed", report.message
    assert git(proj.repo, "rev-parse", "main") == proj.base

    refused = cli("runs", "merge", report.run_id, "--json")
    assert refused.returncode == 1 and "has no passing commit" in refused.stderr

    out = cli("runs", "merge", report.run_id, "--agent", "fixer", "--json")

    merged = json.loads(out.stdout)
    assert out.returncode == 0, out.stderr
    assert merged["status"] == "succeeded" and merged["merged"] is True
    assert merged["message"].endswith("; not landed: deleter (their branches are kept)")
    assert code.good in (proj.repo / "six.py").read_text()
    assert (proj.repo / "test_six.py").exists()
    assert git(proj.repo, "rev-list", "--count", f"{proj.base}..main") == "1"
    assert f"agentos/{report.run_id}/deleter" in branches(proj.repo)


# --- the run's lifecycle promises -----------------------------------------------------------


def test_a_tie_between_cards_stays_a_question_even_with_a_default_agent(
    ws: Workspace, tmp_path: Path
) -> None:
    for name in ("left", "right"):
        add_agent(
            ws,
            tmp_path,
            name,
            "true\n",
            card={"group": "pair", "triggers": {"keywords": ["widget"]}},
        )
    ws.settings_file.write_text("run: {guardian: false, default_agent: left}\n")

    decision = decide(ws, "Polish the widget", change=True)

    assert decision.decision == "clarify"
    assert decision.tied == ["left-card", "right-card"]
    assert decision.decided_by == "cards"


def test_runs_merge_refuses_a_target_checkout_with_uncommitted_changes(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = _repo(ws, tmp_path)
    (repo / "README.md").write_text("notes\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "readme")
    add_agent(ws, tmp_path, "grower", GROW, card={"triggers": {"keywords": ["quota"]}})
    report = start_run(ws, REQUEST, repo, RunOptions(force=True, merge=False))
    assert report.status == "ready", report.message
    before = git(repo, "rev-parse", "main")
    (repo / "README.md").write_text("my own edit, not committed\n")  # not a file it changed

    out = cli("runs", "merge", report.run_id)

    assert out.returncode == 2
    assert "uncommitted changes (README.md) on main" in out.stderr
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "README.md").read_text() == "my own edit, not committed\n"
    assert RunStore(ws).get(report.run_id).status == "ready"


def test_runs_prune_never_touches_a_live_run_however_old(ws: Workspace, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = RunStore(ws)
    month = time.time() - 40 * 24 * 3600
    for run_id, status in (
        ("20000101-000000-live01", RunStatus.RUNNING),
        ("20000101-000000-done01", RunStatus.FAILED),
    ):
        store.create(run_id, "old work", repo)
        store.update(run_id, status=status, started_at=month, created_at=month)
        if status is RunStatus.FAILED:
            store.update(run_id, ended_at=month)
        git(repo, "branch", f"agentos/{run_id}/agent")
    store.close()

    report = prune(ws, older_than_days=1)

    assert report.removed == [f"{repo}: refs/heads/agentos/20000101-000000-done01/agent"]
    assert "agentos/20000101-000000-live01/agent" in branches(repo)


def test_no_bytecode_or_cache_made_by_agentos_lands_in_a_repository_that_ignores_nothing(
    ws: Workspace, tmp_path: Path
) -> None:
    files = {
        ".agentos.yaml": f"python: {sys.executable}\n",
        "pkg/__init__.py": "from pkg.core import double\n",
        "pkg/core.py": "def double(x):\n    return x + x + 1\n",
        "tests/test_core.py": (
            "from pkg import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
        ),
    }
    repo = make_repo(tmp_path / "repo", files)
    assert not (repo / ".gitignore").exists()
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    add_agent(
        ws,
        tmp_path,
        "doubler",
        "sed -i 's/x + x + 1/x + x/' pkg/core.py\npython3 -c 'import pkg' || true\n",
        card={"triggers": {"keywords": ["double"]}},
    )

    report = start_run(
        ws, "Fix double in pkg/core.py; done when tests pass", repo, RunOptions(force=True)
    )

    assert report.status == "succeeded", report.message
    landed = git(repo, "ls-tree", "-r", "--name-only", "main").split()
    assert sorted(landed) == sorted(files)
    for commit in report.agents[0].commits:
        changed = git(repo, "show", "--name-only", "--format=", commit).split()
        assert changed == ["pkg/core.py"], changed


def _receipts(ws: Workspace, kind: str) -> list[str]:
    ids = sorted(p.stem for p in ws.receipts_dir.glob("*.txt"))
    return [r for r in ids if load_receipt(ws, r).kind == kind]
