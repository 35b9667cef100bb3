"""``ollama``: a coding agent on a local model served by Ollama.

The package's ``entry`` is its prompt file and ``model`` the Ollama model. The pane runs
:mod:`agentos.runtimes.ollama_agent`, which chats through the official ``ollama`` client
with a small tool loop inside the worktree. Before anything starts, preflight checks that
the ``ollama`` client is installed, that the server the agent will use answers, and that
it has the model. The agent sees OLLAMA_HOST only when the package lists it in ``env``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentos.errors import ValidationFailed
from agentos.hub.manifest import MANIFEST, Manifest
from agentos.runtimes.frameworks import require_model_field, require_modules, require_server
from agentos.runtimes.task import AgentTask


class OllamaRuntime:
    name = "ollama"

    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        require_model_field(self.name, manifest, package_dir)
        if not (package_dir / manifest.entry).is_file():
            raise ValidationFailed(
                f"the prompt file {manifest.entry!r} is not in the package",
                file=package_dir / MANIFEST,
                field="entry",
            )
        require_modules(self.name, bridge=True)
        require_server(self.name, manifest)

    def command(self, task: AgentTask) -> list[str]:
        assert task.manifest.model is not None  # preflight made sure
        return [
            sys.executable,
            "-m",
            "agentos.runtimes.ollama_agent",
            str(task.package_dir / task.manifest.entry),
            task.manifest.model,
        ]

    def path_dirs(self) -> list[str]:
        return [str(Path(sys.executable).parent)]

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {}

    def meter(self, task: AgentTask) -> None:
        return None  # it writes $AGENTOS_USAGE_FILE, if anything


RUNTIME = OllamaRuntime()
