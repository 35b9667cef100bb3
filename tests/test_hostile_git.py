"""Hostile agents against AgentOS's own git: hooks, configuration, and a branch moved after
the gate. Each under the sandbox and under ``sandbox.backend: none``."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import (
    CliRunner,
    add_agent,
    git,
    make_repo,
    needs_bwrap,
    needs_tmux,
    processes_named,
    wait_until,
)

from agentos.receipts import load_receipt
from agentos.run.orchestrator import start_run
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

BACKENDS = [
    pytest.param(
        "bwrap",
        marks=needs_bwrap,
    ),
    "none",
]


def _use(ws: Workspace, backend: str) -> None:
    ws.settings_file.write_text(f"run: {{guardian: false}}\nsandbox: {{backend: {backend}}}\n")


def _gate_receipts(ws: Workspace, receipts: list[str]) -> list[dict[str, object]]:
    parsed = [load_receipt(ws, rid) for rid in receipts]
    return [p.fields for p in parsed if p.kind == "gate"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_and_configuration_an_agent_writes_never_run_and_never_stay(
    ws: Workspace, tmp_path: Path, backend: str
) -> None:
    _use(ws, backend)
    repo = make_repo(tmp_path / "repo")
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = tmp_path / "evil-hooks"
    evil.mkdir()
    for name in (
        "post-commit",
        "pre-commit",
        "post-merge",
        "post-checkout",
        "reference-transaction",
    ):
        (evil / name).write_text(f"#!/bin/sh\ntouch {marks}/{name}\n")
        (evil / name).chmod(0o755)
    script = f"""
echo legit > legit.txt
common=$(git rev-parse --git-common-dir)
try() {{ if "$@" 2>/dev/null; then echo "changed: $*"; else echo "blocked: $*"; fi; }}
try git config core.hooksPath {evil}
try cp {evil}/post-commit "$common/hooks/post-commit"
try git config core.fsmonitor {evil}/post-commit
try git config filter.evil.clean "touch {marks}/filter; cat"
try git config alias.st "!touch {marks}/alias"
try sh -c "mkdir -p '$common/info' && echo '* filter=evil' > '$common/info/attributes'"
"""
    add_agent(ws, tmp_path, "hooker", script)
    report = start_run(ws, "hooker-task", repo, force=True)

    # Nothing the agent wrote ran: not at AgentOS's commits, not at its merge.
    assert sorted(p.name for p in marks.iterdir()) == []
    # Nothing of it stays in the user's repository...
    config = subprocess.run(
        ["git", "config", "--get-regexp", "hookspath|fsmonitor|filter|alias"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert config.stdout == ""
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    assert not (repo / ".git" / "info" / "attributes").exists()
    # ...so the user's own next commit runs no hook of the agent's.
    git(repo, "commit", "-q", "--allow-empty", "-m", "the user's own commit")
    assert sorted(p.name for p in marks.iterdir()) == []
    log = next(ws.logs_dir.glob("*/hooker.log")).read_text()
    gates = _gate_receipts(ws, report.receipts)
    if backend == "none":
        # Nothing kept the agent out: what it changed was put back and named, and the run
        # merged nothing (nothing tells which agent of a run did it).
        assert "changed: git config core.hooksPath" in log
        restored = [
            ".git/config: alias.st, core.fsmonitor, core.hookspath, filter.evil.clean",
            ".git/info/attributes (added)",
            ".git/hooks/post-commit (added)",
        ]
        assert gates[0]["git_admin_restored"] == restored
        assert report.status == "failed"
        assert "git administration was changed" in report.message
        assert not (repo / "legit.txt").exists()
        run = next(p for p in (load_receipt(ws, r) for r in report.receipts) if p.kind == "run")
        assert run.fields["git_admin_restored"] == restored
    else:
        # The sandbox kept the repository's git directory read-only: every write failed.
        assert "changed:" not in log
        assert log.count("blocked:") == 6
        assert report.status == "succeeded", report.message
        assert (repo / "legit.txt").read_text() == "legit\n"
        assert "git_admin_restored" not in gates[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_branch_moved_after_the_gate_never_lands(
    ws: Workspace, tmp_path: Path, backend: str
) -> None:
    _use(ws, backend)
    repo = make_repo(tmp_path / "repo")
    marker = f"agentos-mover-{uuid.uuid4().hex[:8]}"
    # A background script outlives the agent, waits for the gate, then puts a payload on
    # the agent's branch with commit-tree + update-ref.
    mover = f"""
