"""``claude-code``: Claude Code in print mode (``claude -p``), editing files unattended."""

from __future__ import annotations

from agentos.runtimes import AgentTask
from agentos.runtimes._cli_agent import CliAgent


class ClaudeCode(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        return [self.executable(), "-p", self.prompt(task), "--permission-mode", "acceptEdits",
                "--output-format", "text"]


RUNTIME = ClaudeCode("claude-code", "claude", "npm install -g @anthropic-ai/claude-code")
