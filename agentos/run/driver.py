"""Driving one agent of a run: its worktree, then attempts until one passes, the guardian
stops it or the retries are spent. Each attempt starts the agent in its tmux pane, waits for
the wrapper's exit file, commits the agent's work, and runs the gate on exactly that commit
(a receipt naming it). A failure the environment caused, not the agent, ends the run.

The orchestrator (:mod:`agentos.run.orchestrator`) drives the agents of a run in parallel, one
:class:`AgentDriver` call per thread, over one :class:`RunContext`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError, EnvironmentBroken
from agentos.gate.environment import gate_environment
from agentos.gate.judge import Judging, TestChanges
from agentos.gate.prepare import IgnoredFiles
from agentos.gate.repo import RepoProfile, check_profile, prepare_worktree
from agentos.gate.results import GateResult, environment_failure, gate_receipt_fields, with_failure
from agentos.gate.runner import run_gate, run_judging
from agentos.hub.manifest import Manifest
from agentos.receipts import write_receipt
from agentos.run.events import EventKind, EventLog
from agentos.run.launch import prepare
from agentos.run.outbox import keep_outbox
from agentos.run.sessions import Sessions
from agentos.run.store import AgentStatus, RunStore, process_start
from agentos.run.values import OUTPUT_TAIL, AgentState, Cancelled, tail
from agentos.runtimes import AgentTask, egress_hosts, get_runtime
from agentos.runtimes.agent_tools import AgentToolServer
from agentos.runtimes.usage import Budget, LogTail, Meter, Usage, take_usage
from agentos.sandbox import Group, Sandbox, limits_hit
from agentos.sandbox.confine import INSIDE, CheckConfiner, Scene, agent_policy, watch_writes
from agentos.sandbox.egress import Egress
from agentos.shared.dirwatch import DirWatch
from agentos.shared.fs import atomic_write
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace
from agentos.worktrees import repo as wt
from agentos.worktrees.guard import GitGuard, restore_git_admin

# Seconds between looks for an attempt's exit: from FIRST_POLL, doubled up to POLL, so that a
# short attempt is seen ending within milliseconds and a long one costs 20 looks a second.
FIRST_POLL, POLL = 0.002, 0.05
# Caches a gate run leaves are not worth telling an agent about.
_CACHE = re.compile(r"(^|/)(__pycache__|\.pytest_cache|\.mypy_cache|\.ruff_cache)(/|$)|\.pyc$")
SESSION_CHECK_EVERY = 0.5


@dataclass(frozen=True)
class RunContext:
    """What every agent of one run shares."""

    ws: Workspace
    run_id: str
    request: str
    repo: Path
    base: str  # the commit every agent branches from
    profile: RepoProfile
    sessions: Sessions
    store: RunStore
    cancel: threading.Event
    events: EventLog  # the run's events (agentos.run.events)
    receipts: list[str]  # the run's receipts, in order: agents append their gate receipts
    sandbox: Sandbox
    scene: Scene  # what every agent and check of the run hides
    guard: GitGuard | None  # the repository's git administration, without a sandbox
    tampered: list[str]  # what the guard put back during the run: then nothing merges
    extra_env: dict[str, str]  # RunOptions.env: what every agent of the run gets besides
    named: tuple[str, ...] = ()  # the paths and symbols the request names
    allow: TestChanges = field(default_factory=TestChanges)  # the test changes allowed
    # Where a gate's receipt goes (its fields -> the receipt's id): the workspace's chain
    # unless given. A node of a cluster hands them back to the driver, who writes the one
    # chain (agentos.cluster).
    record_gate: Callable[[dict[str, Any]], str] | None = None
    # The main checkout's ignored files, listed once for the run's worktrees (set-up, gates).
    ignored: IgnoredFiles | None = None


def record_ended(ctx: RunContext, agent: AgentState) -> None:
    """An agent's attempts are over, here or on a node: its end and last status, recorded."""
    agent.ended_at = time.time()
    ctx.store.update_agent(
        ctx.run_id,
        agent.name,
        status=agent.status,
        exit_code=agent.exit_code,
        ended_at=agent.ended_at,
    )


