"""``claude-code``: Claude Code in print mode (``claude -p``) in the agent's worktree.

Edits are accepted without asking, and the tools an engineer needs (the shell among them)
are allowed, so that it can run tests and linters unattended. Its configuration lives in a
directory of the attempt's own (``CLAUDE_CONFIG_DIR``); only the MCP server AgentOS gives
it is loaded (``--strict-mcp-config``), and its tools are allowed by name.
"""

from __future__ import annotations

import json
from typing import Any

from agentos.runtimes.agent_tools import bridge_argv
from agentos.runtimes.cli_agent import MCP_SERVER, CliAgent
from agentos.runtimes.model_api import ANTHROPIC
from agentos.runtimes.task import AgentTask
from agentos.runtimes.usage import Meter, Tokens, amount, count

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
            "stream-json",
            "--verbose",
            "--mcp-config",
            json.dumps({"mcpServers": servers}),
            "--strict-mcp-config",
        ]
        if task.manifest.model:
            argv += ["--model", task.manifest.model]
        # The prompt last, after `--`: a prompt file may start with "-" (a list, front matter).
        return [*argv, "--", self.prompt(task)]

    def meter(self, task: AgentTask) -> ClaudeMeter:
        return ClaudeMeter()

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {
            "CLAUDE_CONFIG_DIR": str(self.home(task, "claude")),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }


class ClaudeMeter(Meter):
    """Claude Code's ``stream-json`` events. Each ``assistant`` event carries its model
    message's usage as the message started (one message may come as several events, one
    per content block: counted once, by id); the ``result`` event at the end carries the
    attempt's totals per model and their cost (``total_cost_usd``), which replace the
    running count."""

    def __init__(self) -> None:
        super().__init__()
        self._turns: dict[str, tuple[str, Tokens]] = {}

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "assistant" and isinstance(event.get("message"), dict):
            message = event["message"]
            tokens = _tokens(message.get("usage"))
            if tokens is not None:
                key = str(message.get("id") or len(self._turns))
                self._turns[key] = (str(message.get("model") or ""), tokens)
                self.models = {}
                for model, used in self._turns.values():
                    self.models[model] = self.models.get(model, Tokens()) + used
        elif kind == "result" and isinstance(event.get("modelUsage"), dict):
            models = {}
            for model, used in event["modelUsage"].items():
                if isinstance(used, dict):
                    models[str(model)] = Tokens(
                        count(used, "inputTokens")
                        + count(used, "cacheReadInputTokens")
                        + count(used, "cacheCreationInputTokens"),
                        count(used, "outputTokens"),
                        count(used, "cacheReadInputTokens"),
                    )
            self.models, self._turns = models, {}
            self.cost = amount(event.get("total_cost_usd"))


def _tokens(usage: object) -> Tokens | None:
    """Tokens from an Anthropic ``usage`` object (cache reads and writes are input too)."""
    if not isinstance(usage, dict):
        return None
    cached = count(usage, "cache_read_input_tokens")
    written = count(usage, "cache_creation_input_tokens")
    return Tokens(
        count(usage, "input_tokens") + cached + written, count(usage, "output_tokens"), cached
    )


def _stdio(argv: list[str]) -> dict[str, object]:
    return {"type": "stdio", "command": argv[0], "args": argv[1:]}


RUNTIME = ClaudeCode("claude-code", "claude", "npm install -g @anthropic-ai/claude-code", ANTHROPIC)
