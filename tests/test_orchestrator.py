"""The orchestrator end to end: real git repositories, a real tmux server, real agents."""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import (
    CliRunner,
    add_agent,
    branches,
    git,
    make_repo,
    needs_tmux,
    processes_named,
    tmux_sessions,
    wait_until,
    worktrees,
)

from agentos.receipts import read_receipt
from agentos.run.orchestrator import RunReport, start_run
from agentos.run.store import RunStatus, RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# target\n", "shared.txt": "original\n"})


def test_two_agents_run_in_parallel_and_their_work_is_merged(
    ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    # Each waits, once started, until the test lets it go: the test lets them go only when
    # both wait at once, so one at a time never gets there.
    for name in ("alpha", "beta"):
        add_agent(
            ws,
            tmp_path,
            name,
            f"touch {name}.waiting\nuntil [ -e go ]; do sleep 0.05; done\n"
            f"rm go {name}.waiting\necho {name} > {name}.txt\n",
            checks=[{"name": f"{name} wrote its file", "file_exists": f"{name}.txt"}],
        )
    reports: list[RunReport] = []
    running = threading.Thread(
        target=lambda: reports.append(
            start_run(ws, "alpha-task and beta-task please", repo, force=True)
        )
    )
    running.start()

    def waiting(name: str) -> Path | None:
        found = list(ws.worktrees_dir.glob(f"*/{name}/{name}.waiting"))
        return found[0].parent if found else None

    def release_all() -> bool:
        for name in ("alpha", "beta"):
            if (worktree := waiting(name)) and not (worktree / "go").exists():
                (worktree / "go").touch()
        return not running.is_alive()

    def both_waiting() -> list[Path] | None:
        found = [waiting("alpha"), waiting("beta")]
        return [w for w in found if w] if all(found) else None

    try:
        both = wait_until(both_waiting, timeout=60, what="alpha and beta waiting at once")
        for worktree in both:
            (worktree / "go").touch()
        running.join()
    finally:
        if running.is_alive():  # the test failed: let the run end
            wait_until(release_all, timeout=240, what="the run to end")
    (report,) = reports

    assert report.status == "succeeded", report.message
    assert sorted(a.agent for a in report.agents) == ["alpha", "beta"]
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    assert git(repo, "status", "--porcelain") == ""
    assert "AGENTOS_CONTEXT.md" not in git(repo, "ls-files")
    # Nothing is left behind: no session, no extra worktree, no agent branch.
    assert tmux_sessions(tmux_socket) == []
    assert worktrees(repo) == [str(repo)]
    assert branches(repo) == ["main"]
    assert not (ws.worktrees_dir / report.run_id).exists()
    kinds = [read_receipt(ws, rid) for rid in report.receipts]
    assert len(kinds) == len(report.receipts) >= 5  # route, 2 gates, merge, run
    record = RunStore(ws).get(report.run_id)
    assert record.status == "succeeded"
    assert {a.agent: (a.status, a.exit_code) for a in record.agents} == {
        "alpha": ("passed", 0),
        "beta": ("passed", 0),
    }


def test_an_agent_never_sees_parent_environment_it_did_not_list(
    ws: Workspace, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARENT_SECRET", "do-not-leak")
    monkeypatch.setenv("LISTED_VAR", "passed-through")
    add_agent(ws, tmp_path, "envdump", "env | sort > env.txt\n", env=["LISTED_VAR"])

    report = start_run(ws, "envdump-task", repo, force=True)

    assert report.status == "succeeded", report.message
    seen = dict(
        line.split("=", 1) for line in (repo / "env.txt").read_text().splitlines() if "=" in line
    )
    assert seen["LISTED_VAR"] == "passed-through"
    assert "PARENT_SECRET" not in seen
    assert seen["AGENTOS_RUN_ID"] == report.run_id
    assert not {
        k
        for k in seen
        if k
        not in {
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "PYTHONUNBUFFERED",
            "PYTHONDONTWRITEBYTECODE",
            "PWD",
            "SHLVL",
            "_",
            "OLDPWD",
            "LISTED_VAR",
            "PYTHONPATH",  # the import shim: the worktree's code, not the main checkout's
            "PYTHONPYCACHEPREFIX",  # bytecode never read from beside the sources
            # the confined agent's own git index and objects (its git dir is read-only)
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        }
        and not k.startswith("AGENTOS_")
    }


def test_an_agent_that_claims_success_without_the_work_fails_and_nothing_merges(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(
        ws,
        tmp_path,
        "liar",
        "echo SUCCESS: all done\nexit 0\n",
        checks=[
            {
                "name": "feature exists",
                "file_contains": {"path": "shared.txt", "pattern": "^feature$"},
            }
        ],
    )
    head_before = git(repo, "rev-parse", "HEAD")

    report = start_run(ws, "liar-task", repo, force=True)

    assert report.status == "failed"
    assert report.agents[0].attempts == 3  # retries: 2 by default
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert report.merge is None


def test_an_agent_that_reads_the_fed_back_failure_succeeds_on_attempt_two(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    script = (
        'if [ -f AGENTOS_FEEDBACK.md ] && grep -q "FAILED: has feature" AGENTOS_FEEDBACK.md;'
        ' then echo feature > shared.txt; else echo "first try: doing nothing"; fi\n'
    )
    add_agent(
        ws,
        tmp_path,
        "learner",
        script,
        checks=[
            {"name": "has feature", "file_contains": {"path": "shared.txt", "pattern": "^feature$"}}
        ],
    )

    report = start_run(ws, "learner-task", repo, force=True)

    assert report.status == "succeeded", report.message
    assert report.agents[0].attempts == 2
    assert (repo / "shared.txt").read_text() == "feature\n"
    gates = [read_receipt(ws, r) for r in report.receipts]
    gates = [g for g in gates if "kind: gate" in g]
    assert len(gates) == 2
    assert "attempt: 1" in gates[0] and "fail" in gates[0]
    assert "attempt: 2" in gates[1] and "pass" in gates[1]


def test_checks_written_inside_the_worktree_do_not_change_the_gate(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    script = (
        "printf 'checks: []\\n' > agentos.yaml\n"
        "mkdir -p hub/cheat/1.0.0 && printf 'checks: []\\n' > agent.yaml\n"
    )
    add_agent(
        ws,
        tmp_path,
        "cheat",
        script,
        checks=[{"name": "must exist", "file_exists": "never-created.txt"}],
    )
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")

    report = start_run(ws, "cheat-task", repo, force=True)

    assert report.status == "failed"
    gate = report.agents[0].gate
    assert gate is not None and gate.as_dict()["checks"][0]["name"] == "must exist"


def test_conflicting_agents_stop_the_run_and_keep_both_branches(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "left", "echo left > shared.txt\n")
    add_agent(ws, tmp_path, "right", "echo right > shared.txt\n")
    head_before = git(repo, "rev-parse", "HEAD")

    report = start_run(ws, "left-task right-task", repo, force=True)

    assert report.status == "conflict"
    assert report.merge is not None and report.merge["conflicts"] == ["shared.txt"]
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert (repo / "shared.txt").read_text() == "original\n"
    kept = {b for b in branches(repo) if b.startswith("agentos/")}
    assert kept == {f"agentos/{report.run_id}/left", f"agentos/{report.run_id}/right"}
    assert git(repo, "show", f"agentos/{report.run_id}/left:shared.txt") == "left"
    assert git(repo, "show", f"agentos/{report.run_id}/right:shared.txt") == "right"
    assert worktrees(repo) == [str(repo)]


def test_an_agent_past_its_timeout_is_killed_and_fails(
    ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "sleeper", "sleep 60\n", timeout=1)
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")

    report = start_run(ws, "sleeper-task", repo, force=True)

    assert report.status == "failed"
    assert report.agents[0].exit_code == 124
    assert tmux_sessions(tmux_socket) == []


def test_a_missing_cli_is_a_clear_error_before_anything_starts(
    cli: CliRunner, ws: Workspace, repo: Path, tmux_socket: str
) -> None:
    result = cli(
        "run",
        "claude: implement the feature with claude code",
        "--repo",
        str(repo),
        "--force",
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "needs the `claude` CLI" in result.stderr
    assert "npm install -g @anthropic-ai/claude-code" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert worktrees(repo) == [str(repo)] and branches(repo) == ["main"]
    assert tmux_sessions(tmux_socket) == []


def test_uncommitted_changes_in_the_target_are_refused(cli: CliRunner, repo: Path) -> None:
    (repo / "shared.txt").write_text("local edit\n")
    result = cli("run", "fix the lint errors", "--repo", str(repo), "--force")
    assert result.returncode == 2
    assert "uncommitted changes (shared.txt)" in result.stderr


def test_a_request_no_card_matches_ends_as_no_match(cli: CliRunner, repo: Path) -> None:
    result = cli("run", "bake a chocolate cake", "--repo", str(repo), "--force", "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert (data["status"], data["decision"]["decision"]) == ("no_match", "no_match")
    assert branches(repo) == ["main"]


def _start_in_background(ws: Workspace, request: str, repo: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentos",
            "--workspace",
            str(ws.root),
            "run",
            request,
            "--repo",
            str(repo),
            "--force",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _worktree_of(ws: Workspace, name: str) -> Path:
    found: list[Path] = []

    def present() -> bool:
        found[:] = list(ws.worktrees_dir.glob(f"*/{name}/progress.txt"))
        return bool(found)

    wait_until(present)
    return found[0].parent


def test_kill_9_of_the_orchestrator_then_gc_leaves_nothing_orphaned(
    ws: Workspace, tmp_path: Path, repo: Path, cli: CliRunner, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "worker", "echo halfway > progress.txt\nsleep 120\n")
    proc = _start_in_background(ws, "worker-task", repo)
    worktree = _worktree_of(ws, "worker")
    run_id = worktree.parent.name
    wait_until(lambda: tmux_sessions(tmux_socket) != [])

    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)  # (and closes its pipes)
    assert tmux_sessions(tmux_socket) != []  # the crash left the session behind

    result = cli("gc", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["aborted_runs"] == [run_id]
    assert tmux_sessions(tmux_socket) == []
    assert worktrees(repo) == [str(repo)]
    assert not worktree.exists()
    assert RunStore(ws).get(run_id).status == "aborted"
    assert git(repo, "show", f"agentos/{run_id}/worker:progress.txt") == "halfway"
    for lock in (ws.hub_dir / ".lock", ws.receipts_dir / ".lock"):
        if lock.exists():
            with lock.open("a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    assert json.loads(cli("gc", "--json").stdout)["aborted_runs"] == []


def test_sigterm_cancels_the_run_tears_down_and_keeps_the_work(
    ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "patient", "echo started > progress.txt\nsleep 120\n")
    proc = _start_in_background(ws, "patient-task", repo)
    worktree = _worktree_of(ws, "patient")
    run_id = worktree.parent.name

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 1, err
    assert json.loads(out)["status"] == "cancelled"
    assert tmux_sessions(tmux_socket) == []
    assert worktrees(repo) == [str(repo)]
    assert git(repo, "show", f"agentos/{run_id}/patient:progress.txt") == "started"
    assert RunStore(ws).get(run_id).status == "cancelled"


@pytest.mark.process  # `agentos attach` replaces the process with tmux
def test_runs_list_show_and_logs_report_a_finished_run(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "talker", "echo hello from the pane\necho done > out.txt\n")
    report = start_run(ws, "talker-task", repo, force=True)
    assert report.status == "succeeded"

    listed = json.loads(cli("runs", "list", "--json").stdout)["runs"]
    assert [r["id"] for r in listed] == [report.run_id]
    shown = json.loads(cli("runs", "show", report.run_id, "--json").stdout)
    assert shown["status"] == "succeeded"
    assert shown["receipts"] == sorted(report.receipts)
    logs = cli("runs", "logs", report.run_id, "talker")
    assert "hello from the pane" in logs.stdout
    assert cli("runs", "cancel", report.run_id).returncode == 2
    attach = cli("attach", report.run_id, "talker")
    assert attach.returncode == 1
    assert attach.stderr.strip() == (
        f"error: the session of talker is not running (run {report.run_id} is succeeded)"
    )
    assert os.environ.get("PARENT_SECRET") is None


def test_success_criteria_stated_in_the_request_become_checks_of_the_run(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "scribe", "echo wrong place > other.txt\n")
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")

    report = start_run(
        ws,
        "scribe-task: create notes.txt in the repository root; notes.txt must exist when done",
        repo,
    )

    assert report.interview is not None and report.interview.passed is True
    assert report.status == "failed"
    gate = report.agents[0].gate
    assert gate is not None
    assert [(c.name, c.passed) for c in gate.results] == [("notes.txt exists", False)]
    receipts = [read_receipt(ws, r) for r in report.receipts]
    assert any("kind: interview" in r and "notes.txt exists" in r for r in receipts)


def test_a_large_repository_is_checked_out_sparsely_to_the_paths_a_package_names(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agentos.worktrees.repo.SPARSE_MIN_FILES", 3)
    files = {f"vendor/big{i}.txt": "x\n" for i in range(5)}
    repo = make_repo(tmp_path / "big", {**files, "src/app.py": "print('hi')\n"})
    add_agent(
        ws,
        tmp_path,
        "narrow",
        "find . -path ./.git -prune -o -type f -print | sort > seen.txt\n"
        "mkdir -p src && cp seen.txt src/seen.txt && rm seen.txt\n"
        "mkdir -p docs && echo outside > docs/notes.md\n",
        paths=["src/"],
    )

    report = start_run(ws, "narrow-task", repo, force=True)

    assert report.status == "succeeded", report.message
    seen = (repo / "src" / "seen.txt").read_text().split()
    assert "./src/app.py" in seen
    assert not [f for f in seen if f.startswith("./vendor/")]
    assert sorted(p.name for p in (repo / "vendor").iterdir()) == sorted(
        Path(f).name for f in files
    )  # the merge kept what the agent never saw
    assert (repo / "docs" / "notes.md").read_text() == "outside\n"  # new files outside count


def test_a_git_without_add_sparse_still_commits_and_merges_the_agents_work(
    ws: Workspace, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `git add --sparse` is git 2.34's: an older git refuses the option (exit 129), and its
    # plain `add -A` takes everything.
    old = tmp_path / "old-git"
    old.mkdir()
    (old / "git").write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            for a in "$@"; do
              if [ "$a" = --sparse ] && [ -n "$add" ]; then
                touch {old}/refused; echo "error: unknown option 'sparse'" >&2; exit 129
              fi
              [ "$a" = add ] && add=1
            done
            exec {shutil.which("git")} "$@"
            """)
    )
    (old / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{old}:{os.environ['PATH']}")
    add_agent(ws, tmp_path, "elder", "mkdir -p docs && echo kept > docs/notes.md\n")

    report = start_run(ws, "elder-task", repo, force=True)

    assert (old / "refused").exists()
    assert report.status == "succeeded", report.message
    assert (repo / "docs" / "notes.md").read_text() == "kept\n"
    assert branches(repo) == ["main"]


def test_a_run_maintains_the_repository_once_it_lands_and_not_before(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    # Each commit and merge of AgentOS's would start `git maintenance run --auto` (three a
    # landing, and a repack can take minutes): its git commands do not, and a landing asks
    # for it once, as a commit of the user's would. git guesses the loose objects from its
    # objects/17 folder: two loose objects there, and gc.auto 1, make maintenance pack.
    seventeen = (i for i in itertools.count() if _blob_id(f"{i}\n").startswith("17"))
    for n in itertools.islice(seventeen, 2):
        (tmp_path / "seventeen").write_text(f"{n}\n")
        git(repo, "hash-object", "-w", str(tmp_path / "seventeen"))
    git(repo, "config", "gc.auto", "1")
    git(repo, "config", "gc.autoDetach", "false")
    packs = repo / ".git" / "objects" / "pack"
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    add_agent(
        ws,
        tmp_path,
        "failer",
        "echo unfinished > unfinished.txt\n",
        checks=[{"name": "never", "file_exists": "done.txt"}],
    )
    add_agent(ws, tmp_path, "packer", "echo packed > packed.txt\n")

    failed = start_run(ws, "failer-task", repo, force=True)

    assert failed.status == "failed", failed.message
    assert failed.agents[0].commits  # AgentOS committed its work to its branch...
    assert list(packs.glob("*.pack")) == []  # ...and started no maintenance: nothing landed

    landed = start_run(ws, "packer-task", repo, force=True)

    assert landed.status == "succeeded", landed.message
    assert (repo / "packed.txt").read_text() == "packed\n"
    assert list(packs.glob("*.pack")) != []  # maintained after the landing


def _blob_id(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_a_vague_request_is_refused_unless_forced_and_the_receipt_says_so(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "polisher", "echo polished > polish.txt\n")

    refused = cli("run", "polisher-task make it better", "--repo", str(repo), "--json")

    assert refused.returncode == 1
    data = json.loads(refused.stdout)
    assert data["status"] == "blocked" and data["decision"] is None
    assert data["interview"]["passed"] is False and data["interview"]["questions"]
    assert not (repo / "polish.txt").exists() and branches(repo) == ["main"]
    receipt = read_receipt(ws, data["receipts"][0])
    assert "kind: interview" in receipt and "override: none" in receipt

    forced = cli("run", "polisher-task make it better", "--repo", str(repo), "--json", "--force")

    assert forced.returncode == 0, forced.stderr
    data = json.loads(forced.stdout)
    assert data["status"] == "succeeded"
    assert "override: --force" in read_receipt(ws, data["receipts"][0])
    assert (repo / "polish.txt").read_text() == "polished\n"


def test_a_detached_run_can_be_followed_and_cancelled_from_the_cli(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    add_agent(ws, tmp_path, "longhaul", "echo underway > progress.txt\nsleep 120\n")

    started = cli("run", "longhaul-task", "--repo", str(repo), "--force", "--detach", "--json")

    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    wait_until(lambda: (ws.worktrees_dir / run_id / "longhaul" / "progress.txt").exists())
    status = json.loads(cli("status", "--json").stdout)
    assert [r["id"] for r in status["runs"]] == [run_id]
    cancelled = cli("runs", "cancel", run_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout) == {"run": run_id, "status": "cancelled"}
    assert tmux_sessions(tmux_socket) == []
    assert git(repo, "show", f"agentos/{run_id}/longhaul:progress.txt") == "underway"


def test_a_run_starts_the_workspace_guardian_when_none_is_running(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    from agentos.guardian import daemon

    add_agent(ws, tmp_path, "watched", "echo ok > watched.txt\n")
    ws.settings_file.write_text("run: {guardian: true}\nguardian: {interval: 0.2}\n")
    ws = Workspace(ws.root)
    assert daemon.status(ws)["running"] is False
    try:
        report = start_run(ws, "watched-task", repo, force=True, supervise=daemon.ensure_running)
        assert report.status == "succeeded", report.message
        assert daemon.status(ws)["running"] is True
    finally:
        daemon.stop(ws)
    assert daemon.status(ws)["running"] is False


def test_what_the_checks_write_is_not_merged_as_the_agents_work(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(
        ws,
        tmp_path,
        "builder",
        "echo built > output.txt\n",
        checks=[
            {
                "name": "leaves a cache",
                "run": "mkdir -p .check-cache && touch .check-cache/x",
                "writes": True,  # else its sandbox gives it the worktree read-only
            }
        ],
    )

    report = start_run(ws, "builder-task", repo, force=True)

    assert report.status == "succeeded", report.message
    assert (repo / "output.txt").exists()
    assert not (repo / ".check-cache").exists()
    assert ".check-cache/x" not in git(repo, "ls-files")


def test_gc_survives_a_leftover_worktree_whose_repository_is_gone(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    doomed = make_repo(tmp_path / "doomed")
    leftover = ws.worktrees_dir / "20260101-000000-dead00" / "ghost"
    git(doomed, "worktree", "add", "-q", "-b", "agentos/x/ghost", str(leftover))
    (leftover / "work.txt").write_text("half done\n")
    import shutil

    shutil.rmtree(doomed)  # the user deleted the repository the crashed run worked on

    result = cli("gc", "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["problems"] == [
        f"kept {leftover}: it is no longer a worktree of a repository (was the repository "
        "deleted?); look at it and delete it yourself"
    ]
    assert (leftover / "work.txt").read_text() == "half done\n"  # never deleted silently
    add_agent(ws, tmp_path, "after", "echo fine > after.txt\n")
    assert start_run(ws, "after-task", repo, force=True).status == "succeeded"


def test_gc_tells_a_live_orchestrator_from_a_process_that_reused_its_pid(
    cli: CliRunner, ws: Workspace
) -> None:
    store = RunStore(ws)
    store.create("20260101-000000-aaaaaa", "in-process run", ws.root, status=RunStatus.RUNNING)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        store.create("20260101-000000-bbbbbb", "pid reused", ws.root, status=RunStatus.RUNNING)
        store.update("20260101-000000-bbbbbb", pid=sleeper.pid)  # alive, but started later

        report = json.loads(cli("gc", "--json").stdout)

        assert report["aborted_runs"] == ["20260101-000000-bbbbbb"]
        assert store.get("20260101-000000-aaaaaa").status == "running"  # this process lives
    finally:
        sleeper.kill()
        sleeper.wait()


def test_what_an_agent_started_does_not_outlive_it(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    marker = f"agentos-spawned-{tmp_path.name}"
    add_agent(
        ws,
        tmp_path,
        "spawner",
        f"(trap '' HUP; exec -a {marker} sleep 300) &\nsleep 300\n",
        timeout=2,
    )
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")

    report = start_run(ws, "spawner-task", repo, force=True)

    assert report.status == "failed" and report.agents[0].exit_code == 124
    wait_until(lambda: not processes_named(marker), timeout=10)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_session_is_found_and_ended_where_proc_is_not_this_processs(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    """Whether a tmux server listens is asked by the socket's path, not through
    /proc/self/fd: in a mount namespace whose /proc is an empty tmpfs, a live session is
    still listed and ended (it was taken for none, and survived a guardian's stop)."""
    from agentos.run.sessions import Sessions

    sessions = Sessions(ws.root)
    sessions.start("agentos-probe-2", ["sleep", "60"], tmp_path)
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from agentos.run.sessions import Sessions\n"
        "s = Sessions(Path(sys.argv[1]))\n"
        "print(json.dumps([s.names(), s.kill('agentos-probe-2')]))\n"
    )
    in_namespace = ["unshare", "--mount", "--map-root-user", "sh", "-c"]
    shell = 'mount -t tmpfs none /proc && exec "$@"'
    result = subprocess.run(
        [*in_namespace, shell, "sh", sys.executable, "-c", probe, str(ws.root)],
        capture_output=True,
        text=True,
        env={**os.environ, "AGENTOS_TMUX_SOCKET": tmux_socket},
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [["agentos-probe-2"], True]
    assert sessions.names() == []


def test_a_tmux_server_that_has_ended_is_not_asked_for_its_sessions(
    ws: Workspace, tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc asks for the sessions before every run: when the server has ended (its socket
    file stays), no tmux process is started to be told so."""
    import shutil

    from agentos.run.sessions import Sessions

    calls, shims = tmp_path / "tmux-calls", tmp_path / "bin"
    shims.mkdir()
    (shims / "tmux").write_text(
        f'#!/bin/sh\necho "$1 $2" >> {calls}\nexec {shutil.which("tmux")} "$@"\n'
    )
    (shims / "tmux").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    sessions = Sessions(ws.root)
    sessions.start("agentos-probe-1", ["sleep", "60"], tmp_path)
    assert sessions.names() == ["agentos-probe-1"]
    assert sessions.kill("agentos-probe-1")  # its last session: the server ends
    socket = sessions.socket_path()
    assert socket is not None
    listed = ["tmux", "-L", tmux_socket, "list-sessions"]
    wait_until(lambda: subprocess.run(listed, capture_output=True).returncode != 0)
    calls.unlink()

    assert sessions.names() == []
    assert socket.exists()  # left by tmux: its being there says nothing
    assert not calls.exists()  # no tmux was started to ask


def test_the_wait_for_an_agents_exit_ends_as_its_file_is_written_not_for_another_file(
    tmp_path: Path,
) -> None:
    """The run waits on its agent's io folder (inotify): the exit file ends the wait as it
    is written, long before the wait's own timeout; another file written there does not."""
    import time

    from agentos.shared.dirwatch import DirWatch

    watch = DirWatch(tmp_path)
    assert watch.active

    def agent() -> None:
        time.sleep(0.3)
        (tmp_path / "heartbeat").write_text("x\n")
        time.sleep(0.3)
        (tmp_path / "exit").write_text("0\n")

    writer = threading.Thread(target=agent)
    writer.start()
    started = time.monotonic()
    watch.wait("exit", 60)
    waited = time.monotonic() - started
    writer.join()
    watch.close()
    assert (tmp_path / "exit").exists()  # not ended by the heartbeat
    assert waited < 30  # ended by the exit file, not by the 60 s
