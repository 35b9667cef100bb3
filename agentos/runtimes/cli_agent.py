"""What the CLI runtimes (claude-code, gemini-cli, codex) share: finding the CLI, checking
before anything starts that it has a key its model API takes, giving it a configuration of
its own for the run, and building the prompt from the package's prompt file, the request,
the context and any fed-back gate failures. The prompt reaches the CLI as an argument,
never as keystrokes.

Each CLI runs headless and unattended in the agent's worktree: no questions, no updates,
no telemetry, and a configuration home AgentOS writes for the attempt
(:attr:`~agentos.workspace.files.AgentFiles.cli_home`), so that neither the user's own settings
(their hooks, their MCP servers) nor a previous run's state changes what an agent does.
When the package lists AgentOS tools in ``mcp``, the CLI is given one MCP server,
``agentos``, offering exactly those (:mod:`agentos.runtimes.agent_tools`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import MissingTool
from agentos.hub.manifest import Manifest
from agentos.runtimes.agent_tools import server_module
from agentos.runtimes.model_api import ModelApi
from agentos.runtimes.task import CONTEXT_FILE, FEEDBACK_FILE, AgentTask
from agentos.sandbox.egress import host_of_url
from agentos.shared.fs import remove_tree

MAX_INLINE_CONTEXT = 24_000  # characters of context put into the prompt itself
MCP_SERVER = "agentos"  # the name the CLI knows AgentOS's MCP server by


@dataclass(frozen=True)
class CliAgent:
    runtime: str
    program: str
    install_hint: str
    api: ModelApi

    def executable(self) -> str:
        path = shutil.which(self.program)
        if path is None:
            raise MissingTool(
                f"the {self.runtime} runtime needs the `{self.program}` CLI, which is not "
                f"installed ({self.install_hint})",
                field="runtime",
            )
        return path

    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        self.executable()
        if manifest.mcp:
            server_module()
        self.credential(manifest)

    def credential(self, manifest: Manifest) -> str:
        """How the agent will authenticate, checked with its model API (MissingTool with
        the fix when it has no key or the API refuses it)."""
        return self.api.credential(manifest, os.environ)

    def api_host(self, manifest: Manifest) -> str | None:
        """``host:port`` of the model API the agent will talk to."""
        base = manifest.passed(os.environ).get(self.api.base_var)
        return host_of_url(base or self.api.default_base)

    def path_dirs(self) -> list[str]:
        path = shutil.which(self.program)
        return [str(Path(path).resolve().parent), str(Path(path).parent)] if path else []

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {}

    def home(self, task: AgentTask, name: str) -> Path:
        """The CLI's configuration home for this attempt, made anew: what an earlier attempt
        left there (links among it) is removed first, never followed."""
        root = task.files.cli_home
        remove_tree(root)  # (its parent, the agent's io folder, is AgentOS's own mount)
        home = root / name
        home.mkdir(parents=True)
        return home

    def prompt(self, task: AgentTask) -> str:
        parts = [
            (task.package_dir / task.manifest.entry).read_text(encoding="utf-8").strip(),
            "## Request",
            task.request.strip(),
        ]
        if task.context_file.exists():
            context = task.context_file.read_text(encoding="utf-8")
            if len(context) > MAX_INLINE_CONTEXT:
                context = context[:MAX_INLINE_CONTEXT] + f"\n[... the rest is in {CONTEXT_FILE}]"
            parts += ["## Context from the knowledge store", context.strip()]
        if task.feedback_file.exists():
            parts += [
                f"## Attempt {task.attempt}: the checks failed last time ({FEEDBACK_FILE})",
                task.feedback_file.read_text(encoding="utf-8").strip(),
            ]
        text = "\n\n".join(p for p in parts if p) + "\n"
        (task.run_dir / "prompt.md").write_text(text, encoding="utf-8")
        return text
