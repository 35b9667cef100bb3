"""What a run judges is what lands, and a run's end is told right: regressions found by a
hostile review of the review-before-merge and real-repository work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CliRunner, add_agent, branches, git, make_repo, needs_tmux

from agentos.receipts import list_receipts, load_receipt
from agentos.run.gc import collect_garbage
from agentos.run.orchestrator import RunOptions, start_run
from agentos.run.review import merge_run
from agentos.run.store import RunStatus, RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_gate_judges_the_commit_not_files_git_ignores(ws: Workspace, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".gitignore": "lib/\n", "app.py": "x = 1\n"})
    add_agent(
        ws,
        tmp_path,
        "sneaky",
        "mkdir -p lib && echo helper > lib/helper.txt && echo 'x = 2' > app.py\n",
        checks=[{"name": "helper there", "file_exists": "lib/helper.txt"}],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    report = start_run(ws, "sneaky-task", repo, force=True)

    # lib/helper.txt would never land (git ignores it), so the gate must not count it.
    assert report.status == "failed", report.message
    assert "x = 1" in (repo / "app.py").read_text()
    (agent,) = report.agents
    assert agent.gate is not None
    (failing,) = agent.gate.failures
    assert failing.output_tail == "lib/helper.txt does not exist\n"
    # ... and its receipt says what was removed before it judged.
    (gate,) = [r for r in list_receipts(ws, run_id=report.run_id) if r.kind == "gate"]
    assert load_receipt(ws, gate.id).fields["ignored_files_removed"] == ["lib"]


def test_an_agent_that_changes_how_the_repository_is_tested_does_not_merge_unseen(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            ".agentos.yaml": f"python: {sys.executable}\n",
            "tests/test_ok.py": "def test_ok(): pass\n",
        },
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    add_agent(ws, tmp_path, "rewirer", "echo 'test: \"true\"' >> .agentos.yaml\n")
    before = git(repo, "rev-parse", "main")
    request = "rewirer-task; done when tests pass"

    # How the repository is tested is not the agent's to change: its gate refuses it.
    out = cli("run", request, "--repo", str(repo), "--force", "--json")

    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["status"] == "failed", report["message"]
    (check,) = [c for c in report["agents"][0]["gate"]["checks"] if c["kind"] == "tests"]
    assert check["evidence"]["findings"] == [
        {
            "kind": "test settings changed",
            "path": ".agentos.yaml",
            "detail": "how AgentOS tests the repository",
            "allowed": False,
        }
    ]
    # Allowed, it still waits for a person's review.
    out = cli("run", request, "--repo", str(repo), "--force", "--json", "--allow-test-changes")

    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["status"] == "ready", report["message"]
    assert "rewirer changed .agentos.yaml, review it" in report["message"]
    assert git(repo, "rev-parse", "main") == before
    assert f"agentos/{report['run']}/rewirer" in branches(repo)


def test_a_test_script_the_agent_deleted_is_the_agents_failure_not_the_environments(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {".agentos.yaml": "test: ./run-tests.sh\n", "run-tests.sh": "#!/bin/sh\nexit 0\n"},
    )
    (repo / "run-tests.sh").chmod(0o755)
    git(repo, "commit", "-qam", "executable")
    add_agent(
        ws,
        tmp_path,
        "deleter",
        'if [ "$AGENTOS_ATTEMPT" = 1 ]; then rm run-tests.sh; '
        'else git checkout "$(git rev-list --max-parents=0 HEAD | tail -1)" -- . ; '
        "git checkout HEAD~1 -- run-tests.sh; fi\n",
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 1}\n")

    report = start_run(ws, "deleter-task; done when tests pass", repo, force=True)

    assert report.status == "succeeded", report.message
    assert report.agents[0].attempts == 2


def test_an_untracked_broken_test_in_the_checkout_does_not_stop_a_run(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            ".agentos.yaml": f"python: {sys.executable}\n",
            "tests/test_ok.py": "def test_ok(): pass\n",
        },
    )
    (repo / "tests" / "test_wip.py").write_text("def test_x(:\n")  # the person's, not committed
    add_agent(ws, tmp_path, "writer", "echo more >> notes.txt\n")

    out = cli("run", "writer-task; done when tests pass", "--repo", str(repo), "--force", "--json")

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"


@pytest.mark.process  # its PYTHONPATH is read when Python starts
def test_the_environment_check_runs_with_the_gates_environment(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    helper = tmp_path / "only-on-my-pythonpath"
    helper.mkdir()
    (helper / "helper_mod.py").write_text("VALUE = 1\n")
    repo = make_repo(
        tmp_path / "repo",
        {
            ".agentos.yaml": f"python: {sys.executable}\n",
            "tests/test_it.py": "import helper_mod\n\ndef test_it(): assert helper_mod.VALUE\n",
        },
    )
    add_agent(ws, tmp_path, "writer", "echo more >> notes.txt\n")

    out = cli(
        "run",
        "writer-task; done when tests pass",
        "--repo",
        str(repo),
        "--force",
        env={"PYTHONPATH": str(helper)},
    )

    # The gate's checks never see the person's PYTHONPATH, so neither does the check that
    # comes before the agents: the run stops at once instead of failing every attempt.
    assert out.returncode == 2, out.stdout + out.stderr
    assert "No module named 'helper_mod'" in out.stderr


def test_a_committed_agentos_yaml_that_is_not_utf8_is_one_line(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "x\n"})
    (repo / ".agentos.yaml").write_bytes(b'test: "\xff"\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "latin-1")
    add_agent(ws, tmp_path, "writer", "echo more >> notes.txt\n")

    out = cli("run", "writer-task", "--repo", str(repo), "--force")

    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith(
        ".agentos.yaml@"
        + git(repo, "rev-parse", "HEAD")[:12]
        + ": cannot read: the file is not UTF-8 text"
    )
    assert "Traceback" not in out.stderr


def test_an_agent_named_merge_can_merge(ws: Workspace, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "x\n"})
    add_agent(ws, tmp_path, "merge", "echo more >> notes.txt\n")

    report = start_run(ws, "merge-task", repo, force=True)

    assert report.status == "succeeded", report.message
    assert (repo / "notes.txt").read_text() == "x\nmore\n"


def test_gc_completes_a_merge_whose_process_died_after_it_landed(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "x\n"})
    add_agent(ws, tmp_path, "writer", "echo more >> notes.txt\n")
    add_agent(ws, tmp_path, "other", "echo other > other.txt\n")
    ready = start_run(ws, "writer-task", repo, RunOptions(force=True, merge=False))
    cut_short = start_run(ws, "other-task", repo, RunOptions(force=True, merge=False))
    assert merge_run(ws, ready.run_id).status == "succeeded"
    store = RunStore(ws)
    for run_id in (ready.run_id, cut_short.run_id):  # both "merging" under a dead process
        store.update(run_id, status="merging", pid=dead_pid(), pid_start=None)

    report = collect_garbage(ws)

    assert sorted(report.aborted_runs) == sorted([ready.run_id, cut_short.run_id])
    assert store.get(ready.run_id).status == "succeeded"
    assert store.get(cut_short.run_id).status == "ready"
    assert merge_run(ws, cut_short.run_id).status == "succeeded"  # and it can still land
    assert (repo / "notes.txt").read_text() == "x\nmore\n"
    assert (repo / "other.txt").read_text() == "other\n"
    assert branches(repo) == ["main"]


def test_a_run_being_merged_cannot_be_merged_twice(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "x\n"})
    add_agent(ws, tmp_path, "writer", "echo more >> notes.txt\n")
    run = start_run(ws, "writer-task", repo, RunOptions(force=True, merge=False))
    store = RunStore(ws)
    assert store.claim(
        run.run_id, (RunStatus.READY,), RunStatus.MERGING, pid=os.getpid()
    )  # another merge

    out = cli("runs", "merge", run.run_id)
    gc = collect_garbage(ws)  # the merging process is alive: gc leaves the run alone

    assert out.returncode == 2
    assert f"run {run.run_id} has status merging" in out.stderr
    assert run.run_id not in gc.aborted_runs
    assert not store.claim(run.run_id, (RunStatus.READY,), RunStatus.MERGING)
