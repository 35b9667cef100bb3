"""``gemini-cli``: Gemini CLI headless (``gemini --prompt=...``) in the agent's worktree.

The worktree is the agent's own, so Gemini may act without asking (``yolo``); it is trusted
for this session only (``--skip-trust``), since an untrusted folder forces approvals back on.
Its settings are written for the attempt in a home of their own (``GEMINI_CLI_HOME``): the
authentication the passed variables select (an API key, or Vertex AI), usage statistics and
telemetry off, and AgentOS's MCP server when the package asks for its tools. A package's
``model`` is passed with ``-m`` (else the CLI asks the API which model to route to first).

Its output is ``stream-json``; the CLI reports tokens only in its last event (``result``:
per model, as the API named it), so a budget acts on them when the attempt's CLI ends, and
their cost comes from the price table (:class:`GeminiMeter`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentos.runtimes.agent_tools import bridge_argv
from agentos.runtimes.cli_agent import MCP_SERVER, CliAgent
from agentos.runtimes.model_api import GEMINI
from agentos.runtimes.task import AgentTask
from agentos.runtimes.usage import Meter, Tokens, count
from agentos.shared.fs import atomic_write


class GeminiCli(CliAgent):
    def command(self, task: AgentTask) -> list[str]:
        # One argument, `--prompt=TEXT`: a prompt file may start with "-" (a list, front
        # matter), which the CLI would read as an option of its own.
        argv = [self.executable(), f"--prompt={self.prompt(task)}", "--approval-mode", "yolo"]
        # Trusted for this session; the only MCP server it may start is AgentOS's (a
        # repository's .gemini/settings.json may name others).
        argv += ["--skip-trust", "--allowed-mcp-server-names", MCP_SERVER]
        argv += ["--output-format", "stream-json"]
        return argv + (["-m", task.manifest.model] if task.manifest.model else [])

    def meter(self, task: AgentTask) -> GeminiMeter:
        return GeminiMeter()

    def environment(self, task: AgentTask) -> dict[str, str]:
        home = self.home(task, "gemini")
        vertex = bool(task.manifest.passed(os.environ).get("GOOGLE_GENAI_USE_VERTEXAI"))
        settings: dict[str, object] = {
            "security": {"auth": {"selectedType": "vertex-ai" if vertex else "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        if task.manifest.mcp:
            argv = bridge_argv(task.files)
            settings["mcpServers"] = {
                MCP_SERVER: {
                    "command": argv[0],
                    "args": argv[1:],
                    "trust": True,
                    "includeTools": task.manifest.mcp,
                }
            }
        atomic_write(home / ".gemini" / "settings.json", json.dumps(settings, indent=2) + "\n")
        return {"GEMINI_CLI_HOME": str(home)}


class GeminiMeter(Meter):
    """Gemini CLI's ``stream-json`` events: the ``result`` event's ``stats``, per model
    (``input_tokens``, ``cached`` of them, ``output_tokens``)."""

    def event(self, event: dict[str, Any]) -> None:
        stats = event.get("stats") if event.get("type") == "result" else None
        if not isinstance(stats, dict):
            return
        models = stats.get("models")
        if not isinstance(models, dict) or not models:
            models = {"": stats}  # no model named: counted, never priced
        self.models = {
            str(name): Tokens(
                count(used, "input_tokens"), count(used, "output_tokens"), count(used, "cached")
            )
            for name, used in models.items()
            if isinstance(used, dict)
        }


RUNTIME = GeminiCli("gemini-cli", "gemini", "npm install -g @google/gemini-cli", GEMINI)
