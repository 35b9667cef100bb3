"""``python``: import the package's ``module:callable`` and call it.

The callable is called as ``callable(request=..., worktree=..., context=...)`` with the
worktree as the current directory; it returns an exit code (or None for 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentos.hub.manifest import Manifest
from agentos.runtimes.task import AgentTask


class PythonRuntime:
    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        return None

    def command(self, task: AgentTask) -> list[str]:
        return [
            sys.executable,
            "-m",
            "agentos.runtimes.entry",
            str(task.package_dir),
            task.manifest.entry,
            str(task.context_file),
        ]

    def path_dirs(self) -> list[str]:
        return [str(Path(sys.executable).parent)]

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {}

    def meter(self, task: AgentTask) -> None:
        return None  # it writes $AGENTOS_USAGE_FILE, if anything


RUNTIME = PythonRuntime()
