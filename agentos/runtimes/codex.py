"""``codex``: the Codex CLI non-interactively (``codex exec``), sandboxed to the worktree."""

from __future__ import annotations

from agentos.runtimes import AgentTask
from agentos.runtimes._cli_agent import CliAgent


class Codex(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        return [
            self.executable(),
            "exec",
            "--full-auto",
            "--skip-git-repo-check",
            self.prompt(task),
        ]


RUNTIME = Codex("codex", "codex", "npm install -g @openai/codex")
