"""Concurrent runs on one repository: three `agentos run`s at once, round after round."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import add_agent, git, make_repo, needs_tmux, tmux_sessions

from agentos.receipts import verify_chain
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket"), pytest.mark.slow]

ROUNDS = int(os.environ.get("AGENTOS_STRESS_ROUNDS", "20"))
FORCES = ("a", "b", "c")  # three runs a round
AGENTS = 4  # each of four agents


def _run(ws: Workspace, repo: Path, force: str) -> subprocess.Popen[str]:
    request = " ".join(f"{force}{i}-task" for i in range(AGENTS))
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "agentos", "--workspace", str(ws.root)),
            *("run", "--repo", str(repo), "--force", "--no-input", request),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def test_three_concurrent_runs_of_four_agents_on_one_repository_twenty_times(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    for force in FORCES:
        for i in range(AGENTS):
            name = f"{force}{i}"
            # Each agent rewrites its own file: no two runs of a round touch the same file.
            add_agent(ws, tmp_path, name, f'echo "$AGENTOS_RUN_ID" > {name}.txt\n')
    outcomes: list[tuple[int, str, str]] = []
    for round_ in range(ROUNDS):
        runs = [_run(ws, repo, force) for force in FORCES]
        for proc in runs:
            out, err = proc.communicate(timeout=300)
            outcomes.append((proc.returncode, out, err))
            assert "tmux could not" not in err + out, f"round {round_}: {err}"
            assert "Traceback" not in err, f"round {round_}: {err}"
            # Succeeded, or refused cleanly before it started (the tree was mid-merge).
            assert proc.returncode == 0 or "uncommitted" in err, (round_, out, err)
        assert git(repo, "status", "--porcelain") == "", f"round {round_}"
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        assert tmux_sessions(tmux_socket) == []
    succeeded = sum(1 for code, _, _ in outcomes if code == 0)
    assert succeeded >= len(outcomes) * 0.9, f"only {succeeded} of {len(outcomes)} succeeded"
    # Every agent's last write landed, and the history is linear work from the runs.
    for force in FORCES:
        for i in range(AGENTS):
            assert (repo / f"{force}{i}.txt").read_text().strip()
    assert git(repo, "branch", "--list", "agentos*") == ""
    assert verify_chain(ws) == []


_STARTER = """
import sys
from pathlib import Path
from agentos.run.sessions import Sessions
sessions = Sessions(Path("/tmp"))
for n in range(int(sys.argv[1])):
    sessions.start(f"agentos-{sys.argv[2]}-{n}", ["true"], Path("/tmp"))
"""


def test_sessions_start_while_the_tmux_server_exits(tmux_socket: str) -> None:
    # Four processes start sessions whose command ends at once: the server exits each time
    # its last session ends, and a start that reaches it then is told it "exited
    # unexpectedly". Without the retry, this failed a few starts in every run of it.
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", _STARTER, "60", f"p{i}"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in starters]
    assert [p.returncode for p in starters] == [0, 0, 0, 0], errors
