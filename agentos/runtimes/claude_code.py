"""``claude-code``: Claude Code in print mode (``claude -p``) in the agent's worktree.

Edits are accepted without asking, and the tools an engineer needs (the shell among them)
are allowed, so that it can run tests and linters unattended. Its configuration lives in a
directory of the attempt's own (``CLAUDE_CONFIG_DIR``); only the MCP server AgentOS gives
it is loaded (``--strict-mcp-config``), and its tools are allowed by name.
"""

from __future__ import annotations

import json

from agentos.runtimes.agent_tools import bridge_argv
from agentos.runtimes.cli_agent import MCP_SERVER, CliAgent
from agentos.runtimes.model_api import ANTHROPIC
from agentos.runtimes.task import AgentTask

TOOLS = ("Bash", "Read", "Edit", "Write", "Glob", "Grep")


class ClaudeCode(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        mcp = task.manifest.mcp
        servers = {MCP_SERVER: _stdio(bridge_argv(task.files))} if mcp else {}
        argv = [
            self.executable(),
            "-p",
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            ",".join([*TOOLS, *(f"mcp__{MCP_SERVER}__{name}" for name in mcp)]),
            "--output-format",
            "text",
            "--mcp-config",
            json.dumps({"mcpServers": servers}),
            "--strict-mcp-config",
        ]
        if task.manifest.model:
            argv += ["--model", task.manifest.model]
        # The prompt last, after `--`: a prompt file may start with "-" (a list, front matter).
        return [*argv, "--", self.prompt(task)]

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {
            "CLAUDE_CONFIG_DIR": str(self.home(task, "claude")),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }


def _stdio(argv: list[str]) -> dict[str, object]:
    return {"type": "stdio", "command": argv[0], "args": argv[1:]}


RUNTIME = ClaudeCode("claude-code", "claude", "npm install -g @anthropic-ai/claude-code", ANTHROPIC)
