"""The ephemeral orchestrator: one run, from a request to merged branches, then gone.

interview -> route (receipt) -> for each selected agent: a worktree on its own branch, the
knowledge store's context, a tmux session running the agent -> the Stormbreaker gate (failures
fed back, retried) -> merge, all or nothing -> teardown, always: sessions ended, work
committed to its branch, worktrees removed. Every step that decides something is a receipt.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from agentos import review
from agentos import worktrees as wt
from agentos._launch import AgentFiles, prepare
from agentos._signals import handling
from agentos.checks import CheckSpec
from agentos.errors import AgentOSError, BadInput, EnvironmentBroken, RequestBlocked
from agentos.hub import Hub
from agentos.manifest import Manifest
from agentos.receipts import write_receipt
from agentos.repos import RepoProfile, check_profile, prepare_worktree, repo_profile
from agentos.runs import ACTIVE, READY, RunStore, new_run_id
from agentos.runtimes import AgentTask, get_runtime
from agentos.sessions import Sessions, require_tmux, session_name
from agentos.stormbreaker import (
    GateResult,
    collect_checks,
    environment_failure,
    gate_environment,
    gate_receipt_fields,
    run_gate,
)
from agentos.workspace import Workspace

CONTEXT_BUDGET = 3000  # tokens of knowledge-store context per agent
POLL = 0.05
SESSION_CHECK_EVERY = 0.5
OUTPUT_TAIL = 2000

Event = Callable[[str], None]


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
    status: str = "pending"
    attempts: int = 0
    exit_code: int | None = None
    gate: GateResult | None = None
    commits: list[str] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    pane_pid: int | None = None
    gated_commit: str | None = None  # the commit the passing gate judged
    receipts: list[str] = field(default_factory=list)  # this agent's gate receipts

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
            "log": str(self.files.log),
            "output_tail": _tail(self.files.log, OUTPUT_TAIL),
        }


@dataclass
class RunReport:
    run_id: str
    status: str
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
        return 0 if self.status in ("succeeded", READY) else 1

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


def start_run(
    ws: Workspace,
    request: str,
    repo: Path,
    options: RunOptions | None = None,
    *,
    force: bool = False,
    on_event: Event | None = None,
) -> RunReport:
    """Run ``request`` against ``repo`` from start to teardown; the report says how it went.
    ``force=True`` is short for ``RunOptions(force=True)``."""
    options = options or RunOptions(force=force)
    return Orchestrator(ws, request, repo, options, on_event=on_event).run()


def start_detached(
    ws: Workspace, request: str, repo: Path, options: RunOptions | None = None
) -> tuple[str, Path]:
    """Start a run in a background process; returns its id and the orchestrator's log.

    What would stop the run at once stops it here, where the caller sees it: a repository
    the run cannot work on, and a request the interview blocks (:class:`RequestBlocked`,
    with the questions), unless forced. The run is in state.db (and visible to ``runs
    show``) as soon as its orchestrator has checked the repository, within a second or so.
    """
    options = options or RunOptions()
    if not request.strip():
        raise BadInput("the request is empty", field="REQUEST")
    repo = repo.expanduser().resolve()
    check_repo(repo)
    check_agent(ws, options.agent)
    if not options.force:
        from agentos.interview import interview_in

        result = interview_in(ws, request, rewrite=False)
        if not result.passed:
            questions = [f"{q.axis}: {q.text}" for q in result.questions]
            raise RequestBlocked(
                f"the request is too vague to start (ambiguity {result.ambiguity:.3f}); "
                "answer these and run again, or use --force: " + " ".join(questions),
                questions,
            )
    run_id = options.run_id or new_run_id()
    log = ws.logs_dir / run_id / "orchestrator.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "agentos",
        "--workspace",
        str(ws.root),
        "run",
        request,
        "--repo",
        str(repo),
        "--run-id",
        run_id,
        "--json",
    ]
    if options.force:
        argv.append("--force")
    if options.agent:
        argv += ["--agent", options.agent]
    if not options.merge:
        argv.append("--no-merge")
    with log.open("ab") as out:
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    return run_id, log


def check_repo(repo_dir: Path) -> tuple[str, str]:
    """Check that a run can work on ``repo_dir``; return (target branch, base commit).

    Agents branch from HEAD and their work is merged into the checked-out branch, so the
    repository needs a commit, a checked-out branch and no uncommitted changes to tracked
    files (which a merge could otherwise overwrite).
    """
    if not repo_dir.is_dir():
        raise BadInput("repository not found", file=repo_dir, field="--repo")
    repo = wt.open_repo(repo_dir)
    if Path(repo.working_tree_dir or "").resolve() != repo_dir:
        raise BadInput("give the repository's top-level directory", file=repo_dir, field="--repo")
    branch, base = wt.head(repo_dir)
    if branch is None:
        raise BadInput(
            "HEAD is detached: check out the branch to merge into",
            file=repo_dir,
            field="--repo",
        )
    dirty = wt.tracked_changes(repo_dir)
    if dirty:
        raise BadInput(
            f"uncommitted changes ({', '.join(dirty[:5])}): commit or stash "
            "them first, so that merging the agents' work cannot lose yours",
            file=repo_dir,
            field="--repo",
        )
    wt.ensure_agent_files_excluded(repo)
    return branch, base


def check_agent(ws: Workspace, ref: str | None) -> None:
    """``--agent NAME[@VERSION]`` names an installed package (else :class:`NotFound`)."""
    if ref:
        try:
            Hub(ws.hub_dir).get(ref)
        except BadInput as exc:
            raise type(exc)(exc.message, field="--agent") from None


class Orchestrator:
    def __init__(
        self,
        ws: Workspace,
        request: str,
        repo: Path,
        options: RunOptions | None = None,
        *,
        on_event: Event | None = None,
    ) -> None:
        if not request.strip():
            raise BadInput("the request is empty", field="REQUEST")
        self.ws = ws
        self.request = request
        self.repo = repo.expanduser().resolve()
        self.options = options or RunOptions()
        self.force = self.options.force
        self.run_id = self.options.run_id or new_run_id()
        self.emit: Event = on_event or (lambda _msg: None)
        self.report = RunReport(self.run_id, "pending")
        self.agents: list[AgentState] = []
        self.cancel = threading.Event()
        self._git_admin = threading.Lock()
        self.request_checks: list[Any] = []  # checks the request's own success criteria imply
        self.sessions = Sessions(ws.root)
        self.store: RunStore | None = None
        self.base = ""
        self.target = ""
        self.profile: RepoProfile | None = None

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> RunReport:
        from agentos.gc import collect_garbage

        collect_garbage(self.ws)
        self.target, self.base = check_repo(self.repo)
        check_agent(self.ws, self.options.agent)
        self.store = RunStore(self.ws)
        self.store.create(self.run_id, self.request, self.repo)
        self.store.update(
            self.run_id,
            target_branch=self.target,
            base_commit=self.base,
            started_at=time.time(),
            options={
                "force": self.options.force,
                "agent": self.options.agent,
                "merge": self.options.merge,
            },
        )
        try:
            with _cancel_on_signal(defer=lambda: self.report.status == "merging"):
                self._run()
        except (Cancelled, KeyboardInterrupt):
            self._finish(
                "cancelled", "the run was cancelled; agents' work is kept on their branches"
            )
        except AgentOSError as exc:
            self._finish("failed", str(exc))
            raise
        finally:
            if self.report.status in ACTIVE:
                self._finish("failed", self.report.message or "the run ended unexpectedly")
            self._teardown()  # always: whatever ended the run
            self._final_receipt()
        return self.report

    def _run(self) -> None:
        if not self._interview():
            return
        self.profile = repo_profile(self.ws, self.repo, at=self.base)
        self.report.repo_profile = self.profile.as_dict()
        self.emit(f"repository: tests run with `{self.profile.test}` ({self.profile.tool})")
        if not self._route():
            return
        self._check_environment()
        require_tmux()
        self._ensure_guardian()
        context = self._context()
        self._set_status("running")
        assert self.store is not None
        for agent in self.agents:
            self.store.add_agent(
                self.run_id,
                agent.name,
                agent.manifest.version,
                card=agent.card,
                branch=agent.branch,
                worktree=str(agent.worktree),
                session=agent.session,
            )
        self._drive_all(context)
        if not all(a.status == "passed" for a in self.agents):
            failed = ", ".join(
                f"{a.name} ({a.status})" for a in self.agents if a.status != "passed"
            )
            self._finish("failed", f"not done: {failed}; nothing was merged")
        elif self.options.merge:
            self._merge()
        else:
            self._ready()

    # -- steps -----------------------------------------------------------------------------

    def _interview(self) -> bool:
        """Score the request; a blocked one stops the run unless forced. The success
        criteria it states become checks of this run (``proposed_checks``)."""
        from agentos.interview import interview_in

        result = interview_in(self.ws, self.request)
        self.report.interview = result.as_dict()
        self.request_checks = list(result.proposed_checks)
        fields = {k: v for k, v in result.as_dict().items() if k != "request"}
        fields["override"] = "--force" if self.force and not result.passed else "none"
        receipt = write_receipt(
            self.ws, "interview", fields, run_id=self.run_id, request=self.request
        )
        self.report.receipts.append(receipt.id)
        if result.passed:
            return True
        if self.force:
            self.emit(f"interview: blocked (ambiguity {result.ambiguity}); --force overrides")
            return True
        questions = "; ".join(q.text for q in result.questions)
        self._finish("blocked", f"the request is too vague to start: {questions}")
        return False

    def _route(self) -> bool:
        """Decide the task force (the cards, ``--agent`` or ``run.default_agent``) and
        plan each agent: its package, verified against hub.lock; its runtime's needs;
        its checks. False when nothing is to run."""
        from agentos.router import route

        decision, receipt = route(
            self.ws, self.request, run_id=self.run_id, agent=self.options.agent
        )
        self.report.decision = decision.as_dict()
        self.report.receipts.append(receipt.id)
        assert self.store is not None
        self.store.update(self.run_id, decision=decision.decision, receipt=receipt.id)
        self.emit(
            f"decision: {decision.decision} ({decision.decided_by}) "
            + ", ".join(
                f"{s.agent}@{s.version} ({s.card}, score {s.score})" for s in decision.selected
            )
        )
        if decision.decision != "route":
            reason = (
                "cards tie: " + ", ".join(decision.tied)
                if decision.decision == "clarify"
                else "no routing card matches the request (set run.default_agent in "
                "agentos.yaml, or pick one with --agent)"
            )
            self._finish(decision.decision, reason)
            return False
        hub = Hub(self.ws.hub_dir)
        for sel in decision.selected:
            info, manifest = hub.get(f"{sel.agent}@{sel.version}")
            hub.check_intact(sel.agent, sel.version)
            get_runtime(manifest.runtime).preflight(manifest, info.path)
            checks = collect_checks(
                self.ws, package=manifest, card_checks=[*sel.checks, *self.request_checks]
            )
            self.agents.append(self._plan_agent(sel.card, manifest, info.path, checks))
        return True

    def _check_environment(self) -> None:
        """When the run's checks include the repository's tests, prove before any agent
        starts that they can run: the interpreter exists, the test command starts and the
        suite collects, on the repository as it is. What fails here is the environment's
        fault, never an agent's: the run stops (exit 2) with the fix, and no attempt is
        spent on it."""
        assert self.profile is not None
        if not any(c.kind == "tests" for agent in self.agents for c in agent.checks):
            return
        problems = check_profile(self.profile, self.repo)
        if problems:
            raise EnvironmentBroken(
                "the repository's tests cannot run, so no agent was started: "
                + "; ".join(problems),
                file=self.repo,
                field="tests",
            )
        self.emit("repository: the test command starts and the suite collects")

    def _ensure_guardian(self) -> None:
        """Start the workspace's guardian unless one runs (``run.guardian``, the default)."""
        if not self.ws.settings.run.guardian:
            return
        from guardian.daemon import ensure_running

        try:
            if ensure_running(self.ws):
                self.emit("guardian: started for this workspace")
        except AgentOSError as exc:  # the run goes on unwatched rather than not at all
            self.emit(f"guardian: could not start ({exc}); the run is not watched")

    def _context(self) -> str:
        from agentos.knowledge import open_store

        with open_store(self.ws) as store:
            stats = store.add([self.repo])
            self.emit(
                f"knowledge store: {stats.seen} files, {stats.read} read, {stats.chunks} chunks"
            )
            ctx = store.context(self.request, CONTEXT_BUDGET, under=self.repo)
        header = (
            f"# Context for run {self.run_id}\n\nRequest: {self.request}\n\n"
            "The knowledge store found these parts of the repository relevant "
            "(paths are relative to the repository root).\n\n"
        )
        text: str = ctx.text
        return header + text.replace(str(self.repo) + "/", "")

    def _plan_agent(
        self, card: str, manifest: Manifest, package_dir: Path, checks: list[CheckSpec]
    ) -> AgentState:
        name = manifest.name
        return AgentState(
            card=card,
            manifest=manifest,
            package_dir=package_dir,
            checks=checks,
            branch=wt.branch_name(self.run_id, name),
            worktree=self.ws.worktrees_dir / self.run_id / name,
            session=session_name(self.run_id, name),
            files=AgentFiles(
                self.ws.state_dir / "runs" / self.run_id / name,
                self.ws.logs_dir / self.run_id / f"{name}.log",
            ),
        )

    def _drive_all(self, context: str) -> None:
        with ThreadPoolExecutor(max_workers=len(self.agents)) as pool:
            futures = [pool.submit(self._drive, agent, context) for agent in self.agents]
            try:
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                    for fut in done:
                        fut.result()
            except BaseException:
                self.cancel.set()
                raise

    def _drive(self, agent: AgentState, context: str) -> None:
        """One agent: its worktree, then attempts until one passes, the guardian stops it
        or the retries are spent. Agents are driven in parallel, one thread each."""
        assert self.store is not None and self.profile is not None
        wt.add_worktree(
            self.repo,
            agent.worktree,
            agent.branch,
            self.base,
            sparse_paths=agent.manifest.paths or None,
            admin_lock=self._git_admin,
        )
        for note in prepare_worktree(self.profile, agent.worktree):
            self.emit(f"{agent.name}: {note}")
        agent.worktree.joinpath("AGENTOS_CONTEXT.md").write_text(context, encoding="utf-8")
        retries = self.ws.settings.run.retries
        agent.started_at = time.time()
        try:
            while agent.attempts <= retries and not self.cancel.is_set():
                self._attempt(agent)
                if agent.status in ("passed", "killed"):
                    break
                if agent.attempts <= retries:
                    agent.worktree.joinpath("AGENTOS_FEEDBACK.md").write_text(
                        self._feedback(agent), encoding="utf-8"
                    )
        finally:
            agent.ended_at = time.time()
            self.store.update_agent(
                self.run_id,
                agent.name,
                status=agent.status,
                exit_code=agent.exit_code,
                ended_at=agent.ended_at,
            )

    def _attempt(self, agent: AgentState) -> None:
        """One attempt: start the agent, wait for its exit file, commit its work, run the
        gate on exactly that commit, record it."""
        assert self.store is not None and self.profile is not None
        agent.attempts += 1
        task = AgentTask(
            self.run_id,
            agent.name,
            agent.manifest,
            agent.package_dir,
            agent.worktree,
            self.repo,
            self.ws.root,
            self.request,
            agent.files.run_dir,
            agent.attempts,
        )
        pane, _env = prepare(task, agent.files, environment=self._agent_environment(agent))
        agent.status = "running"
        self.store.update_agent(
            self.run_id,
            agent.name,
            status="running",
            attempts=agent.attempts,
            started_at=agent.started_at,
        )
        self.emit(f"{agent.name}: attempt {agent.attempts} started in tmux session {agent.session}")
        agent.pane_pid = self.sessions.start(agent.session, pane, agent.worktree)
        agent.exit_code = self._wait_for_exit(agent)
        commit = wt.commit_all(agent.worktree, self._commit_message(agent), agent.name)
        if commit:
            agent.commits.append(commit)
        if agent.files.stopped.exists():
            # The guardian killed it: no gate, no retry.
            agent.status = "killed"
            self.emit(
                f"{agent.name}: stopped by the guardian: {agent.files.stopped.read_text().strip()}"
            )
            return
        head = wt.rev(agent.worktree, "HEAD") or self.base
        agent.status = "gating"
        self.store.update_agent(self.run_id, agent.name, status="gating", exit_code=agent.exit_code)
        agent.gate = run_gate(
            agent.checks,
            agent.worktree,
            base=self.base,
            env=gate_environment(self.profile, agent.worktree),
            profile=self.profile,
        )
        wt.reset_to_head(agent.worktree)  # what the checks wrote is not the agent's work
        passed = agent.exit_code == 0 and agent.gate.passed
        fields = {
            "agent": f"{agent.name}@{agent.manifest.version}",
            "exit_code": agent.exit_code,
            "accepted": passed,
            "commit": head,
            **gate_receipt_fields(agent.gate, agent.attempts),
        }
        receipt = write_receipt(self.ws, "gate", fields, run_id=self.run_id)
        self.report.receipts.append(receipt.id)
        agent.receipts.append(receipt.id)
        agent.status = "passed" if passed else "failed"
        agent.gated_commit = head if passed else None
        self.store.update_agent(
            self.run_id,
            agent.name,
            gate=agent.gate.as_dict(),
            gated_commit=agent.gated_commit,
            receipts=agent.receipts,
        )
        self.emit(
            f"{agent.name}: attempt {agent.attempts} exited {agent.exit_code}; "
            f"{agent.gate.summary()}"
        )
        broken = environment_failure(agent.gate)
        if broken is not None:
            raise EnvironmentBroken(broken, file=self.repo, field="tests")

    def _agent_environment(self, agent: AgentState) -> Callable[[dict[str, str]], dict[str, str]]:
        """The agent's scrubbed environment, completed with the repository's (its
        interpreter first on PATH, the worktree's code imported) and its test command."""
        profile = self.profile
        assert profile is not None

        def complete(env: dict[str, str]) -> dict[str, str]:
            out = profile.environment(env, agent.worktree)
            out["AGENTOS_TEST_COMMAND"] = profile.test_command()
            return out

        return complete

    def _wait_for_exit(self, agent: AgentState) -> int | None:
        """Wait for the wrapper's exit file; kill the agent at its timeout (exit 124)."""
        deadline = time.monotonic() + agent.manifest.timeout
        next_session_check = time.monotonic() + SESSION_CHECK_EVERY
        while True:
            code = agent.files.exit_code()
            if code is not None:
                return code
            if self.cancel.is_set():
                raise Cancelled()
            now = time.monotonic()
            if now > deadline:
                self.sessions.kill(agent.session, agent.pane_pid)
                self.emit(f"{agent.name}: timed out after {agent.manifest.timeout}s; killed")
                return 124
            if now >= next_session_check:
                next_session_check = now + SESSION_CHECK_EVERY
                if not self.sessions.exists(agent.session):
                    code = agent.files.exit_code()
                    return code if code is not None else 137  # died without a status
            time.sleep(POLL)

    def _feedback(self, agent: AgentState) -> str:
        assert agent.gate is not None
        text = agent.gate.feedback()
        if agent.exit_code != 0:
            tail = _tail(agent.files.log, OUTPUT_TAIL)
            text += (
                f"\n## Your process exited with code {agent.exit_code}\n\n"
                f"Last output:\n\n```text\n{tail}\n```\n"
            )
        return text

    def _commit_message(self, agent: AgentState) -> str:
        return (
            f"agentos: {agent.name} attempt {agent.attempts} (run {self.run_id})\n\n"
            f"Request: {self.request}\nAgent: {agent.manifest.ref} via card {agent.card}\n"
        )

    def _merge(self) -> None:
        """Land exactly the commits the gates passed, squashed, all or nothing."""
        self._set_status("merging")
        result = review.land(
            self.ws,
            self.repo,
            self.target,
            self.run_id,
            self.request,
            [a.work() for a in self.agents],
        )
        self.report.merge = {
            "merged": result.merged,
            "commit": result.commit,
            "commits": result.commits,
            "conflicts": result.conflicts,
            "conflicting_branch": result.conflicting_branch,
            "message": result.message,
            "target": self.target,
            "landed": {a.name: a.gated_commit for a in self.agents},
        }
        receipt = write_receipt(self.ws, "merge", self.report.merge, run_id=self.run_id)
        self.report.receipts.append(receipt.id)
        self.emit(f"merge: {result.message}")
        if result.merged:
            self._finish("succeeded", result.message)
        else:
            self._finish("conflict", result.message + "; every branch is kept")

    def _ready(self) -> None:
        """``--no-merge``: every gate passed; the work waits on its branches for review."""
        for agent in self.agents:
            assert agent.gated_commit is not None
            stat = wt.diff(self.repo, self.base, agent.gated_commit, stat=True)
            self.report.diffstat[agent.name] = stat
            self.emit(f"{agent.name}: {agent.branch}\n{stat.rstrip() or '(no changes)'}")
        self._finish(
            READY,
            f"every gate passed; not merged (--no-merge): review with `agentos runs diff "
            f"{self.run_id}`, then `agentos runs merge {self.run_id}` or `agentos runs "
            f"discard {self.run_id}`",
        )

    # -- the end ---------------------------------------------------------------------------

    def _set_status(self, status: str) -> None:
        self.report.status = status
        if self.store is not None:
            self.store.update(self.run_id, status=status)

    def _finish(self, status: str, message: str) -> None:
        self.report.status = status
        self.report.message = message
        if self.store is not None:
            self.store.update(self.run_id, status=status, message=message, ended_at=time.time())

    def _teardown(self) -> None:
        """End sessions, keep the work on branches, remove worktrees; always. A step that
        fails is reported and the others still run."""
        self.cancel.set()
        if self.agents:
            with ThreadPoolExecutor(max_workers=len(self.agents)) as pool:
                list(pool.map(self._teardown_agent, self.agents))
            self._tolerant("prune worktrees", wt.prune, self.repo)
            empty = [
                a for a in self.agents if wt.commits_ahead(self.repo, a.branch, self.base) == 0
            ]
            self._tolerant(
                "delete empty branches", wt.delete_branch, self.repo, *(a.branch for a in empty)
            )
            if self.report.status == "succeeded":  # merged: attempts kept out of sight
                self._tolerant(
                    "archive merged branches",
                    review.archive_branches,
                    self.repo,
                    self.run_id,
                    [(a.name, a.branch) for a in self.agents if a not in empty],
                )
        self.report.agents = [agent.as_dict() for agent in self.agents]
        with suppress(OSError):  # gone unless a worktree had to be kept
            (self.ws.worktrees_dir / self.run_id).rmdir()
        _remove_tree(self.ws.state_dir / "runs" / self.run_id)  # env files hold secrets

    def _teardown_agent(self, agent: AgentState) -> None:
        """End the session, commit what is left, delete the worktree's files (the caller
        prunes the registrations once, then deletes branches)."""
        running = agent.files.exit_code() is None
        self.sessions.kill(agent.session, agent.pane_pid if running else None)
        if agent.status in ("pending", "running", "gating"):
            agent.status = "cancelled" if self.report.status == "cancelled" else "failed"
        if agent.worktree.exists():
            try:
                commit = wt.commit_all(
                    agent.worktree,
                    self._commit_message(agent) + "(saved at teardown)\n",
                    agent.name,
                )
            except AgentOSError as exc:  # never delete work that is not on its branch
                self._note(
                    f"could not commit {agent.name}'s work ({exc}); "
                    f"its worktree is kept at {agent.worktree}"
                )
            else:
                if commit:
                    agent.commits.append(commit)
                _remove_tree(agent.worktree)
        if self.store is not None:
            self.store.update_agent(self.run_id, agent.name, status=agent.status)

    def _tolerant(self, what: str, func: Callable[..., Any], *args: Any) -> Any:
        """Run one teardown step; a failure is noted in the run's message, not raised."""
        try:
            return func(*args)
        except AgentOSError as exc:
            self._note(f"teardown could not {what}: {exc}")
            return None

    def _note(self, note: str) -> None:
        self.emit(note)
        self.report.message = f"{self.report.message}; {note}".lstrip("; ")

    def _final_receipt(self) -> None:
        fields = {
            "status": self.report.status,
            "message": self.report.message,
            "repo": str(self.repo),
            "target": self.target,
            "base": self.base,
            "agents": [
                {
                    k: a[k]
                    for k in (
                        "agent",
                        "version",
                        "card",
                        "branch",
                        "status",
                        "attempts",
                        "exit_code",
                        "commits",
                        "gated_commit",
                        "receipts",
                        "output_tail",
                    )
                }
                for a in self.report.agents
            ],
            "kept_branches": [
                a["branch"] for a in self.report.agents if wt.branch_exists(self.repo, a["branch"])
            ],
        }
        receipt = write_receipt(self.ws, "run", fields, run_id=self.run_id)
        self.report.receipts.append(receipt.id)
        if self.store is not None:
            self.store.close()


def _tail(path: Path, limit: int) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _cancel_on_signal(defer: Callable[[], bool]) -> AbstractContextManager[None]:
    """Turn SIGTERM (and SIGHUP) into :class:`Cancelled` while a run is in progress, except
    while ``defer()`` holds (a merge in progress finishes rather than being cut short)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if not defer():
            raise Cancelled()

    return handling(handler, signal.SIGTERM, signal.SIGHUP)
