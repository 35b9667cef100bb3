"""The ephemeral orchestrator: one run, from a request to merged branches, then gone.

interview -> route (receipt) -> for each selected agent: a worktree on its own branch, the
knowledge store's context, a tmux session running the agent -> the gate (failures
fed back, retried) -> merge, all or nothing -> teardown, always: sessions ended, work
committed to its branch, worktrees removed. Every step that decides something is a receipt.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

from agentos.errors import (
    AgentOSError,
    BadInput,
    EnvironmentBroken,
    StateUnavailable,
    check_request,
)
from agentos.gate.detect import SETTINGS_HINT
from agentos.gate.environment import gate_environment, missing_programs
from agentos.gate.judge import TestChanges, reported_outcome
from agentos.gate.prepare import IgnoredFiles
from agentos.gate.repo import (
    COLLECT_TIMEOUT,
    REPO_FILE,
    RepoProfile,
    asked,
    check_profile,
    repo_profile,
)
from agentos.gate.runner import run_judging
from agentos.gate.selection import collect_checks
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.receipts import write_receipt
from agentos.routing.router import VERIFY_GROUP
from agentos.run import review
from agentos.run.dispatch import Dispatch, DispatchFactory
from agentos.run.driver import AgentDriver, RunContext, commit_message
from agentos.run.events import EventKind, EventLog, Listener, RunEvent
from agentos.run.liveness import keep_alive
from agentos.run.preflight import check_agent, check_repo
from agentos.run.sessions import Sessions, require_tmux, session_name
from agentos.run.store import ACTIVE, UNFINISHED, AgentStatus, RunStatus, RunStore, new_run_id
from agentos.run.values import AgentState, Cancelled, RunOptions, RunReport
from agentos.runtimes import get_runtime
from agentos.sandbox import Sandbox, choose
from agentos.sandbox.confine import Scene, venv_paths
from agentos.shared.checks import CheckSpec
from agentos.shared.signals import handling
from agentos.workspace.files import RunFiles
from agentos.workspace.layout import Workspace
from agentos.worktrees import landing
from agentos.worktrees import repo as wt
from agentos.worktrees.guard import GitGuard, restore_git_admin

__all__ = [
    "Orchestrator",
    "RunOptions",
    "RunReport",
    "check_agent",
    "check_repo",
    "start_run",
]

CONTEXT_BUDGET = 3000  # tokens of knowledge-store context per agent

# Called once agents are about to start: makes sure something watches them (the CLI and
# the MCP server pass the guardian's ``ensure_running``); True when it started a watcher.
Supervisor = Callable[[Workspace], bool]


def start_run(
    ws: Workspace,
    request: str,
    repo: Path,
    options: RunOptions | None = None,
    *,
    force: bool = False,
    on_event: Listener | None = None,
    supervise: Supervisor | None = None,
    stop: threading.Event | None = None,
    dispatch: DispatchFactory | None = None,
) -> RunReport:
    """Run ``request`` against ``repo`` from start to teardown; the report says how it went.
    ``force=True`` is short for ``RunOptions(force=True)``. ``on_event`` gets each of the
    run's events as it happens (they are also in the run's events file, see
    :mod:`agentos.run.events`); ``supervise`` is called before the agents start, unless
    ``run.guardian`` is off. Setting ``stop`` cancels the run while its agents work (a run
    started in a thread of a process that runs several, as the workflow scheduler does).
    ``dispatch`` drives the agents elsewhere (:mod:`agentos.run.dispatch`; a cluster's);
    by default they work on this machine."""
    options = options or RunOptions(force=force)
    return Orchestrator(
        ws,
        request,
        repo,
        options,
        on_event=on_event,
        supervise=supervise,
        stop=stop,
        dispatch=dispatch,
    ).run()


class Orchestrator:
    def __init__(
        self,
        ws: Workspace,
        request: str,
        repo: Path,
        options: RunOptions | None = None,
        *,
        on_event: Listener | None = None,
        supervise: Supervisor | None = None,
        stop: threading.Event | None = None,
        dispatch: DispatchFactory | None = None,
    ) -> None:
        check_request(request)
        self.stop = stop
        self.dispatch = dispatch
        self._dispatcher: Dispatch | None = None
        self.ws = ws
        self.request = request
        self.repo = repo.expanduser().resolve()
        self.options = options or RunOptions()
        self.force = self.options.force
        self.run_id = self.options.run_id or new_run_id()
        self.files = RunFiles.of(ws, self.run_id)
        self.events = EventLog(self.run_id, self.files.events, on_event, self._store_event)
        self.emit = self.events.note
        self.supervise = supervise
        self.report = RunReport(self.run_id, RunStatus.PENDING)
        self._report_lock = threading.Lock()  # teardown threads add notes to the message
        self.agents: list[AgentState] = []
        self.cancel = threading.Event()
        self.cancel_asked = threading.Event()  # another host asked (agentos.run.liveness)
        self.lost: StateUnavailable | None = None  # the state, lost mid-run
        self.losing: StateUnavailable | None = None  # ... as the heartbeat found it
        self.request_checks: list[Any] = []  # checks the request's own success criteria imply
        self.option_checks = _option_checks(self.options.checks)  # e.g. a workflow phase's
        _check_option_env(self.options.env)
        self.sessions = Sessions(ws.root)
        self.store: RunStore | None = None
        self.base = ""
        self.target = ""
        self.profile: RepoProfile | None = None
        self._asking: Future[RepoProfile] | None = None  # the profile, python3 asked
        self.sandbox: Sandbox = Sandbox("none", None, "not chosen yet")
        self.scene: Scene | None = None
        self.guard: GitGuard | None = None
        self.git_admin_restored: list[str] = []
        self._kept_tips: dict[str, str] | None = None  # the branches the teardown kept
        self.named: tuple[str, ...] = ()  # what the request names (the interview's)
        self.allow = (  # the test changes the agents may make
            TestChanges(True, (), "--allow-test-changes")
            if self.options.allow_test_changes
            else TestChanges()
        )

    def _store_event(self, event: RunEvent) -> None:
        if self.store is not None:
            self.store.record_event(
                "run",
                event.kind,
                event.message,
                run=event.run,
                seq=event.seq,
                agent=event.agent,
                status=event.status,
                at=event.at,
            )

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> RunReport:
        from agentos.run.gc import collect_garbage

        self.store = RunStore(self.ws)  # gc's too: one connection to the state, not two
        try:
            collect_garbage(self.ws, self.store)
            self.target, self.base = check_repo(self.repo)
            check_agent(self.ws, self.options.agent)
        except BaseException:
            self.store.close()
            raise
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
            with (
                _cancel_on_signal(defer=lambda: self.report.status is RunStatus.MERGING),
                keep_alive(self.ws, self.run_id, self.cancel_asked.set, self._losing),
            ):
                self._run()
        except (Cancelled, KeyboardInterrupt):
            self._finish(
                RunStatus.CANCELLED,
                "the run was cancelled; agents' work is kept on their branches",
            )
        except StateUnavailable as exc:  # lost mid-run: the run still ends, and says so
            self._lose(exc)
        except AgentOSError as exc:
            self._finish(RunStatus.FAILED, str(exc))
            raise
        finally:
            if self.report.status in ACTIVE:
                self._finish(RunStatus.FAILED, self.report.message or "the run ended unexpectedly")
            try:
                self._teardown()  # always: whatever ended the run
            finally:
                self._final_receipt()
        return self.report

    def _run(self) -> None:
        # Whether a plain python3 has pytest (asking starts it: ~100 ms where its answer
        # cannot be kept) changes a problem, never the command: it is asked beside the
        # run, and waited for where the tests must run, before the merge, and at the end of
        # a run that stopped early, for the report. A run that is cancelled or fails takes
        # the answer only if it is in: it never waits for an interpreter.
        asking = ThreadPoolExecutor(max_workers=1)
        try:
            self._steps(asking)
            if self._asking is not None:
                self._profile_asked()
        finally:
            if self._asking is not None and self._asking.done() and not self._asking.exception():
                self._profile_asked()
            asking.shutdown(wait=False, cancel_futures=True)

    def _steps(self, asking: ThreadPoolExecutor) -> None:
        # What does not depend on each other runs side by side: how the repository is
        # tested is found while the request is interviewed and routed, and the knowledge
        # store's context is built while the agents' worktrees and sessions are set up.
        with ThreadPoolExecutor(max_workers=1) as beside:
            profiled = beside.submit(repo_profile, self.ws, self.repo, at=self.base, ask=False)
            if not self._interview():
                return
            self.profile = profiled.result()
            self._asking = asking.submit(asked, self.profile, self.ws)
            self.report.repo_profile = self.profile
            self.emit(f"repository: tests run with `{self.profile.test}` ({self.profile.tool})")
            if not self._route():
                return
            self._confinement()
            require_tmux()
            first = self._changers() or self._verifiers()
            contextual = beside.submit(self._context)
            self._in_parallel(self._driver().setup, first)
            self._check_environment(self._driver().tree_at_base(first))
            self._ensure_guardian()
            context = contextual.result()
        self._set_status(RunStatus.RUNNING)
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
        self._store_gate()
        self._drive_all(context)
        self._profile_asked()  # in long since: the run's report is complete before it ends
        if not all(a.status is AgentStatus.PASSED for a in self.agents):
            failed = ", ".join(
                f"{a.name} ({a.status})" for a in self.agents if a.status is not AgentStatus.PASSED
            )
            self._finish(RunStatus.FAILED, f"not done: {failed}; nothing was merged")
        elif self.git_admin_restored:
            self._keep_option("no_merge", "its agents changed the repository's git administration")
            self._finish(
                RunStatus.FAILED,
                "the repository's git administration was changed while the agents ran "
                f"without a sandbox ({', '.join(self.git_admin_restored)}); it was put back "
                "and nothing was merged",
            )
        elif not self.options.merge:
            self._ready("not merged (--no-merge)")
        elif touched := [
            a.name
            for a in self.agents
            if a.gated_commit not in (None, a.base)
            and wt.touches(self.repo, a.base, a.gated_commit, REPO_FILE)
        ]:
            # How the repository is tested is not an agent's to change unseen.
            self._ready(f"not merged: {', '.join(touched)} changed {REPO_FILE}, review it")
        else:
            self._merge()

    # -- steps -----------------------------------------------------------------------------

    def _interview(self) -> bool:
        """Score the request; a blocked one stops the run unless forced. The success
        criteria it states become checks of this run (``proposed_checks``)."""
        from agentos.interview.engine import interview_in

        result = interview_in(self.ws, self.request)
        self.report.interview = result
        self.request_checks = list(result.proposed_checks)
        self.named = tuple(result.named)
        if result.test_changes is not None:
            asked = result.test_changes
            self.allow = self.allow.joined(
                TestChanges(not asked.paths, asked.paths, f"the request: {asked.words!r}")
            )
            self.emit(f"the request allows test changes ({asked.words!r})")
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
        questions = " ".join(q.text for q in result.questions)
        self._finish(RunStatus.BLOCKED, f"the request is too vague to start: {questions}")
        return False

    def _route(self) -> bool:
        """Decide the task force (the cards, ``--agent`` or ``run.default_agent``) and
        plan each agent: its package, verified against hub.lock; its runtime's needs;
        its checks. False when nothing is to run."""
        from agentos.routing.router import route

        interview = self.report.interview
        change = interview is not None and not interview.read_only
        decision, receipt = route(
            self.ws, self.request, run_id=self.run_id, agent=self.options.agent, change=change
        )
        self.report.decision = decision
        self.report.receipts.append(receipt.id)
        assert self.store is not None
        self.store.update(self.run_id, decision=decision.decision, receipt=receipt.id)
        chosen = (
            f"{s.agent}@{s.version} (card {s.card}, score {s.score})"
            if decision.decided_by == "cards"
            else f"{s.agent}@{s.version}"
            for s in decision.selected
        )
        self.emit(f"decision: {decision.decision} by {decision.decided_by}: " + ", ".join(chosen))
        if decision.decision != "route":
            reason = (
                "cards tie: " + ", ".join(decision.tied)
                if decision.decision == "clarify"
                else "no routing card matches the request (set run.default_agent in "
                "agentos.yaml, or pick one with --agent)"
            )
            self._finish(RunStatus(decision.decision), reason)
            return False
        hub = Hub(self.ws.hub_dir)
        for sel in decision.selected:
            info, manifest = hub.get(f"{sel.agent}@{sel.version}")
            hub.check_intact(sel.agent, sel.version)
            get_runtime(manifest.runtime).preflight(manifest, info.path)
            checks = collect_checks(
                self.ws,
                package=manifest,
                card_checks=[*sel.checks, *self.request_checks, *self.option_checks],
            )
            agent = self._plan_agent(sel.card, manifest, info.path, checks)
            agent.verifier = sel.group == VERIFY_GROUP or not manifest.changes
            self.agents.append(agent)
        if change and not self._changers():
            names = ", ".join(a.name for a in self.agents)
            self.agents = []  # none starts: an agent that changes nothing cannot do it
            self._finish(
                RunStatus.NO_MATCH,
                f"no agent that changes code matched the request, only {names}, which "
                "changes nothing: set run.default_agent in agentos.yaml, or pick one with "
                "--agent",
            )
            return False
        return True

    def _confinement(self) -> None:
        """The sandbox every agent and check of the run goes through (agentos.sandbox):
        none usable and required is bad input (exit 2) before anything starts."""
        assert self.profile is not None
        settings = self.ws.settings.sandbox
        self.sandbox = choose(settings)
        self.scene = Scene(
            settings,
            self.ws.root,
            self.repo,
            Path(os.environ.get("HOME", "/")),
            tuple(venv_paths(self.profile.venv, self.profile.python)),
        )
        self.emit(f"sandbox: {self.sandbox.reason}")
        if self.sandbox.backend == "none":
            # Nothing keeps an agent out of the repository's git directory: what it changes
            # there is put back after each attempt (agentos.worktrees.guard).
            self.guard = GitGuard.take(wt.git_dir(self.repo))

    def _changers(self) -> list[AgentState]:
        """The agents that change code; they work first, in parallel."""
        return [a for a in self.agents if not a.verifier]

    def _verifiers(self) -> list[AgentState]:
        """The agents that only verify; with changers, they start on their integrated work."""
        return [a for a in self.agents if a.verifier]

    def _profile_asked(self) -> RepoProfile:
        """The run's profile with plain python3's answer, once it is in (the agents'
        drivers keep the profile they were given: only check_profile reads that answer,
        and it asks for itself)."""
        if self._asking is not None:
            self.profile = self.report.repo_profile = self._asking.result()
            self._asking = None
        assert self.profile is not None
        return self.profile

    def _check_environment(self, tree: Path) -> None:
        """Prove before any agent starts that the run's checks can run: every shell
        check's program is installed, and when the checks include the repository's tests,
        the interpreter exists, the test command starts and the suite collects, in a
        worktree at the base commit (the repository as committed, before any agent worked
        on it). What fails here is the environment's fault, never an agent's: the run stops
        (exit 2) with the fix, and no attempt is spent on it."""
        assert self.profile is not None
        checks = [c for agent in self.agents for c in agent.checks]
        missing = missing_programs(checks, gate_environment(self.profile, tree))
        if missing:
            raise EnvironmentBroken(
                "the run's checks cannot run here, so no agent was started: " + "; ".join(missing),
                file=self.repo,
                field="checks",
            )
        tests = [c for c in checks if c.kind == "tests"]
        if not tests:
            return
        problems = check_profile(self._profile_asked(), tree, collect=False)
        if not problems:
            problems = self._collect_base(tree, tests)
        if problems:
            raise EnvironmentBroken(
                "the repository's tests cannot run, so no agent was started: "
                + "; ".join(problems),
                file=self.repo,
                field="tests",
            )

    def _collect_base(self, tree: Path, tests: list[CheckSpec]) -> list[str]:
        """The base's tests as its own command collects them, once for every gate of the
        run (kept in the workspace's cache): a suite that does not start or collect is the
        environment's problem, said before any agent starts."""
        from agentos.gate.environment import tests_timeout
        from agentos.gate.repo import collection_problems
        from agentos.gate.runner import base_collection
        from agentos.sandbox.confine import CheckConfiner

        assert self.profile is not None and self.scene is not None
        env = gate_environment(self.profile, tree)
        judging = run_judging(self.ws, self.run_id, "_base", self.base)
        timeout = max(tests_timeout(c, self.profile) for c in tests)
        info = base_collection(
            self.profile,
            judging,
            env,
            CheckConfiner(self.sandbox, self.scene, tree, env["PATH"]),
            min(timeout, COLLECT_TIMEOUT),
            self.cancel,
        )
        if info.collected is None:
            # The recorder saw no Python test runner: the runner's own dry run decides
            # whether the suite starts; the gate then has the exit code only.
            problems = check_profile(self.profile, tree)
            if not problems:
                self.emit(
                    "repository: the test command starts; its tests cannot be recorded one by "
                    "one (the gate has its exit code only)"
                )
            return problems
        collect = f"{self.profile.test} (collecting)"
        if info.collect_errors or not info.collected:
            outcome = reported_outcome(info)
            problems = collection_problems(self.profile, outcome, tree, collect)
            return problems or [
                f"the suite collects no tests at the base (`{collect}`): {SETTINGS_HINT}"
            ]
        self.emit(
            f"repository: the suite collects {len(info.collected)} tests at the base "
            f"({self.base[:12]})"
        )
        return []

    def _ensure_guardian(self) -> None:
        """Start the workspace's guardian unless one runs (``run.guardian``, the default)."""
        if not self.ws.settings.run.guardian or self.supervise is None:
            return
        try:
            if self.supervise(self.ws):
                self.emit("guardian: started for this workspace")
        except AgentOSError as exc:  # the run goes on unwatched rather than not at all
            self.emit(f"guardian: could not start ({exc}); the run is not watched")

    def _context(self) -> str:
        from agentos.knowledge.store import open_store

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
            files=self.files.agent(name),
            base=self.base,
        )

    def _driver(self) -> Dispatch:
        """What drives the agents: here (:class:`AgentDriver`), or the dispatch the caller
        handed in (:mod:`agentos.run.dispatch`); one for the run."""
        if self._dispatcher is not None:
            return self._dispatcher
        assert self.profile is not None and self.store is not None and self.scene is not None
        self._dispatcher = (self.dispatch or AgentDriver)(
            RunContext(
                self.ws,
                self.run_id,
                self.request,
                self.repo,
                self.base,
                self.profile,
                self.sessions,
                self.store,
                self.cancel,
                self.events,
                self.report.receipts,
                self.sandbox,
                self.scene,
                self.guard,
                self.git_admin_restored,
                dict(self.options.env),
                self.named,
                self.allow,
                ignored=IgnoredFiles(self.repo),
            )
        )
        return self._dispatcher

    def _drive_all(self, context: str) -> None:
        """The agents that change code, in parallel; then, when they all passed, the
        verifiers, on the integration of their work (never on the unchanged base)."""
        driver = self._driver()
        changers, verifiers = self._changers(), self._verifiers()
        self._in_parallel(lambda agent: driver.drive(agent, context), changers or verifiers)
        if not (changers and verifiers):
            return
        if not all(a.status is AgentStatus.PASSED for a in changers):
            for agent in verifiers:
                agent.status = AgentStatus.CANCELLED
                self.events.emit(
                    EventKind.AGENT,
                    f"{agent.name}: not started: the agents that change code did not pass",
                    status=agent.status,
                    agent=agent.name,
                )
            return
        integrated = self._integrate(changers)
        if integrated is None:
            return
        for agent in verifiers:
            agent.base = integrated
        self.emit(
            f"verifiers start on the integrated work of {', '.join(a.name for a in changers)} "
            f"({integrated[:12]})"
        )
        self._in_parallel(driver.setup, verifiers)
        self._in_parallel(lambda agent: driver.drive(agent, context), verifiers)

    def _integrate(self, changers: list[AgentState]) -> str | None:
        """The passing work of the agents that change code, squashed onto the base without
        moving any branch (kept under the run's refs): the verifiers' base. None when their
        work conflicts (then they do not start)."""
        landings = [
            landing.Landing(a.branch, a.gated_commit or a.base, a.name, a.name) for a in changers
        ]
        result = landing.integrate(
            self.repo,
            self.base,
            landings,
            self.run_id,
            self.ws.worktrees_dir / self.run_id / wt.MERGE_DIR,
            landing.integrated_ref(self.run_id),
        )
        if not result.merged:
            for agent in self._verifiers():
                agent.status = AgentStatus.CANCELLED
            self.emit(f"verifiers not started: {result.message}")
            return None
        return result.commit

    def _in_parallel(
        self, step: Callable[[AgentState], None], agents: list[AgentState] | None = None
    ) -> None:
        """``step`` for every agent (of ``agents``), one thread each; the first failure
        cancels the rest."""
        todo = self.agents if agents is None else agents
        if not todo:
            return
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            futures = [pool.submit(step, agent) for agent in todo]
            try:
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                    for fut in done:
                        fut.result()
                    if (self.stop is not None and self.stop.is_set()) or self.cancel_asked.is_set():
                        raise Cancelled()
                    if self.losing is not None:
                        raise self.losing
            except BaseException:
                self.cancel.set()
                raise

    def _merge(self) -> None:
        """Land exactly the commits the gates passed, squashed, all or nothing, once the
        checks pass on the tree that lands (the integration gate)."""
        self._set_status(RunStatus.MERGING)
        work = [a.work() for a in self.agents if a.lands]
        result = review.land(
            self.ws,
            self.repo,
            self.target,
            self.run_id,
            self.request,
            work,
            gate=review.integration_gate(
                self.ws, self.repo, self.run_id, self._gate_spec(), [w.agent for w in work]
            ),
        )
        if result.gate is not None and result.gate.receipt:
            self.report.receipts.append(result.gate.receipt)
        self.report.merge = review.merge_fields(result, self.target, work, "agentos run")
        receipt = write_receipt(
            self.ws, "merge", self.report.merge, run_id=self.run_id, about=self.request
        )
        self.report.receipts.append(receipt.id)
        self.emit(f"merge: {result.message}")
        if result.merged:
            self._finish(RunStatus.SUCCEEDED, result.message)
        elif result.gate is not None and not result.gate.passed:
            self._finish(RunStatus.FAILED, result.message + "; every branch is kept")
        else:
            self._finish(RunStatus.CONFLICT, result.message + "; every branch is kept")

    def _gate_spec(self) -> review.GateSpec:
        """What the integration gate runs: every agent's checks but those that judge one
        agent's own diff, with the request's named things and allowed test changes."""
        return review.GateSpec.of([a.checks for a in self.agents], self.named, self.allow)

    def _store_gate(self) -> None:
        """The integration gate's checks, kept with the run for `runs merge` later."""
        self._keep_option("gate", self._gate_spec().as_json())

    def _keep_option(self, key: str, value: object) -> None:
        assert self.store is not None
        options = dict(self.store.get(self.run_id).options or {})
        options[key] = value
        self.store.update(self.run_id, options=options)

    def _ready(self, why: str) -> None:
        """Every gate passed, and the work waits on its branches for review (``--no-merge``,
        or a change that must not land unseen)."""
        for agent in self.agents:
            assert agent.gated_commit is not None
            stat = wt.diff(self.repo, agent.base, agent.gated_commit, stat=True)
            self.report.diffstat[agent.name] = stat
            self.emit(f"{agent.name}: {agent.branch}\n{stat.rstrip() or '(no changes)'}")
        self._finish(
            RunStatus.READY,
            f"every gate passed; {why}: review with `agentos runs diff "
            f"{self.run_id}`, then `agentos runs merge {self.run_id}` or `agentos runs "
            f"discard {self.run_id}`",
        )

    # -- the end ---------------------------------------------------------------------------

    def _set_status(self, status: RunStatus) -> None:
        self.report.status = status
        if self.store is not None:
            self.store.update(self.run_id, status=status)
        self.events.emit(EventKind.PHASE, f"run: {status}", status=status)

    def _finish(self, status: RunStatus, message: str) -> None:
        with self._report_lock:
            self.report.status = status
            self.report.message = message
        self._record(self.run_id, status=status, message=message, ended_at=time.time())
        self.events.emit(EventKind.PHASE, f"run: {status}: {message}", status=status)

    def _record(self, run_id: str, agent: str | None = None, **fields: Any) -> None:
        """Record how the run (or ``agent``) ended; with the state lost, the run ends all
        the same (its agents stopped, their work on their branches) and says so."""
        if self.store is None or self.lost is not None:
            return
        try:
            if agent is None:
                self.store.update(run_id, **fields)
            else:
                self.store.update_agent(run_id, agent, **fields)
        except StateUnavailable as exc:
            self._lose(exc)

    def _losing(self, exc: StateUnavailable) -> None:
        """The heartbeat found the state out of reach past its retry window: the agents
        are stopped at the next look (:meth:`_in_parallel`)."""
        self.losing = exc

    def _lose(self, exc: StateUnavailable) -> None:
        """The state went away and did not come back within its retry window: what is
        left of the run (teardown) goes on without it."""
        if self.lost is None:
            self.lost = exc
        self.events.sink = None  # the stream is in the state: the events file keeps them
        with self._report_lock:
            self.report.status = RunStatus.FAILED
            self.report.message = (
                f"the state was lost mid-run ({exc}); the run stopped its agents, and their "
                "work is kept on their branches"
            )
        self.events.emit(EventKind.PHASE, f"run: failed: {self.report.message}", status="failed")

    def _teardown(self) -> None:
        """End sessions, keep the work on branches, remove worktrees; always. A step that
        fails is reported and the others still run; the run's files (env files hold
        secrets) go whatever happens."""
        try:
            self._teardown_steps()
        finally:
            _remove_tree(self.files.run_dir)
            _remove_tree(self.ws.state_dir / "gate" / self.run_id)

    def _teardown_steps(self) -> None:
        self.cancel.set()
        if self.agents:
            with ThreadPoolExecutor(max_workers=len(self.agents)) as pool:
                list(pool.map(self._teardown_agent, self.agents))
            if self._dispatcher is not None:
                self._tolerant("end the agents' dispatch", self._dispatcher.close)
            if self.guard is not None:
                restored = self._tolerant(
                    "check git's configuration", restore_git_admin, self.guard, self.repo
                )
                if restored:
                    self.git_admin_restored += restored
                    self._note(
                        "an agent changed the repository's git administration; restored: "
                        + ", ".join(restored)
                    )
            self._tolerant("prune worktrees", wt.prune, self.repo)
            # Every agent worked and none committed anything: their branches go if each is
            # still at its base (one compare-and-delete for all), and none is kept.
            bases = {a.branch: a.base for a in self.agents if a.branch and a.base}
            if (
                len(bases) == len(self.agents)
                and all(a.attempts for a in self.agents)
                and not any(a.commits for a in self.agents)
                and self._tolerant("delete empty branches", wt.delete_unmoved, self.repo, bases)
            ):
                self._kept_tips = {}
            else:
                self._delete_empty_branches()
        self.report.agents = [agent.result() for agent in self.agents]
        with suppress(OSError):  # gone unless a worktree had to be kept
            (self.ws.worktrees_dir / self.run_id).rmdir()

    def _delete_empty_branches(self) -> None:
        """The agents' branches that hold no work deleted, the merged ones archived."""
        # A branch still at its base holds no work (one at another commit is kept, even
        # one behind its base: nothing is deleted that could hold work).
        # git cannot tell: none is deleted.
        tips = self._tolerant(
            "read the agents' branches",
            wt.branch_tips,
            self.repo,
            [a.branch for a in self.agents],
        )
        empty = [
            a for a in self.agents if tips is not None and tips.get(a.branch, a.base) == a.base
        ]
        deleted = self._tolerant(
            "delete empty branches", wt.delete_branch, self.repo, *(a.branch for a in empty)
        )
        others = {a.branch: tips[a.branch] for a in self.agents if tips and a not in empty}
        succeeded = self.report.status is RunStatus.SUCCEEDED
        if tips is not None and deleted and not (others and succeeded):
            # What git said before it deleted the empty ones is what stays: the run's
            # receipt need not ask again.
            self._kept_tips = {b: t for b, t in others.items() if t}
        if self.report.status is RunStatus.SUCCEEDED:  # merged: attempts kept out of sight
            self._tolerant(
                "archive merged branches",
                review.archive_branches,
                self.repo,
                self.run_id,
                [(a.name, a.branch) for a in self.agents if a not in empty],
            )

    def _teardown_agent(self, agent: AgentState) -> None:
        """End the session, commit what is left, delete the worktree's files (the caller
        prunes the registrations once, then deletes branches)."""
        running = agent.files.exit_code() is None
        self.sessions.kill(agent.session, agent.pane_pid if running else None)
        if agent.tools is not None:
            self._tolerant(f"stop {agent.name}'s MCP tools", agent.tools.stop)
        if agent.egress is not None:
            agent.egress.close()
        ended = agent.status in UNFINISHED
        if ended:
            agent.status = (
                AgentStatus.CANCELLED
                if self.report.status is RunStatus.CANCELLED
                else AgentStatus.FAILED
            )
        if agent.worktree.exists():
            try:
                wt.restore_gitfile(self.repo, agent.worktree)
                commit = wt.commit_all(
                    agent.worktree,
                    commit_message(self.run_id, self.request, agent) + "(saved at teardown)\n",
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
        self._record(self.run_id, agent.name, status=agent.status)
        if ended:  # recorded first: whoever the event wakes reads the agent's new status
            self.events.emit(
                EventKind.AGENT,
                f"{agent.name}: {agent.status}",
                status=agent.status,
                agent=agent.name,
            )

    def _tolerant(self, what: str, func: Callable[..., Any], *args: Any) -> Any:
        """Run one teardown step; a failure is noted in the run's message, not raised."""
        try:
            return func(*args)
        except AgentOSError as exc:
            self._note(f"teardown could not {what}: {exc}")
            return None

    def _note(self, note: str) -> None:
        self.emit(note)
        with self._report_lock:
            self.report.message = f"{self.report.message}; {note}".lstrip("; ")

    def _final_receipt(self) -> None:
        try:
            kept = self._kept_tips
            if kept is None:
                kept = wt.branch_tips(self.repo, (a.branch for a in self.report.agents))
        except AgentOSError:  # git cannot tell: every branch is said to be kept
            kept = {a.branch: "" for a in self.report.agents}
        fields = {
            "status": self.report.status,
            "message": self.report.message,
            "repo": str(self.repo),
            "target": self.target,
            "base": self.base,
            "sandbox": self.sandbox.backend,
            "agents": [
                {
                    k: v
                    for k, v in a.as_dict().items()
                    if k
                    in (
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
                        "sandbox",
                        "limit",
                        "output_tail",
                    )
                }
                for a in self.report.agents
            ],
            **({"git_admin_restored": self.git_admin_restored} if self.git_admin_restored else {}),
            "kept_branches": [a.branch for a in self.report.agents if a.branch in kept],
        }
        if self.lost is not None:
            branches = [a.branch for a in self.report.agents if a.branch in kept]
            self._note(f"branches kept: {', '.join(branches) or 'none'}")
        try:
            receipt = write_receipt(self.ws, "run", fields, run_id=self.run_id, about=self.request)
            self.report.receipts.append(receipt.id)
        except StateUnavailable as exc:  # the receipts are in the state (PostgreSQL)
            self._note(f"the run's final receipt could not be written ({exc})")
        if self.store is not None:
            self.store.close()


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


_OPTION_ENV = re.compile(r"^AGENTOS_[A-Z0-9_]+$")


def _option_checks(raw: list[dict[str, Any]]) -> list[CheckSpec]:
    """The run's extra checks, validated (one line naming the check)."""
    from pydantic import ValidationError

    from agentos.shared.models import all_errors

    out = []
    for i, data in enumerate(raw):
        try:
            out.append(CheckSpec.model_validate(data))
        except ValidationError as exc:
            field, message = all_errors(exc)[0]
            raise BadInput(f"{field}: {message}", field=f"checks[{i}]") from None
    return out


def _check_option_env(env: dict[str, str]) -> None:
    for name, value in env.items():
        if not _OPTION_ENV.match(name) or not isinstance(value, str) or "\x00" in value:
            raise BadInput(f"{name!r}: only AGENTOS_* variables with text values", field="env")