sleep 1.5
branch=$(git symbolic-ref HEAD)
blob=$(echo payload | git hash-object -w --stdin)
tree=$(printf '100644 blob %s\\tpayload.txt\\n' "$blob" | git mktree)
commit=$(git commit-tree "$tree" -p HEAD -m payload)
git update-ref "$branch" "$commit" && touch /tmp/{marker}-moved
"""
    script = (
        "echo legit > legit.txt\n"
        f"setsid bash -c {shlex.quote(mover)} {marker} </dev/null >/dev/null 2>&1 &\n"
        "exit 0\n"
    )
    add_agent(
        ws,
        tmp_path,
        "mover",
        script,
        checks=[{"name": "slow check", "run": "sleep 3"}],  # the mover's window
    )
    report = start_run(ws, "mover-task", repo, force=True)

    assert report.status == "succeeded", report.message
    assert (repo / "legit.txt").read_text() == "legit\n"
    assert not (repo / "payload.txt").exists()
    assert "payload" not in git(repo, "log", "--all", "--format=%s")
    assert not Path(f"/tmp/{marker}-moved").exists()
    # Nothing the agent started still runs.
    procs = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert procs.strip() == ""
    gate = _gate_receipts(ws, report.receipts)[0]
    merge = next(
        load_receipt(ws, r) for r in report.receipts if load_receipt(ws, r).kind == "merge"
    )
    assert merge.fields["landed"] == {"mover": gate["commit"]}


def test_a_branch_the_agent_moved_itself_is_kept_though_agentos_committed_nothing(
    ws: Workspace, tmp_path: Path
) -> None:
    # Without a sandbox an agent can commit on its own branch, leaving its worktree clean:
    # AgentOS commits nothing for it, yet its branch is not at its base, so the failed run
    # keeps it (it is not deleted with the empty ones) and its receipt says so.
    _use(ws, "none")
    repo = make_repo(tmp_path / "repo")
    script = "echo mine > mine.txt\ngit add mine.txt\ngit commit -qm mine\n"
    add_agent(ws, tmp_path, "sly", script, checks=[{"name": "never", "file_exists": "no.txt"}])

    report = start_run(ws, "sly-task", repo, force=True)

    assert report.status == "failed", report.message
    (agent,) = report.agents
    assert agent.commits == ()  # AgentOS committed nothing for it
    assert git(repo, "log", "-1", "--format=%s", agent.branch) == "mine"
    run = next(p for p in (load_receipt(ws, r) for r in report.receipts) if p.kind == "run")
    assert run.fields["kept_branches"] == [agent.branch]


def test_branches_go_all_or_none_each_only_at_its_commit_and_a_gone_one_leaves_no_folder(
    tmp_path: Path,
) -> None:
    from agentos.worktrees.repo import delete_unmoved

    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    later = git(repo, "rev-parse", "HEAD")
    refs = repo / ".git" / "refs"

    def folders() -> list[str]:
        return sorted(str(p.relative_to(refs)) for p in refs.rglob("*"))

    git(repo, "branch", "agentos/r1/a", base)
    git(repo, "branch", "agentos/r1/b", later)  # moved on from the base it is told
    assert not delete_unmoved(repo, {"agentos/r1/a": base, "agentos/r1/b": base})
    assert git(repo, "rev-parse", "agentos/r1/a", "agentos/r1/b").split() == [base, later]

    assert delete_unmoved(repo, {"agentos/r1/a": base, "agentos/r1/b": later})
    assert folders() == ["heads", "heads/main", "tags"]

    assert not delete_unmoved(repo, {"agentos/r2/gone": base})  # never made
    assert folders() == ["heads", "heads/main", "tags"]

    # A branch made a symbolic ref to the user's branch: the ref itself goes, never main.
    git(repo, "symbolic-ref", "refs/heads/agentos/r3/a", "refs/heads/main")
    assert delete_unmoved(repo, {"agentos/r3/a": later})
    assert git(repo, "rev-parse", "main") == later
    assert folders() == ["heads", "heads/main", "tags"]

    # A branch checked out in a worktree (or the main checkout) is not deleted: git branch -D
    # refuses it, and so does the run's teardown.
    git(repo, "branch", "agentos/r4/a", base)
    git(repo, "worktree", "add", "-q", str(tmp_path / "kept"), "agentos/r4/a")
    assert not delete_unmoved(repo, {"agentos/r4/a": base})
    assert git(repo, "rev-parse", "agentos/r4/a") == base
    git(repo, "checkout", "-q", "-b", "agentos/r5/a", base)
    assert not delete_unmoved(repo, {"agentos/r5/a": base})
    assert git(repo, "rev-parse", "agentos/r5/a") == base


def test_landing_takes_the_gated_commit_whatever_its_branch_says_later(tmp_path: Path) -> None:
    from agentos.worktrees import landing

    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "-c", "agentos/r1/a")
    (repo / "legit.txt").write_text("legit\n")
    git(repo, "add", "legit.txt")
    git(repo, "commit", "-q", "-m", "legit")
    gated = git(repo, "rev-parse", "HEAD")
    (repo / "payload.txt").write_text("payload\n")
    git(repo, "add", "payload.txt")
    git(repo, "commit", "-q", "-m", "payload")  # the branch moved after its gate
    git(repo, "switch", "-q", "main")

    result = landing.land(
        repo,
        "main",
        [landing.Landing("agentos/r1/a", gated, "land it\n", "a")],
        "r1",
        tmp_path / "m",
    )

    assert result.merged, result.message
    assert (repo / "legit.txt").exists() and not (repo / "payload.txt").exists()
    assert git(repo, "show", "--name-only", "--format=", "main") == "legit.txt"


# --- a run that ends during its gate ---------------------------------------------------------


def _slow_gate_agent(ws: Workspace, tmp_path: Path, marker: str) -> None:
    add_agent(
        ws,
        tmp_path,
        "gated",
        "echo mine > mine.txt\n",
        checks=[
            {
                "name": "slow check",
                # It writes into the tree it judges (writes: true), then takes its time.
                "run": f"touch check-was-here; exec -a {marker} sleep 60",
                "writes": True,
            }
        ],
    )


def _background_run(ws: Workspace, repo: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "agentos", "--workspace", str(ws.root)),
            *("run", "gated-task", "--repo", str(repo), "--force", "--json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_during_the_gate_kills_the_check_at_once(
    ws: Workspace, tmp_path: Path, cli: CliRunner, backend: str
) -> None:
    _use(ws, backend)
    repo = make_repo(tmp_path / "repo")
    marker = f"agentos-check-{uuid.uuid4().hex[:8]}"
    _slow_gate_agent(ws, tmp_path, marker)
    proc = _background_run(ws, repo)
    wait_until(lambda: bool(processes_named(marker)), timeout=60)
    run_id = json.loads(cli("runs", "list", "--json").stdout)["runs"][0]["id"]

    cancelled = cli("runs", "cancel", run_id, "--wait", "10")

    assert cancelled.returncode == 0, cancelled.stderr
    proc.communicate(timeout=30)  # (and closes its pipes)
    assert processes_named(marker) == []
    record = RunStore(ws).get(run_id)
    assert record.status == "cancelled"
    # The agent's work is kept on its branch; what the check wrote is not part of it.
    branch = f"agentos/{run_id}/gated"
    assert git(repo, "show", f"{branch}:mine.txt") == "mine"
    assert "check-was-here" not in git(repo, "ls-tree", "-r", "--name-only", branch)


def test_kill_9_during_the_gate_then_gc_ends_the_check_and_keeps_only_the_agents_work(
    ws: Workspace, tmp_path: Path, cli: CliRunner
) -> None:
    _use(ws, "none")  # in a sandbox the check dies with its parent anyway
    repo = make_repo(tmp_path / "repo")
    marker = f"agentos-check-{uuid.uuid4().hex[:8]}"
    _slow_gate_agent(ws, tmp_path, marker)
    proc = _background_run(ws, repo)
    wait_until(lambda: bool(processes_named(marker)), timeout=60)
    run_id = json.loads(cli("runs", "list", "--json").stdout)["runs"][0]["id"]

    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)  # (and closes its pipes)
    gc = cli("gc", "--json")

    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout)["aborted_runs"] == [run_id]
    assert processes_named(marker) == []
    branch = f"agentos/{run_id}/gated"
    assert git(repo, "show", f"{branch}:mine.txt") == "mine"
    assert "check-was-here" not in git(repo, "ls-tree", "-r", "--name-only", branch)
    assert git(repo, "status", "--porcelain") == ""


def test_redacted_receipts_hold_no_word_of_the_request(ws: Workspace, tmp_path: Path) -> None:
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {redact: true}\n")
    repo = make_repo(tmp_path / "repo")
    # The agent echoes the request; the request names a file and a success criterion,
    # which become a check of the run (its name and definition hold the file name).
    add_agent(
        ws, tmp_path, "echoer", 'echo "working on: $AGENTOS_REQUEST"\necho ok > zeppelin.txt\n'
    )
    request = "echoer-task: write zeppelin.txt for project quixotic; done when zeppelin.txt exists"

    report = start_run(ws, request, repo, force=True)

    assert report.status == "succeeded", report.message
    texts = [load_receipt(ws, rid).text for rid in report.receipts]
    assert len(texts) >= 5  # interview, route, gate, merge, run
    for secret in ("zeppelin", "quixotic", "echoer-task", request):
        assert not [t for t in texts if secret in t], secret
    gate = next(load_receipt(ws, r) for r in report.receipts if load_receipt(ws, r).kind == "gate")
    checks = gate.fields["checks"]
    assert isinstance(checks, list)
    names = [c["name"] for c in checks]
    assert names and all(n.startswith("[redacted: ") for n in names)


def test_git_administration_an_agent_breaks_or_hides_is_put_back_without_a_traceback(
    ws: Workspace, tmp_path: Path
) -> None:
    _use(ws, "none")
    repo = make_repo(tmp_path / "repo")
    # The user's own configuration lives elsewhere, linked: it stays a link.
    real = tmp_path / "real-config"
    (repo / ".git" / "config").rename(real)
    (repo / ".git" / "config").symlink_to(real)
    git(repo, "config", "user.name", "The User")
    script = """
common=$(git rev-parse --git-common-dir)
git config extensions.worktreeConfig true
git -C "$OLDPWD" config --file "$common/config.worktree" core.hooksPath /tmp/evil
rm -rf "$common/hooks" && echo not-a-dir > "$common/hooks"
rm "$common/config" && mkdir "$common/config"
"""
    add_agent(ws, tmp_path, "breaker", script)

    report = start_run(ws, "breaker-task", repo, force=True)

    assert report.status == "failed"
    assert "git administration was changed" in report.message
    assert (repo / ".git" / "config").is_symlink()
    assert git(repo, "config", "user.name") == "The User"
    assert not (repo / ".git" / "config.worktree").exists()
    assert (repo / ".git" / "hooks").is_dir()
    assert [load_receipt(ws, r).kind for r in report.receipts][-1] == "run"
    assert not (ws.state_dir / "runs" / report.run_id).exists()
