"""``gemini-cli``: Gemini CLI non-interactively (``gemini -p``), approving its own edits."""

from __future__ import annotations

from agentos.runtimes import AgentTask
from agentos.runtimes._cli_agent import CliAgent


class GeminiCli(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        return [self.executable(), "-p", self.prompt(task), "--approval-mode", "auto_edit"]


RUNTIME = GeminiCli("gemini-cli", "gemini", "npm install -g @google/gemini-cli")
