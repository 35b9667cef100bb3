"""``shell``: run the package's script with bash, in the worktree."""

from __future__ import annotations

from pathlib import Path

from agentos.hub.manifest import Manifest
from agentos.runtimes.task import AgentTask


class ShellRuntime:
    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        return None

    def command(self, task: AgentTask) -> list[str]:
        return ["bash", str(task.package_dir / task.manifest.entry)]

    def path_dirs(self) -> list[str]:
        return []

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {}

    def meter(self, task: AgentTask) -> None:
        return None  # it writes $AGENTOS_USAGE_FILE, if anything


RUNTIME = ShellRuntime()