class AgentDriver:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def setup(self, agent: AgentState) -> None:
        """The agent's worktree on its own branch at the base, with what the repository's
        environment needs there (see :func:`agentos.gate.repo.prepare_worktree`), and the MCP
        tools its package asks for (see :mod:`agentos.runtimes.agent_tools`)."""
        # Its MCP tools start first (their server needs the repository, not the worktree),
        # so that their import is done when its CLI asks for them; they serve every attempt
        # and end at teardown.
        agent.tools = AgentToolServer.start(self.ctx.ws, self.ctx.repo, agent.manifest, agent.files)
        wt.add_worktree(
            self.ctx.repo,
            agent.worktree,
            agent.branch,
            agent.base or self.ctx.base,
            sparse_paths=agent.manifest.paths or None,
        )
        if self.ctx.guard is not None:
            self.ctx.guard.watch(wt.admin_dir(agent.worktree) / "config.worktree")
        for note in prepare_worktree(self.ctx.profile, agent.worktree, self.ctx.ignored):
            self._note(agent, note)
        agent.egress = open_egress(self.ctx.sandbox, agent.manifest, agent.files)

    def tree_at_base(self, agents: list[AgentState]) -> Path:
        """The first agent's new worktree: the repository at the base, on this machine."""
        return agents[0].worktree

    def close(self) -> None:
        """Nothing: each agent's session and worktree end with the run's teardown."""

    def drive(self, agent: AgentState, context: str) -> None:
        """Attempts until one passes, the guardian stops the agent or the retries are
        spent. Agents are driven in parallel, one thread each."""
        # Written by rename: never through a link the agent left in its place. Not fsync'd:
        # a worktree does not outlive a crash (gc saves its work and removes it).
        atomic_write(agent.worktree / "AGENTOS_CONTEXT.md", context, durable=False)
        # A verifier changes nothing: another attempt would judge the same tree again.
        retries = 0 if agent.verifier else self.ctx.ws.settings.run.retries
        agent.started_at = time.time()
        try:
            while agent.attempts <= retries and not self.ctx.cancel.is_set():
                self._attempt(agent)
                if agent.status in (AgentStatus.PASSED, AgentStatus.KILLED):
                    break
                if agent.limit == "budget":  # past its budget: no other attempt
                    break
                if agent.attempts <= retries:
                    atomic_write(
                        agent.worktree / "AGENTOS_FEEDBACK.md", self.feedback(agent), durable=False
                    )
        finally:
            record_ended(self.ctx, agent)

    def attempt(self, agent: AgentState) -> None:
        """One attempt, no more (a node of a cluster runs one at a time: agentos.cluster)."""
        self._attempt(agent)

    def _attempt(self, agent: AgentState) -> None:
        """One attempt: start the agent, wait for its exit file, commit its work, run the
        gate on exactly that commit, record it."""
        agent.attempts += 1
        self._work(agent)
        tampered = self._restore_git_admin(agent)
        if wt.restore_gitfile(self.ctx.repo, agent.worktree):
            self._note(agent, "its worktree's .git file was rewritten; restored")
        commit = wt.commit_all(
            agent.worktree, commit_message(self.ctx.run_id, self.ctx.request, agent), agent.name
        )
        if commit:
            agent.commits.append(commit)
        if agent.files.stopped.exists():
            # The guardian killed it: no gate, no retry.
            reason = agent.files.stopped.read_text().strip()
            self._set_status(agent, AgentStatus.KILLED, f"stopped by the guardian: {reason}")
            return
        self._gate(agent, tampered)

    def _work(self, agent: AgentState) -> None:
        """The agent in its tmux pane, confined, until its exit file says it ended (or its
        timeout, its budget, or the run's cancel); what it left running dies with the
        attempt. What it reports using is read from its output as it streams (its
        runtime's :class:`~agentos.runtimes.usage.Meter`) and from ``$AGENTOS_USAGE_FILE``."""
        task = AgentTask(
            run_id=self.ctx.run_id,
            agent=agent.name,
            manifest=agent.manifest,
            package_dir=agent.package_dir,
            worktree=agent.worktree,
            repo=self.ctx.repo,
            workspace=self.ctx.ws.root,
            request=self.ctx.request,
            files=agent.files,
            attempt=agent.attempts,
            confined=self.ctx.sandbox.confined,
        )
        groups: list[Group] = []
        pane, _env = prepare(
            task,
            agent.files,
            environment=self._agent_environment(agent),
            confine=lambda argv, env: self._confine(agent, argv, env, groups),
            relay=agent.egress is not None,
        )
        meter = get_runtime(agent.manifest.runtime).meter(task)
        watch = _UsageWatch(self, agent, meter)
        self._set_status(
            agent,
            AgentStatus.RUNNING,
            f"attempt {agent.attempts} started in tmux session {agent.session}",
            attempts=agent.attempts,
            started_at=agent.started_at,
        )
        agent.pane_pid = self.ctx.sessions.start(agent.session, pane, agent.worktree)
        try:
            agent.exit_code = self._wait_for_exit(agent, groups, watch)
        finally:
            for group in groups:  # whatever the agent left running dies with its attempt
                agent.limit = limits_hit(group, agent.exit_code)
                group.close()
        if agent.limit:
            self._note(agent, f"stopped by its sandbox: limit: {agent.limit}")
        keep_outbox(agent.files)
        reported, problem = take_usage(agent.files.usage)
        if problem:
            self._note(agent, f"its usage report was ignored: {problem}")
        agent.usage = watch.total(reported)
        self._store_usage(agent)
        over = watch.budget.exceeded(agent.usage)
        if over:
            agent.limit = "budget"
            self._note(agent, f"stopped: limit: budget ({over})")

    def _store_usage(self, agent: AgentState) -> None:
        if agent.usage is not None:
            self.ctx.store.update_agent(self.ctx.run_id, agent.name, usage=agent.usage.as_dict())

    def _gate(self, agent: AgentState, tampered: list[str]) -> None:
        """The gate on the attempt's commit, its receipt, and the agent's verdict."""
        head = wt.rev(agent.worktree, "HEAD") or agent.base or self.ctx.base
        self._set_status(
            agent,
            AgentStatus.GATING,
            f"attempt {agent.attempts} exited {agent.exit_code}; the gate checks its work",
            exit_code=agent.exit_code,
        )
        # The gate judges exactly what would land: the commit, not files git ignores.
        dropped = [p for p in wt.to_commit(agent.worktree) if not _CACHE.search(p)]
        prepare_worktree(self.ctx.profile, agent.worktree, self.ctx.ignored)
        if dropped:
            self._note(
                agent,
                "files git ignores are not part of the work and were removed "
                f"before the gate: {', '.join(dropped[:10])}",
            )
        gate = self._run_checks(agent, head)
        # Past its budget, its work is not taken, whatever the gate says.
        passed = agent.exit_code == 0 and gate.passed and agent.limit != "budget"
        fields = {
            "agent": f"{agent.name}@{agent.manifest.version}",
            "exit_code": agent.exit_code,
            "accepted": passed,
            "commit": head,
            "sandbox": self.ctx.sandbox.backend,
            **({"limit": agent.limit} if agent.limit else {}),
            **({"usage": agent.usage.as_dict()} if agent.usage else {}),
            **gate_receipt_fields(gate, agent.attempts),
        }
        if dropped:
            fields["ignored_files_removed"] = dropped[:50]
        if agent.egress is not None and agent.egress.denied:
            fields["network_denied"] = list(agent.egress.denied)
        if tampered:
            fields["git_admin_restored"] = tampered
        if self.ctx.record_gate is not None:
            receipt_id = self.ctx.record_gate(fields)
        else:
            receipt_id = write_receipt(
                self.ctx.ws, "gate", fields, run_id=self.ctx.run_id, about=self.ctx.request
            ).id
        self.ctx.receipts.append(receipt_id)
        agent.receipts.append(receipt_id)
        agent.gated_commit = head if passed else None
        self._set_status(
            agent,
            AgentStatus.PASSED if passed else AgentStatus.FAILED,
            f"attempt {agent.attempts} exited {agent.exit_code}; {gate.summary()}",
            gate=gate.as_dict(),
            gated_commit=agent.gated_commit,
            receipts=agent.receipts,
        )
        broken = environment_failure(gate)
        if broken is not None and check_profile(self.ctx.profile, self.ctx.repo):
            # The test command cannot start on the repository itself either: the
            # environment broke (an agent deleting its test script is the agent's failure).
            raise EnvironmentBroken(broken, file=self.ctx.repo, field="tests")

    def _run_checks(self, agent: AgentState, head: str) -> GateResult:
        """The agent's checks on its worktree at commit ``head``, confined; then the
        worktree is put back to the commit (what the checks wrote is not the agent's
        work)."""
        gate_env = gate_environment(self.ctx.profile, agent.worktree)
        gate = run_gate(
            agent.checks,
            agent.worktree,
            base=agent.base or self.ctx.base,
            env=gate_env,
            profile=self.ctx.profile,
            judging=self.judging(agent),
            confiner=CheckConfiner(
                self.ctx.sandbox, self.ctx.scene, agent.worktree, gate_env["PATH"]
            ),
            stop=self.ctx.cancel,
            # A pid file is never fsync'd: a crash that loses it ended the process too.
            started=lambda pid: atomic_write(
                agent.files.check_pid, f"{pid} {process_start(pid) or '-'}\n", durable=False
            ),
        )
        agent.files.check_pid.unlink(missing_ok=True)
        if agent.checks:  # (no check ran, none wrote anything: the worktree is the commit)
            # A check that may write could have rewritten the worktree's .git: put back
            # first, so that git resets this worktree and not a repository it named.
            if wt.restore_gitfile(self.ctx.repo, agent.worktree):
                self._note(agent, "a check rewrote its worktree's .git file; restored")
            wt.reset_to_head(agent.worktree)
        # Asked of the main repository (the same objects): a check that may write could
        # have pointed the worktree's .git at a repository of its own.
        nested = wt.new_gitlinks(self.ctx.repo, agent.base or self.ctx.base, head)
        if nested:
            gate = with_failure(
                gate,
                "no nested repositories",
                f"{', '.join(nested)}: a git repository made inside the worktree would land "
                "as a pointer to a commit the target does not have, not as its files; "
                "remove its .git so that its files are the work\n",
            )
        agent.gate = gate
        return gate

    def judging(self, agent: AgentState) -> Judging:
        """What an agent's tests checks judge against: its base, the request's named
        things and allowed test changes; scratch trees in the workspace (hidden from
        agents), base collections in its cache."""
        return run_judging(
            self.ctx.ws,
            self.ctx.run_id,
            agent.name,
            agent.base or self.ctx.base,
            self.ctx.named,
            self.ctx.allow,
        )

    def _set_status(
        self, agent: AgentState, status: AgentStatus, message: str, **fields: Any
    ) -> None:
        """The agent's new status: in its state, in state.db (with ``fields``), and as an
        event."""
        agent.status = status
        self.ctx.store.update_agent(self.ctx.run_id, agent.name, status=status, **fields)
        self.ctx.events.emit(
            EventKind.AGENT, f"{agent.name}: {message}", status=status, agent=agent.name
        )

    def _note(self, agent: AgentState, message: str) -> None:
        self.ctx.events.note(f"{agent.name}: {message}", agent=agent.name)

    def _restore_git_admin(self, agent: AgentState) -> list[str]:
        """Without a sandbox: what changed in the repository's git administration during
        this attempt, put back. Nothing tells which agent of the run changed it, so it is
        the run's failure (nothing merges), not this agent's (see agentos.worktrees.guard)."""
        if self.ctx.guard is None:
            return []
        try:
            tampered = restore_git_admin(self.ctx.guard, self.ctx.repo)
        except AgentOSError as exc:
            tampered = [f"could not be checked: {exc}"]
        if tampered:
            self.ctx.tampered.extend(tampered)
            self._note(
                agent,
                f"the repository's git administration changed while it ran "
                f"(no sandbox); put back: {', '.join(tampered)}",
            )
        return tampered

    def _confine(
        self, agent: AgentState, argv: list[str], env: dict[str, str], groups: list[Group]
    ) -> list[str]:
        """The agent's wrapper in its sandbox (see :mod:`agentos.sandbox`), its control group
        kept in ``groups`` for the end of the attempt."""
        confined, group, described = confine_agent(
            self.ctx.sandbox,
            self.ctx.scene,
            self.ctx.ws,
            agent.manifest,
            agent.package_dir,
            agent.worktree,
            agent.files,
            argv,
            env,
        )
        agent.sandbox = described
        groups.append(group)
        return confined

    def _agent_environment(self, agent: AgentState) -> Callable[[dict[str, str]], dict[str, str]]:
        """The agent's scrubbed environment, completed with the repository's (its
        interpreter first on PATH, the worktree's code imported) and its test command."""
        profile = self.ctx.profile
        assert profile is not None

        def complete(env: dict[str, str]) -> dict[str, str]:
            out = profile.environment(env, agent.worktree)
            out["AGENTOS_TEST_COMMAND"] = profile.test_command()
            out.update(self.ctx.extra_env)
            out["AGENTOS_OUTBOX"] = str(agent.files.outbox)
            if self.ctx.sandbox.confined:
                out.update(private_git(agent.worktree, agent.files.io))
            return out

        return complete

    def _wait_for_exit(
        self, agent: AgentState, groups: list[Group], watch: _UsageWatch
    ) -> int | None:
        """Wait for the wrapper's exit file; kill the agent at its timeout (exit 124), when
        it passed its disk quota (137; its control group, when it has one, was killed at
        once) or its budget (137)."""
        deadline = time.monotonic() + agent.manifest.timeout
        next_session_check = time.monotonic() + SESSION_CHECK_EVERY
        pause = FIRST_POLL
        # The exit file is seen as it is written (a watch on the io folder, made before the
        # first look: an exit after a look wakes the wait), not at the next of the looks.
        io = DirWatch(agent.files.io)
        try:
            while True:
                code = agent.files.exit_code()
                if code is not None:
                    return code
                if self.ctx.cancel.is_set():
                    raise Cancelled()
                if any(g.disk_hit for g in groups):
                    self.ctx.sessions.kill(agent.session, agent.pane_pid)
                    return 137
                if watch.over_budget():
                    self.ctx.sessions.kill(agent.session, agent.pane_pid)
                    return 137
                now = time.monotonic()
                if now > deadline:
                    self.ctx.sessions.kill(agent.session, agent.pane_pid)
                    self._note(agent, f"timed out after {agent.manifest.timeout}s; killed")
                    return 124
                if now >= next_session_check:
                    next_session_check = now + SESSION_CHECK_EVERY
                    if not self.ctx.sessions.exists(agent.session):
                        code = agent.files.exit_code()
                        return code if code is not None else 137  # died without a status
                io.wait(agent.files.exit_file.name, POLL if io.active else pause)
                pause = min(pause * 2, POLL)
        finally:
            io.close()

    def feedback(self, agent: AgentState) -> str:
        """What its next attempt is told of this one: the gate's failures, and its output
        when it did not exit 0 (``AGENTOS_FEEDBACK.md``)."""
        assert agent.gate is not None
        text = agent.gate.feedback()
        if agent.exit_code != 0:
            last = tail(agent.files.log, OUTPUT_TAIL)
            text += (
                f"\n## Your process exited with code {agent.exit_code}\n\n"
                f"Last output:\n\n```text\n{last}\n```\n"
            )
        return text


