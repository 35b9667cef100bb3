"""`agentos run` in a real terminal (a pty): a blocked request gets its questions asked, and
the run goes on with the answers."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import add_agent, git, make_repo, needs_tmux

from agentos.receipts import list_receipts, read_receipt
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
ANSWERS = {
    "goal": "Append the line 'written by writer' to notes.txt.",
    "constraints": "Do not change any other file.",
    "scope": "Only notes.txt changes.",
    "context": "notes.txt has one line, 'start', and we expected a second line.",
    "success": "Done when notes.txt contains 'written by writer'.",
}


class Terminal:
    """A process on a pty; what it prints, read as it comes."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "TERM": "xterm", "COLUMNS": "200", "LINES": "50"}
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True
        )
        os.close(slave)
        self.seen = ""
        self.pos = 0  # what was matched already is not matched again

    def read_until(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            match = re.compile(pattern).search(self.seen, self.pos)
            if match:
                self.pos = match.end()
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in:\n{self.seen}")
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the process closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"ended before {pattern!r}:\n{self.seen}")
                self.seen += ANSI.sub("", chunk.decode("utf-8", "replace"))

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self, timeout: float = 120) -> int:
        try:
            self.read_until(r"receipts: ", timeout)
        finally:
            code = self.proc.wait(timeout)
            os.close(self.master)
        return code


def test_a_run_in_a_terminal_asks_the_interviews_questions_and_proceeds(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "start\n"})
    add_agent(ws, tmp_path, "writer", 'echo "written by writer" >> notes.txt\n')
    term = Terminal(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "run", "writer-task"],
        cwd=repo,
    )

    asked = []
    while True:
        match = term.read_until(r"(?m)^(\w+): [^\n]*\n> |the request passes", timeout=60)
        if match.group(0) == "the request passes":
            break
        asked.append(match.group(1))
        term.type(ANSWERS[match.group(1)])
        if len(asked) > 10:
            raise AssertionError(term.seen)
    code = term.finish()

    assert code == 0, term.seen
    assert "blocked" in term.seen and asked, "the questions were not asked"
    assert (repo / "notes.txt").read_text() == "start\nwritten by writer\n"
    (record,) = RunStore(ws).list()
    assert record.status == "succeeded"
    assert record.request.startswith("writer-task")
    for axis in asked:  # the answers became part of the request the run worked on
        assert ANSWERS[axis] in record.request
    interview = next(r for r in list_receipts(ws, run_id=record.id) if r.kind == "interview")
    assert "passed: true" in read_receipt(ws, interview.id)
    assert git(repo, "status", "--porcelain") == ""
