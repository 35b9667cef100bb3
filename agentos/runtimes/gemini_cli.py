"""``gemini-cli``: Gemini CLI headless (``gemini -p``) in the agent's worktree.

The worktree is the agent's own, so Gemini may act without asking (``yolo``); it is trusted
for this session only (``--skip-trust``), since an untrusted folder forces approvals back on.
"""

from __future__ import annotations

from agentos.runtimes import AgentTask
from agentos.runtimes._cli_agent import CliAgent


class GeminiCli(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        return [
            self.executable(),
            "-p",
            self.prompt(task),
            "--approval-mode",
            "yolo",
            "--skip-trust",
        ]


RUNTIME = GeminiCli("gemini-cli", "gemini", "npm install -g @google/gemini-cli")