class _UsageWatch:
    """An attempt's usage as its agent's output streams: the running total over its
    attempts, and whether it is past the run's budget."""

    def __init__(self, driver: AgentDriver, agent: AgentState, meter: Meter | None) -> None:
        settings = driver.ctx.ws.settings
        self.driver, self.agent, self.meter = driver, agent, meter
        self.prices = settings.prices
        self.budget = Budget(settings.run.budget.tokens, settings.run.budget.cost)
        self.before = agent.usage  # its earlier attempts'
        self.tail = LogTail(agent.files.log, meter.line) if meter is not None else None
        self._shown: Usage | None = None

    def total(self, reported: Usage | None = None) -> Usage | None:
        """Its usage over its attempts: the earlier ones', this one's output so far and
        ``reported`` (what it wrote to $AGENTOS_USAGE_FILE)."""
        if self.tail is not None:
            self.tail.read()
        now = self.meter.usage(self.prices) if self.meter is not None else None
        total = None
        for part in (self.before, now, reported):
            if part is not None:
                total = part if total is None else total + part
        return total

    def over_budget(self) -> bool:
        """Whether what streamed so far is past the budget (then stop the agent); what it
        used so far is kept in state.db as it changes."""
        if self.tail is None:
            return False
        used = self.total()
        if used != self._shown and used is not None:
            self._shown = used
            self.driver.ctx.store.update_agent(
                self.driver.ctx.run_id, self.agent.name, usage=used.as_dict()
            )
        return self.budget.exceeded(used) is not None


