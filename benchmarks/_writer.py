"""What the run benchmarks share: a fresh workspace with one shell agent, `writer`, that
writes a file named after its run, a repository with one commit, and a private tmux
server, all gone afterwards."""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentos.hub.store import Hub
from agentos.workspace.layout import Workspace, init_workspace


@contextmanager
def writer_workspace() -> Iterator[tuple[Workspace, Path]]:
    socket = f"agentos-bench-{uuid.uuid4().hex[:8]}"
    os.environ["AGENTOS_TMUX_SOCKET"] = socket
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            ws, _ = init_workspace(base / "ws")
            ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
            src = base / "src"
            src.mkdir()
            (src / "agent.yaml").write_text(
                "name: writer\nversion: 1.0.0\ndescription: w\nruntime: shell\nentry: run.sh\n"
            )
            (src / "run.sh").write_text('echo x > "f-$AGENTOS_RUN_ID.txt"\n')
            Hub(ws.hub_dir).install(str(src))
            repo = base / "repo"
            repo.mkdir()
            for cmd in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
                subprocess.run(
                    ["git", "-c", "user.name=b", "-c", "user.email=b@b", *cmd], cwd=repo, check=True
                )
            yield ws, repo
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
