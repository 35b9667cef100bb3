"""The values of a run: its options, each agent's state, and the report it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.gate.results import GateResult
from agentos.hub.manifest import Manifest
from agentos.run import review
from agentos.run.store import AgentStatus, RunStatus
from agentos.runtimes.usage import Usage
from agentos.shared.checks import CheckSpec
from agentos.workspace.files import AgentFiles

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile
    from agentos.interview.engine import Interview
    from agentos.routing.router import Decision
    from agentos.runtimes.agent_tools import AgentToolServer
    from agentos.sandbox.egress import Egress

OUTPUT_TAIL = 2000  # bytes of an agent's output kept in reports and receipts


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C, SIGTERM, `agentos runs cancel`)."""


@dataclass(frozen=True)
class RunOptions:
    force: bool = False  # start even when the interview blocks the request
    agent: str | None = None  # NAME[@VERSION]: this agent takes the request, not the cards
    merge: bool = True  # False: the passing work waits on its branches for review
    run_id: str | None = None
    # Checks every agent's gate adds (CheckSpec fields, as a workflow phase gives them).
    checks: list[dict[str, Any]] = field(default_factory=list)
    # Environment every agent gets besides its own: AGENTOS_* names only (a workflow's
    # AGENTOS_EXECUTION_ID and AGENTOS_TASK_ID).
    env: dict[str, str] = field(default_factory=dict)
    # The agents may change the base's tests (`run --allow-test-changes`): the gate records
    # what they changed instead of refusing it.
    allow_test_changes: bool = False


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
    usage: Usage | None = None  # what it says it used, over its attempts (agentos.runtimes.usage)
    tools: AgentToolServer | None = None  # AgentOS's MCP tools it asked for, while it works
    egress: Egress | None = None  # its proxy, when its package names the hosts it may reach
    base: str = ""  # the commit it starts from: the run's base, or for a verifier the
    # integrated work of the agents that change code
    verifier: bool = False  # it only verifies (card group verify, or changes: false)
    node: str | None = None  # the node of a cluster its last attempt ran on (None: here)

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def lands(self) -> bool:
        """Whether its passing work has anything to land (a verifier's is its base)."""
        return self.gated_commit is not None and not (
            self.verifier and self.gated_commit == self.base
        )

    def work(self) -> review.AgentWork:
        assert self.gated_commit is not None
        return review.AgentWork(
            self.name,
            self.manifest.version,
            self.card,
            self.branch,
            self.gated_commit,
            tuple(self.receipts),
            gated_here=self.node is None,
        )

    def result(self) -> AgentResult:
        """How the agent ended, as the run's report gives it."""
        return AgentResult(
            agent=self.name,
            version=self.manifest.version,
            card=self.card,
            runtime=self.manifest.runtime,
            branch=self.branch,
            status=self.status,
            attempts=self.attempts,
            exit_code=self.exit_code,
            gate=self.gate,
            commits=tuple(self.commits),
            gated_commit=self.gated_commit,
            receipts=tuple(self.receipts),
            sandbox=self.sandbox,
            limit=self.limit,
            usage=self.usage,
            log=self.files.log,
            output_tail=tail(self.files.log, OUTPUT_TAIL),
        )


@dataclass(frozen=True)
class AgentResult:
    """One agent of a finished run."""

    agent: str
    version: str
    card: str
    runtime: str
    branch: str
    status: AgentStatus
    attempts: int
    exit_code: int | None
    gate: GateResult | None  # the last gate
    commits: tuple[str, ...]
    gated_commit: str | None  # the commit the passing gate judged
    receipts: tuple[str, ...]  # its gate receipts
    sandbox: dict[str, Any] | None  # what its last attempt was confined by
    limit: str | None  # the sandbox limit that stopped its last attempt, if one did
    usage: Usage | None  # what it says it used (tokens, cost), if it said
    log: Path
    output_tail: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "version": self.version,
            "card": self.card,
            "runtime": self.runtime,
            "branch": self.branch,
            "status": self.status,
            "attempts": self.attempts,
            "exit_code": self.exit_code,
            "gate": self.gate.as_dict() if self.gate else None,
            "commits": list(self.commits),
            "gated_commit": self.gated_commit,
            "receipts": list(self.receipts),
            "sandbox": self.sandbox,
            "limit": self.limit,
            "usage": self.usage.as_dict() if self.usage else None,
            "log": str(self.log),
            "output_tail": self.output_tail,
        }


@dataclass
class RunReport:
    """How a run went: :func:`agentos.run.orchestrator.start_run` returns it."""

    run_id: str
    status: RunStatus
    message: str = ""
    decision: Decision | None = None  # the router's
    interview: Interview | None = None
    agents: list[AgentResult] = field(default_factory=list)
    merge: dict[str, Any] | None = None  # the merge receipt's fields, when it merged
    receipts: list[str] = field(default_factory=list)
    repo_profile: RepoProfile | None = None  # how the repository is tested
    diffstat: dict[str, str] = field(default_factory=dict)  # per agent, when not merged

    @property
    def exit_code(self) -> int:
        return 0 if self.status in (RunStatus.SUCCEEDED, RunStatus.READY) else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "status": self.status,
            "message": self.message,
            "decision": self.decision.as_dict() if self.decision else None,
            "interview": self.interview.as_dict() if self.interview else None,
            "agents": [a.as_dict() for a in self.agents],
            "merge": self.merge,
            "receipts": self.receipts,
            "repo_profile": self.repo_profile.as_dict() if self.repo_profile else None,
            "diffstat": self.diffstat,
        }


def tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of a file, as text ("" when it does not exist)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")
