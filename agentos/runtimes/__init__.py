"""Runtimes: how an agent package is started inside its tmux pane.

A runtime turns an :class:`AgentTask` into the argv the pane's wrapper runs (cwd = the
agent's worktree), and checks before anything starts that what it needs is installed.
Runtimes are loaded lazily: the heavy frameworks are imported only by the agent process.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agentos._run_files import AgentFiles
from agentos.manifest import Manifest

if TYPE_CHECKING:
    from agentos.hub import Hub, InstalledVersion
    from agentos.usage import Meter

CONTEXT_FILE = "AGENTOS_CONTEXT.md"
FEEDBACK_FILE = "AGENTOS_FEEDBACK.md"

_RUNTIMES = {
    "shell": "agentos.runtimes.shell",
    "python": "agentos.runtimes.python",
    "claude-code": "agentos.runtimes.claude_code",
    "gemini-cli": "agentos.runtimes.gemini_cli",
    "codex": "agentos.runtimes.codex",
    "ollama": "agentos.runtimes.ollama",
    "langchain": "agentos.runtimes.langchain",
    "crewai": "agentos.runtimes.crewai",
}


@dataclass(frozen=True, kw_only=True)
class AgentTask:
    run_id: str
    agent: str
    manifest: Manifest
    package_dir: Path
    worktree: Path
    repo: Path
    workspace: Path
    request: str
    files: AgentFiles  # outside the worktree: wrapper, env file, exit status, prompt
    attempt: int = 1
    confined: bool = True  # whether AgentOS's sandbox confines it (sandbox.backend not none)

    @property
    def run_dir(self) -> Path:
        return self.files.run_dir

    @property
    def context_file(self) -> Path:
        return self.worktree / CONTEXT_FILE

    @property
    def feedback_file(self) -> Path:
        return self.worktree / FEEDBACK_FILE


class Runtime(Protocol):
    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        """Raise MissingTool (naming the fix) when this runtime cannot start here."""

    def command(self, task: AgentTask) -> list[str]:
        """The argv to run in the agent's pane."""

    def environment(self, task: AgentTask) -> dict[str, str]:
        """Variables this runtime's program needs besides the agent's own (its configuration
        written under the agent's own files first, where it needs one)."""

    def path_dirs(self) -> list[str]:
        """Directories the agent's PATH needs for this runtime's programs."""

    def meter(self, task: AgentTask) -> Meter | None:
        """What reads the tokens and cost the agent's program reports in its output as it
        streams (see :class:`agentos.usage.Meter`); None: it reports none there (it may
        write ``$AGENTOS_USAGE_FILE``)."""


def get_runtime(name: str) -> Runtime:
    module = _RUNTIMES.get(name)
    if module is None:
        from agentos.errors import BadInput

        raise BadInput(f"unknown runtime {name!r}", field="runtime")
    runtime: Runtime = importlib.import_module(module).RUNTIME
    return runtime


def ready_package(
    hub: Hub, ref: str, field: str, hint: str = ""
) -> tuple[InstalledVersion, Manifest]:
    """The installed package ``ref``, intact (its files match hub.lock) and able to start
    here (its runtime's preflight); else one line naming ``field`` (``hint`` added to "not
    installed", e.g. where the reference is set)."""
    from agentos.errors import BadInput

    try:
        info, manifest = hub.get(ref)
    except BadInput as exc:
        raise type(exc)(exc.message + hint, field=field) from None
    hub.check_intact(info.name, info.version)
    get_runtime(manifest.runtime).preflight(manifest, info.path)
    return info, manifest


def egress_hosts(manifest: Manifest) -> list[str] | None:
    """The hosts an agent of ``manifest`` may reach when its package names them
    (``sandbox.network`` a list), its model API's among them for a CLI runtime (the
    address its base-URL variable gives, else the API's own); None when it names none."""
    network = manifest.sandbox.network if manifest.sandbox is not None else None
    if not isinstance(network, list):
        return None
    from agentos.runtimes._cli_agent import CliAgent

    runtime = get_runtime(manifest.runtime)
    extra = [runtime.api_host(manifest)] if isinstance(runtime, CliAgent) else []
    return list(dict.fromkeys([*network, *(h for h in extra if h)]))
