"""The README's examples run as written on a fresh machine: every fenced shell block runs
with bash in a fresh home (the repository it names made from the bundled example project),
every Python block with the interpreter, in order, as a reader would type them. A block not
meant to run has ``<!-- not run: REASON -->`` on the line before it; the test prints how
many blocks it ran and skipped, with the reasons."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO_ROOT, git, needs_tmux

pytestmark = [needs_tmux, pytest.mark.process, pytest.mark.usefixtures("tmux_socket")]

FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\s*$")
SHELL = ("bash", "sh", "shell", "console")
PYTHON = ("python", "py")
PICTURES = ("mermaid",)  # drawn, not run


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    code: str
    not_run: str | None  # why not, when it is marked so


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, with the reason it is not run when it says one."""
    blocks = []
    for found in FENCE.finditer(text):
        line = text.count("\n", 0, found.start()) + 1
        before = text[: found.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marked = NOT_RUN.search(before)
        blocks.append(
            Block(line, found.group(1), found.group(2), marked.group(1) if marked else None)
        )
    return blocks


def test_the_readme_blocks_are_found_with_their_reasons() -> None:
    text = (
        "# T\n\n<!-- not run: needs a key -->\n```bash\nclaude\n```\n\n"
        "```python\nprint(1)\n```\n\n```mermaid\nflowchart LR\n```\n"
    )

    assert readme_blocks(text) == [
        Block(4, "bash", "claude\n", "needs a key"),
        Block(8, "python", "print(1)\n", None),
        Block(12, "mermaid", "flowchart LR\n", None),
    ]


def test_every_readme_example_runs_as_written_on_a_fresh_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = readme_blocks((REPO_ROOT / "README.md").read_text())
    unknown = [b for b in blocks if b.language not in (*SHELL, *PYTHON, *PICTURES)]
    assert not unknown, (
        f"README blocks of no known language: {[(b.line, b.language) for b in unknown]}"
    )

    home = tmp_path / "home"
    repo = home / "code" / "myproject"  # the repository the README's first run works on
    shutil.copytree(REPO_ROOT / "examples" / "lint-demo", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "myproject: initial")
    bin_dir = Path(sys.executable).parent  # where `agentos` is installed
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTOS_HOME")},
        "HOME": str(home),
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
    }
    ran: list[Block] = []
    skipped: list[Block] = []
    try:
        for block in blocks:
            if block.language in PICTURES:
                continue
            if block.not_run is not None:
                skipped.append(block)
                continue
            if block.language in SHELL:
                # The blocks read as one session: what one exports, the next one has.
                script = f"set -euo pipefail\n[ -f ~/.readme_env ] && . ~/.readme_env\n{block.code}"
                script += "\nexport -p | grep -E ' AGENTOS_' > ~/.readme_env || true\n"
                command = ["bash", "-c", script]
            else:
                command = [sys.executable, "-c", block.code]
            out = subprocess.run(
                command, cwd=home, env=env, capture_output=True, text=True, timeout=600
            )
            assert out.returncode == 0, (
                f"README.md:{block.line}: the {block.language} block failed "
                f"(exit {out.returncode})\n{block.code}\n--- stdout\n{out.stdout}\n"
                f"--- stderr\n{out.stderr}"
            )
            ran.append(block)
    finally:
        # A run starts the workspace's guardian; this test's workspace ends with it.
        workspace = home / "agentos-ws"
        if workspace.exists():
            subprocess.run(
                [str(bin_dir / "agentos"), "--workspace", str(workspace), "guardian", "stop"],
                env=env,
                capture_output=True,
            )

    assert ran, "no README block ran"
    # The first run did its job: the agent's fix landed on the branch, the tree is clean.
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    assert git(repo, "status", "--porcelain") == ""
    with capsys.disabled():
        print(f"\nREADME.md: ran {len(ran)} block(s), skipped {len(skipped)}")
        for block in skipped:
            print(f"  README.md:{block.line} ({block.language}) not run: {block.not_run}")