def confine_agent(
    sandbox: Sandbox,
    scene: Scene,
    ws: Workspace,
    manifest: Manifest,
    package_dir: Path,
    worktree: Path,
    files: AgentFiles,
    argv: list[str],
    env: dict[str, str],
) -> tuple[list[str], Group, dict[str, Any]]:
    """An agent's wrapper (``argv``) in its sandbox: the confined argv, the control group
    to close when the attempt ends, and what confined it (for receipts). Used for a run's
    agents and an eval's."""
    home = ws.state_dir / "homes" / manifest.name
    pycache = Path(env.get("PYTHONPYCACHEPREFIX") or files.io / "pycache")
    pycache.mkdir(parents=True, exist_ok=True)
    pkg = manifest.sandbox
    if pkg is not None and pkg.home == "persistent":
        home.mkdir(parents=True, exist_ok=True)
    pol = agent_policy(
        scene,
        package=pkg,
        package_dir=package_dir,
        worktree=worktree,
        own_files=[files.io, files.log, pycache],
        run_files=files.run_dir,
        path_env=env.get("PATH", ""),
        persistent_home=home,
    )
    pol.extra_env[INSIDE] = sandbox.backend
    group = Group(pol.limits)
    watch_writes(group, pol, confined=sandbox.confined)
    return sandbox.command(pol, argv, group), group, {"backend": sandbox.backend, **pol.as_dict()}


