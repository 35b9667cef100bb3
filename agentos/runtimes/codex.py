"""``codex``: the Codex CLI non-interactively (``codex exec``) in the agent's worktree.

Its configuration is written for the attempt (``CODEX_HOME``): when the package passes
``OPENAI_BASE_URL``, a model provider of that address (Codex does not read the variable
itself), the package's ``model``, and AgentOS's MCP server when the package asks for its
tools. In AgentOS's sandbox Codex's own is off (it would need namespaces of its own, which
it cannot make inside AgentOS's); with ``sandbox.backend: none`` Codex's own sandbox keeps
its writes to the worktree.

It prints its events as JSON lines (``--json``); each turn's tokens come in its
``turn.completed`` event, so a budget acts on them when the turn ends. The events do not
name the model: it is the package's ``model``, and without one the cost is not known
(:class:`CodexMeter`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentos.runtimes.agent_tools import bridge_argv
from agentos.runtimes.cli_agent import MCP_SERVER, CliAgent
from agentos.runtimes.model_api import OPENAI
from agentos.runtimes.task import AgentTask
from agentos.runtimes.usage import Meter, Tokens, count
from agentos.shared.fs import atomic_write

PROVIDER = "agentos"


class Codex(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        argv = [self.executable(), "exec", "--skip-git-repo-check", "--json"]
        if task.confined:  # AgentOS's sandbox confines it; Codex's own cannot start inside
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        else:  # nothing else does: Codex's own sandbox, writes in the worktree only
            argv += ["--sandbox", "workspace-write"]
        if task.manifest.model:
            argv += ["-m", task.manifest.model]
        return [*argv, "--", self.prompt(task)]

    def meter(self, task: AgentTask) -> CodexMeter:
        return CodexMeter(task.manifest.model or "")

    def environment(self, task: AgentTask) -> dict[str, str]:
        home = self.home(task, "codex")
        q = toml_value
        lines = ["check_for_update_on_startup = false", "[analytics]", "enabled = false"]
        base = task.manifest.passed(os.environ).get(OPENAI.base_var)
        if base:
            lines[:0] = [f"model_provider = {q(PROVIDER)}"]
            lines += [
                f"[model_providers.{PROVIDER}]",
                f"name = {q(PROVIDER)}",
                f"base_url = {q(base)}",
                'env_key = "OPENAI_API_KEY"',
                'wire_api = "responses"',
            ]
        if task.manifest.mcp:
            argv = bridge_argv(task.files)
            lines += [
                f"[mcp_servers.{MCP_SERVER}]",
                f"command = {q(argv[0])}",
                f"args = {q(argv[1:])}",
                f"enabled_tools = {q(task.manifest.mcp)}",
            ]
        atomic_write(home / "config.toml", "\n".join(lines) + "\n")
        return {"CODEX_HOME": str(home)}


class CodexMeter(Meter):
    """``codex exec --json`` events: each ``turn.completed`` carries that turn's usage
    (``input_tokens``, ``cached_input_tokens`` of them, ``output_tokens``)."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model

    def event(self, event: dict[str, Any]) -> None:
        usage = event.get("usage") if event.get("type") == "turn.completed" else None
        if isinstance(usage, dict):
            turn = Tokens(
                count(usage, "input_tokens"),
                count(usage, "output_tokens"),
                count(usage, "cached_input_tokens"),
            )
            self.models[self.model] = self.models.get(self.model, Tokens()) + turn


RUNTIME = Codex("codex", "codex", "npm install -g @openai/codex", OPENAI)


def toml_value(value: str | list[str]) -> str:
    """A TOML basic string (or array of them): JSON's escapes are TOML's, but characters
    beyond the BMP must stay as they are (TOML has no surrogate pairs) and DEL escaped."""
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
