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

from agentos import worktrees as wt
from agentos._launch import AgentFiles, prepare
from agentos._signals import handling
from agentos.errors import AgentOSError, BadInput
from agentos.hub import Hub
from agentos.manifest import Manifest
from agentos.receipts import write_receipt
from agentos.runs import ACTIVE, RunStore, new_run_id
from agentos.runtimes import AgentTask, get_runtime
from agentos.sessions import Sessions, require_tmux, session_name
from agentos.stormbreaker import GateResult, collect_checks, gate_receipt_fields, run_gate
from agentos.workspace import Workspace

CONTEXT_BUDGET = 3000  # tokens of knowledge-store context per agent
POLL = 0.05
SESSION_CHECK_EVERY = 0.5
OUTPUT_TAIL = 2000

Event = Callable[[str], None]


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C, SIGTERM, `agentos runs cancel`)."""


@dataclass
class AgentState:
    card: str
    manifest: Manifest
    package_dir: Path
    card_checks: list[Any]
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

    @property
    def name(self) -> str:
        return self.manifest.name

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

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "succeeded" else 1

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
        }


def start_run(
    ws: Workspace,
    request: str,
    repo: Path,
    *,
    force: bool = False,
    run_id: str | None = None,
    on_event: Event | None = None,
) -> RunReport:
    """Run ``request`` against ``repo`` from start to teardown; the report says how it went."""
    return Orchestrator(ws, request, repo, force=force, run_id=run_id, on_event=on_event).run()


def start_detached(
    ws: Workspace, request: str, repo: Path, *, force: bool = False
) -> tuple[str, Path]:
    """Start a run in a background process; returns its id and the orchestrator's log.

    The run is in state.db (and visible to ``runs show``) as soon as its orchestrator has
    checked the repository, within a second or so.
    """
    if not request.strip():
        raise BadInput("the request is empty", field="REQUEST")
    repo = repo.expanduser().resolve()
    check_repo(repo)  # what would stop the run stops it here, where the caller sees it
    run_id = new_run_id()
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
    if force:
        argv.append("--force")
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


class Orchestrator:
    def __init__(
        self,
        ws: Workspace,
        request: str,
        repo: Path,
        *,
        force: bool = False,
        run_id: str | None = None,
        on_event: Event | None = None,
    ) -> None:
        if not request.strip():
            raise BadInput("the request is empty", field="REQUEST")
        self.ws = ws
        self.request = request
        self.repo = repo.expanduser().resolve()
        self.force = force
        self.run_id = run_id or new_run_id()
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

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> RunReport:
        from agentos.gc import collect_garbage

        collect_garbage(self.ws)
        self.target, self.base = check_repo(self.repo)
        self.store = RunStore(self.ws)
        self.store.create(self.run_id, self.request, self.repo)
        self.store.update(
            self.run_id, target_branch=self.target, base_commit=self.base, started_at=time.time()
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
        from agentos.router import route

        decision, receipt = route(self.ws, self.request, run_id=self.run_id)
        self.report.decision = decision.as_dict()
        self.report.receipts.append(receipt.id)
        assert self.store is not None
        self.store.update(self.run_id, decision=decision.decision, receipt=receipt.id)
        self.emit(
            f"decision: {decision.decision} "
            + ", ".join(
                f"{s.agent}@{s.version} ({s.card}, score {s.score})" for s in decision.selected
            )
        )
        if decision.decision != "route":
            reason = (
                "cards tie: " + ", ".join(decision.tied)
                if decision.decision == "clarify"
                else "no routing card matches the request"
            )
            self._finish(decision.decision, reason)
            return
        hub = Hub(self.ws.hub_dir)
        for sel in decision.selected:
            info, manifest = hub.get(f"{sel.agent}@{sel.version}")
            get_runtime(manifest.runtime).preflight(manifest, info.path)
            self.agents.append(
                self._plan_agent(sel.card, manifest, info.path, [*sel.checks, *self.request_checks])
            )
        require_tmux()
        self._ensure_guardian()
        context = self._context()
        self._set_status("running")
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
        if all(a.status == "passed" for a in self.agents):
            self._merge()
        else:
            failed = ", ".join(
                f"{a.name} ({a.status})" for a in self.agents if a.status != "passed"
            )
            self._finish("failed", f"not done: {failed}; nothing was merged")

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
        self, card: str, manifest: Manifest, package_dir: Path, card_checks: list[Any]
    ) -> AgentState:
        name = manifest.name
        return AgentState(
            card=card,
            manifest=manifest,
            package_dir=package_dir,
            card_checks=card_checks,
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
        """One agent: its worktree, then attempts: start, wait for its exit file, commit,
        gate, retry. Agents are driven in parallel, one thread each."""
        assert self.store is not None
        wt.add_worktree(
            self.repo,
            agent.worktree,
            agent.branch,
            self.base,
            sparse_paths=agent.manifest.paths or None,
            admin_lock=self._git_admin,
        )
        agent.worktree.joinpath("AGENTOS_CONTEXT.md").write_text(context, encoding="utf-8")
        retries = self.ws.settings.run.retries
        checks = collect_checks(self.ws, package=agent.manifest, card_checks=agent.card_checks)
        agent.started_at = time.time()
        while agent.attempts <= retries and not self.cancel.is_set():
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
            pane, env = prepare(task, agent.files)
            agent.status = "running"
            self.store.update_agent(
                self.run_id,
                agent.name,
                status="running",
                attempts=agent.attempts,
                started_at=agent.started_at,
            )
            self.emit(
                f"{agent.name}: attempt {agent.attempts} started in tmux session {agent.session}"
            )
            agent.pane_pid = self.sessions.start(agent.session, pane, agent.worktree)
            agent.exit_code = self._wait_for_exit(agent)
            commit = wt.commit_all(agent.worktree, self._commit_message(agent), agent.name)
            if commit:
                agent.commits.append(commit)
            if agent.files.stopped.exists():
                # The guardian killed it: no gate, no retry.
                agent.status = "killed"
                self.emit(
                    f"{agent.name}: stopped by the guardian: "
                    f"{agent.files.stopped.read_text().strip()}"
                )
                break
            agent.status = "gating"
            self.store.update_agent(
                self.run_id, agent.name, status="gating", exit_code=agent.exit_code
            )
            agent.gate = run_gate(checks, agent.worktree, base=self.base, env=env)
            wt.reset_to_head(agent.worktree)  # what the checks wrote is not the agent's work
            passed = agent.exit_code == 0 and agent.gate.passed
            fields = {
                "agent": f"{agent.name}@{agent.manifest.version}",
                "exit_code": agent.exit_code,
                "accepted": passed,
                **gate_receipt_fields(agent.gate, agent.attempts),
            }
            receipt = write_receipt(self.ws, "gate", fields, run_id=self.run_id)
            self.report.receipts.append(receipt.id)
            self.emit(
                f"{agent.name}: attempt {agent.attempts} exited "
                f"{agent.exit_code}; {agent.gate.summary()}"
            )
            if passed:
                agent.status = "passed"
                break
            agent.status = "failed"
            if agent.attempts <= retries:
                agent.worktree.joinpath("AGENTOS_FEEDBACK.md").write_text(
                    self._feedback(agent), encoding="utf-8"
                )
        agent.ended_at = time.time()
        self.store.update_agent(
            self.run_id,
            agent.name,
            status=agent.status,
            exit_code=agent.exit_code,
            ended_at=agent.ended_at,
        )

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
        self._set_status("merging")
        result = wt.merge_branches(
            self.repo,
            self.target,
            [a.branch for a in self.agents],
            self.run_id,
            self.ws.worktrees_dir / self.run_id / wt.MERGE_DIR,
        )
        self.report.merge = {
            "merged": result.merged,
            "commit": result.commit,
            "conflicts": result.conflicts,
            "conflicting_branch": result.conflicting_branch,
            "message": result.message,
            "target": self.target,
        }
        receipt = write_receipt(self.ws, "merge", self.report.merge, run_id=self.run_id)
        self.report.receipts.append(receipt.id)
        self.emit(f"merge: {result.message}")
        if result.merged:
            self._finish("succeeded", result.message)
        else:
            self._finish("conflict", result.message + "; every branch is kept")

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
            merged = self.report.status == "succeeded"
            self._tolerant(
                "delete merged or empty branches",
                wt.delete_branch,
                self.repo,
                *(
                    a.branch
                    for a in self.agents
                    if merged or wt.commits_ahead(self.repo, a.branch, self.base) == 0
                ),
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