def open_egress(sandbox: Sandbox, manifest: Manifest, files: AgentFiles) -> Egress | None:
    """The proxy of an agent whose package names the hosts it may reach, when a sandbox
    confines it (without one nothing keeps it off the rest of the network)."""
    hosts = egress_hosts(manifest)
    if hosts is None or not sandbox.confined:
        return None
    files.run_dir.mkdir(parents=True, exist_ok=True)
    return Egress(files.egress_socket, hosts)


def private_git(worktree: Path, io: Path) -> dict[str, str]:
    """The git of a confined agent: its own index and object store (in its io directory),
    the repository's objects read through alternates. Its worktree's git directory, which
    names the branch AgentOS commits to, stays read-only; ``git status``, ``diff``,
    ``checkout -- FILE`` and ``add`` work, and AgentOS's own commit uses the real index."""
    from agentos.sandbox.confine import git_dirs

    common, own = git_dirs(worktree)
    if common is None or own is None:
        return {}
    index, objects = io / "git-index", io / "git-objects"
    objects.mkdir(parents=True, exist_ok=True)
    if (own / "index").is_file():
        atomic_write(index, (own / "index").read_bytes(), durable=False)  # one attempt's
    return {
        "GIT_INDEX_FILE": str(index),
        "GIT_OBJECT_DIRECTORY": str(objects),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects"),
    }


def commit_message(run_id: str, request: str, agent: AgentState) -> str:
    """The message of the commit that saves an agent's work on its branch."""
    return (
        f"agentos: {agent.name} attempt {agent.attempts} (run {run_id})\n\n"
        f"Request: {request}\nAgent: {agent.manifest.ref} via card {agent.card}\n"
    )
