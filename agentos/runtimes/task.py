"""What a runtime is given and must answer: the agent's task, and the runtime protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agentos.workspace.files import AgentFiles

if TYPE_CHECKING:
    from agentos.hub.manifest import Manifest
    from agentos.runtimes.usage import Meter

CONTEXT_FILE = "AGENTOS_CONTEXT.md"
FEEDBACK_FILE = "AGENTOS_FEEDBACK.md"


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
        streams (see :class:`agentos.runtimes.usage.Meter`); None: it reports none there (it
        may write ``$AGENTOS_USAGE_FILE``)."""
