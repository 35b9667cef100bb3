"""``claude-code``: Claude Code in print mode (``claude -p``) in the agent's worktree.

Edits are accepted without asking, and the tools an engineer needs (the shell among them)
are allowed, so that it can run tests and linters unattended.
"""

from __future__ import annotations

from agentos.runtimes import AgentTask
from agentos.runtimes._cli_agent import CliAgent


class ClaudeCode(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        return [
            self.executable(),
            "-p",
            self.prompt(task),
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Bash,Read,Edit,Write,Glob,Grep",
            "--output-format",
            "text",
        ]


RUNTIME = ClaudeCode("claude-code", "claude", "npm install -g @anthropic-ai/claude-code")
