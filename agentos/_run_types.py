"""The values of a run: its options, each agent's state, and the report it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos import review
from agentos._run_files import AgentFiles
from agentos.checks import CheckSpec
from agentos.manifest import Manifest
from agentos.runs import AgentStatus, RunStatus
from agentos.stormbreaker import GateResult

OUTPUT_TAIL = 2000  # bytes of an agent's output kept in reports and receipts


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C, SIGTERM, `agentos runs cancel`)."""


@dataclass(frozen=True)
class RunOptions:
    force: bool = False  # start even when the interview blocks the request
    agent: str | None = None  # NAME[@VERSION]: this agent takes the request, not the cards
    merge: bool = True  # False: the passing work waits on its branches for review
    run_id: str | None = None


@dataclass
class AgentState:
    card: str
    manifest: Manifest
    package_dir: Path
    checks: list[CheckSpec]
    branch: str
    worktree: Path
    session: str
    files: AgentFiles
    status: AgentStatus = AgentStatus.PENDING
    attempts: int = 0
    exit_code: int | None = None
    gate: GateResult | None = None
    commits: list[str] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    pane_pid: int | None = None
    gated_commit: str | None = None  # the commit the passing gate judged
    receipts: list[str] = field(default_factory=list)  # this agent's gate receipts
    sandbox: dict[str, Any] | None = None  # what its last attempt was confined by
    limit: str | None = None  # the sandbox limit that stopped its last attempt, if one did

    @property
    def name(self) -> str:
        return self.manifest.name

    def work(self) -> review.AgentWork:
        assert self.gated_commit is not None
        return review.AgentWork(
            self.name,
            self.manifest.version,
            self.card,
            self.branch,
            self.gated_commit,
            tuple(self.receipts),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.name,
            "version": self.manifest.version,
            "card": self.card,
            "runtime": self.manifest.runtime,
            "branch": self.branch,
            "status": self.status,
            "attempts": self.attempts,
            "exit_code": self.exit_code,
            "gate": self.gate.as_dict() if self.gate else None,
            "commits": self.commits,
            "gated_commit": self.gated_commit,
            "receipts": self.receipts,
            "sandbox": self.sandbox,
            "limit": self.limit,
            "log": str(self.files.log),
            "output_tail": tail(self.files.log, OUTPUT_TAIL),
        }


@dataclass
class RunReport:
    run_id: str
    status: RunStatus
    message: str = ""
    decision: dict[str, Any] | None = None
    interview: dict[str, Any] | None = None
    agents: list[dict[str, Any]] = field(default_factory=list)
    merge: dict[str, Any] | None = None
    receipts: list[str] = field(default_factory=list)
    repo_profile: dict[str, Any] | None = None
    diffstat: dict[str, str] = field(default_factory=dict)  # per agent, when not merged

    @property
    def exit_code(self) -> int:
        return 0 if self.status in (RunStatus.SUCCEEDED, RunStatus.READY) else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "status": self.status,
            "message": self.message,
            "decision": self.decision,
            "interview": self.interview,
            "agents": self.agents,
            "merge": self.merge,
            "receipts": self.receipts,
            "repo_profile": self.repo_profile,
            "diffstat": self.diffstat,
        }


def tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of a file, as text ("" when it does not exist)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")
