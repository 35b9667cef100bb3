"""A run's agents on the cluster: each attempt one Ray task, the run's records kept here.

The orchestrator drives a :class:`RayDispatch` as it drives local agents
(:mod:`agentos.run.dispatch`); interviewing, routing, receipts, the integration gate and
the merge stay on this machine, the driver. An attempt asks Ray for an ``agentos_slot``,
the runtime it needs (``claude``, ``gemini``, ``codex``) and ``cluster.resources``, spread
over the nodes. What travels out: the commit it starts from as a bundle (left out what
every node is known to hold), the package by sha256 with its ``hub.lock`` entry, the
checks, the driver's settings. What comes back: the attempt's commits as a bundle, the
gate's result and the fields of its receipt. The driver takes the commits into the user's
repository only when the bundle's tip is the commit the node's gate judged, descends from
the commit the attempt started at and holds exactly the commits the node listed; it then
writes the gate receipt (one writer keeps the one chain) and moves the agent's branch by
compare and swap.

Ray retries nothing (``max_retries=0``): an attempt lost with its worker, its node or its
objects is recorded with its node and submitted again, within ``run.retries``; nothing is
merged twice, since only the driver merges, once. A cancelled run cancels its running
tasks (Ray delivers it as an interrupt; the node tears down as a local run does).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentos.cluster import bundles
from agentos.cluster.connect import connect
from agentos.cluster.node import (
    AttemptResult,
    AttemptSpec,
    Health,
    Intervened,
    Note,
    RepoSpec,
    Started,
    attempt_key,
)
from agentos.cluster.packages import Shipment, pack
from agentos.errors import AgentOSError, OperationFailed, VerifyFailed
from agentos.gate.detect import has_pytest
from agentos.hub.lock import LockFile
from agentos.hub.store import Hub
from agentos.receipts import write_receipt
from agentos.run.dispatch import DispatchFactory
from agentos.run.driver import RunContext, record_ended
from agentos.run.events import EventKind
from agentos.run.store import AgentStatus
from agentos.run.values import AgentState, Cancelled
from agentos.workspace.layout import Workspace
from agentos.worktrees import repo as wt

SLOT = "agentos_slot"  # what a node has one of per agent it can run at once
# The program a runtime needs on the node, as the node advertises it (agentos cluster join).
RUNTIME_RESOURCES = {"claude-code": "claude", "gemini-cli": "gemini", "codex": "codex"}
TOOL_AMOUNT = 0.01  # of a runtime's resource an agent asks (a node advertises 100)
POLL = 0.2  # seconds between looks at a running attempt (and at the run's cancel)
CANCEL_WAIT = 60.0  # seconds a cancelled attempt may take to tear down on its node


def ray_dispatch(
    ws: Workspace, address: str | None = None, *, watch: str | None = None
) -> DispatchFactory:
    """Join the cluster now (bad input when it does not answer); the factory the
    orchestrator calls with each run's context. ``watch`` names what each node runs beside
    an agent to watch it (``module:function``: the guardian's, handed in by the caller)."""
    connect(ws, address)
    return functools.partial(RayDispatch, watch=watch)


# Packages in the object store, by the driver's Ray job and their content: put there once
# per driver process (a workflow's runs, an eval's tasks share them).
_SHIPPED: dict[tuple[str, str, str], Shipment] = {}
_PACKING: dict[tuple[str, str, str], threading.Lock] = {}
_SHIPPING = threading.Lock()


def repo_key(repo: Path) -> str:
    """The name of a repository's cache clone on the nodes: its folder's name and a digest
    of where it is on the driver."""
    import hashlib

    digest = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]
    return f"{repo.name}-{digest}"


class Lost(Exception):
    """An attempt Ray lost: its worker or node died, or its objects or owner were lost."""

    def __init__(self, node: str | None, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


class RayDispatch:
    """Drives one run's agents on the cluster; one instance per run."""

    def __init__(self, ctx: RunContext, *, watch: str | None = None) -> None:
        self.ctx = ctx
        self.watch = watch
        self.ray = connect(ctx.ws)
        self.lock = threading.Lock()
        self.bundling = threading.Lock()  # one bundle out per start commit
        self.lock_file: LockFile | None = None  # hub.lock, as read for this run
        self.outgoing: dict[str, tuple[bundles.Outgoing, Any]] = {}  # start commit -> bundle
        self.full: dict[str, Any] = {}  # start commit -> the whole history's bundle
        self.known = bundles.Known(ctx.ws.state_dir / "cluster" / "known" / f"{self.key}.json")
        self.base_tree: Path | None = None
        self.needs_pytest = bool(ctx.profile.venv and has_pytest(ctx.profile.venv))
        self.timings: dict[str, list[float]] = {}  # for the benchmark: seconds, by step
        self.tips: dict[str, str] = {}  # each agent's branch here, as this dispatch moved it

    @property
    def key(self) -> str:
        return repo_key(self.ctx.repo)

    # -- the Dispatch protocol ---------------------------------------------------------------

    def setup(self, agent: AgentState) -> None:
        """The agent's branch here at its base; its worktree and session will be on a node
        (it has no session on this machine, so the guardian here leaves it alone)."""
        base = agent.base or self.ctx.base
        with wt.repo_lock(self.ctx.repo):
            wt.run_git(self.ctx.repo, "branch", agent.branch, base)
        self.tips[agent.name] = base
        agent.session = ""
        agent.files.log.parent.mkdir(parents=True, exist_ok=True)

    def tree_at_base(self, agents: list[AgentState]) -> Path:
        """A scratch worktree at the base when the run's checks run the tests (they are
        collected here before any agent starts); else the repository itself (only the
        checks' programs are looked for)."""
        if not any(c.kind == "tests" for a in agents for c in a.checks):
            return self.ctx.repo
        if self.base_tree is None:
            path = self.ctx.ws.worktrees_dir / self.ctx.run_id / "_base"
            path.parent.mkdir(parents=True, exist_ok=True)
            with wt.repo_lock(self.ctx.repo):
                wt.run_git(
                    self.ctx.repo, "worktree", "add", "-q", "--detach", str(path), self.ctx.base
                )
            self.base_tree = path
        return self.base_tree

    def close(self) -> None:
        if self.base_tree is not None:
            try:
                wt.remove_worktree(self.ctx.repo, self.base_tree)
            except AgentOSError:
                import shutil

                shutil.rmtree(self.base_tree, ignore_errors=True)
                wt.prune(self.ctx.repo)

    def drive(self, agent: AgentState, context: str) -> None:
        """Attempts on the cluster until one passes, the agent is stopped or the retries
        are spent (a lost or refused attempt counts)."""
        retries = 0 if agent.verifier else self.ctx.ws.settings.run.retries
        agent.started_at = time.time()
        feedback = ""
        try:
            while agent.attempts <= retries and not self.ctx.cancel.is_set():
                agent.attempts += 1
                result = self._attempt(agent, context, feedback)
                if result is None:
                    continue
                self._take(agent, result)
                if agent.status in (AgentStatus.PASSED, AgentStatus.KILLED):
                    break
                if agent.limit == "budget":
                    break
                feedback = result.feedback
        finally:
            record_ended(self.ctx, agent)

    # -- one attempt -------------------------------------------------------------------------

    def _attempt(self, agent: AgentState, context: str, feedback: str) -> AttemptResult | None:
        """Submit the attempt and follow it; its result, or None when it was lost or
        refused (recorded)."""
        spec = self._spec(agent, context, feedback)
        self._set_status(
            agent,
            AgentStatus.RUNNING,
            f"attempt {agent.attempts} dispatched to the cluster",
            attempts=agent.attempts,
            started_at=agent.started_at,
        )
        submitted = time.monotonic()
        try:
            result = self._follow(agent, spec)
            if result.need_history:  # the node lacks what the bundle left out
                full = self._full(spec.repo.start, spec.repo.ref)
                spec = _with_bundle(spec, full)
                result = self._follow(agent, spec)
        except Lost as lost:
            where = f" on node {lost.node}" if lost.node else ""
            self._set_status(
                agent,
                AgentStatus.FAILED,
                f"attempt {agent.attempts} lost{where}: {lost.why}",
            )
            self._where(agent, lost=lost.node or "?")
            return None
        if result.need_history:  # even the whole history was not taken there
            result = AttemptResult(
                result.node,
                refused=f"node {result.node.name}: its clone of {self.ctx.repo.name} "
                "does not take the repository's history",
            )
        if result.refused:
            self._set_status(
                agent, AgentStatus.FAILED, f"attempt {agent.attempts} refused: {result.refused}"
            )
            self._where(agent, refused=result.node.name)
            return None
        self.known.add(result.node.id, spec.repo.start)
        trip, there = time.monotonic() - submitted, result.timings.get("bundled", 0.0)
        self._time("round trip", trip)
        self._time("on the node", there)
        self._time("ray", trip - there)  # scheduling, transfers, the worker's start
        last = 0.0
        for step, at in sorted(result.timings.items(), key=lambda kv: kv[1]):
            self._time(f"node: {step}", at - last)  # each step of the node's, in turn
            last = at
        return result

    def _follow(self, agent: AgentState, spec: AttemptSpec) -> AttemptResult:
        from agentos.cluster.tasks import ATTEMPT

        ray = self.ray
        options: dict[str, Any] = {
            "resources": self._resources(agent),
            "num_cpus": 0,
            "scheduling_strategy": "SPREAD",
        }
        memory = agent.manifest.sandbox.memory if agent.manifest.sandbox else None
        if memory:
            options["memory"] = memory
        stream = ATTEMPT.options(**options).remote(spec)
        node: str | None = None
        started: list[Started] = []  # where it runs, once it says so
        try:
            for item in self._items(stream, agent, started):
                if isinstance(item, Started):
                    started.append(item)
                    node = item.node.name
                    self._time("to start", item.at - (agent.started_at or item.at))
                    self._where(agent, started=item)
                    self.ctx.events.emit(
                        EventKind.AGENT,
                        f"{agent.name}: attempt {agent.attempts} started on node {node} "
                        f"(tmux -L {item.socket} attach -t ={item.session} there)",
                        status=AgentStatus.RUNNING,
                        agent=agent.name,
                    )
                elif isinstance(item, Note):
                    self._note(agent, item)
                elif isinstance(item, Health):
                    self._where(agent, health=item)
                elif isinstance(item, Intervened):
                    self._intervened(agent, node or "?", item)
                elif isinstance(item, AttemptResult):
                    return item
        except Cancelled:
            raise
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, AgentOSError):
                raise cause from None
            raise OperationFailed(
                f"{agent.name}: attempt {agent.attempts} failed on node {node or '?'}: "
                f"{type(cause).__name__}: {cause}"
            ) from None
        except ray.exceptions.TaskCancelledError:
            raise Cancelled() from None
        except ray.exceptions.RayError as exc:
            raise Lost(node, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        raise Lost(node, "its task ended without a result")

    def _items(self, stream: Any, agent: AgentState, started: list[Started]) -> Iterator[object]:
        """What the attempt sends, as it comes; the run's cancel cancels the task and
        waits for its teardown on the node (where it started)."""
        from agentos.cluster.tasks import CancelledHere, follow, wait_torn_down

        def torn_down(wait: float) -> None:
            if started:
                key = attempt_key(self.ctx.run_id, agent.name, agent.attempts)
                wait_torn_down(started[-1].node.id, key, wait)

        try:
            yield from follow(stream, self.ctx.cancel, POLL, CANCEL_WAIT, torn_down)
        except CancelledHere:
            raise Cancelled() from None

    def _intervened(self, agent: AgentState, node: str, done: Intervened) -> None:
        """The guardian on the node nudged, restarted or stopped the agent: recorded here
        as the guardian records it (a row, its receipt), naming the node."""
        fields = {**done.fields, "node": node}
        action, reason = str(fields.get("action")), str(fields.get("reason"))
        store = self.ctx.store
        row = store.record_intervention(self.ctx.run_id, agent.name, action, reason, done.at)
        receipt = write_receipt(self.ctx.ws, "guardian", fields, run_id=self.ctx.run_id)
        store.link_intervention(row, receipt.id)
        self.ctx.events.note(
            f"{agent.name}: the guardian on node {node}: {action}: {reason}", agent=agent.name
        )

    def _note(self, agent: AgentState, note: Note) -> None:
        """A line from the node: its progress (started, gating) as the agent's status
        here; its verdict is the driver's to say, once the commits are taken."""
        if note.status == AgentStatus.GATING:
            self._set_status(agent, AgentStatus.GATING, note.message.partition(": ")[2])
        elif note.status is None:
            self.ctx.events.note(note.message, agent=agent.name)
        elif note.status == AgentStatus.RUNNING:
            self.ctx.events.emit(
                EventKind.AGENT, note.message, status=AgentStatus.RUNNING, agent=agent.name
            )

    def _resources(self, agent: AgentState) -> dict[str, float]:
        wanted: dict[str, float] = {SLOT: 1}
        tool = RUNTIME_RESOURCES.get(agent.manifest.runtime)
        if tool:
            wanted[tool] = TOOL_AMOUNT
        if self.ctx.sandbox.backend == "bwrap" and self.ctx.ws.settings.sandbox.backend == "bwrap":
            wanted["bwrap"] = TOOL_AMOUNT
        wanted.update(self.ctx.ws.settings.cluster.resources)
        return wanted

    # -- what travels out --------------------------------------------------------------------

    def _spec(self, agent: AgentState, context: str, feedback: str) -> AttemptSpec:
        start = self.tips[agent.name]  # the branch's tip: only this dispatch moves it
        ref = f"refs/heads/{agent.branch}"
        outgoing, bundle = self._bundle(start, ref)  # (made once per run: timed apart)
        package = self._shipment(agent)
        clock = time.monotonic()
        spec = AttemptSpec(
            run_id=self.ctx.run_id,
            request=self.ctx.request,
            card=agent.card,
            manifest=agent.manifest,
            package=package,
            checks=list(agent.checks),
            repo=RepoSpec(
                key=self.key,
                name=self.ctx.repo.name,
                base=agent.base or self.ctx.base,
                start=start,
                ref=outgoing.ref,
                bundle=[bundle],
                profile=self.ctx.profile,
                needs_pytest=self.needs_pytest,
            ),
            settings=self.ctx.ws.settings,
            attempt=agent.attempts,
            context=context,
            feedback=feedback,
            named=self.ctx.named,
            allow=self.ctx.allow,
            extra_env=dict(self.ctx.extra_env),
            watch=self.watch,
        )
        self._time("spec", time.monotonic() - clock)
        return spec

    def _bundle(self, start: str, ref: str) -> tuple[bundles.Outgoing, Any]:
        """The bundle of ``ref`` at ``start`` for the nodes (one per start commit in a run,
        in the object store once)."""
        with self.bundling:
            if start not in self.outgoing:
                clock = time.monotonic()
                with wt.repo_lock(self.ctx.repo):  # see _commits_back
                    out = bundles.create(self.ctx.repo, ref, self.known.common())
                self.outgoing[start] = (out, self.ray.put(out.data))
                self._time("bundle out", time.monotonic() - clock)
                self._time("bundle out bytes", float(len(out.data)))
            return self.outgoing[start]

    def _full(self, start: str, ref: str) -> Any:
        with self.bundling:
            if start not in self.full:
                with wt.repo_lock(self.ctx.repo):  # see _commits_back
                    out = bundles.create(self.ctx.repo, ref)
                self.full[start] = self.ray.put(out.data)
            return self.full[start]

    def _shipment(self, agent: AgentState) -> Shipment:
        """The package as it travels: hub.lock's entry (the lock read once per run), its
        archive in the object store, put there once per driver process and content (its
        sha256: the run checked the installed package against it before any agent)."""
        ref = agent.manifest.ref
        with self.lock:
            if self.lock_file is None:
                self.lock_file = Hub(self.ctx.ws.hub_dir).read_lock()
        name, version = agent.manifest.name, agent.manifest.version
        entry = self.lock_file.packages[name].versions[version]
        key = (self.ray.get_runtime_context().get_job_id(), entry.sha256, ref)
        with _SHIPPING:
            making = _PACKING.setdefault(key, threading.Lock())
        with making:
            if key not in _SHIPPED:
                clock = time.monotonic()
                data = pack(agent.package_dir, f"{name}-{version}")
                _SHIPPED[key] = Shipment(
                    name, version, entry.sha256, dict(entry.files), [self.ray.put(data)]
                )
                self._time("package out", time.monotonic() - clock)
            return _SHIPPED[key]

    # -- what comes back ---------------------------------------------------------------------

    def _take(self, agent: AgentState, result: AttemptResult) -> None:
        """The attempt's commits into the user's repository, checked; its gate receipt;
        the agent's new state."""
        clock = time.monotonic()
        node = result.node.name
        start = self.tips[agent.name]
        try:
            head = self._commits_back(agent, result, start)
        except VerifyFailed as exc:
            self._set_status(
                agent,
                AgentStatus.FAILED,
                f"attempt {agent.attempts} on node {node}: its commits were refused: {exc}",
            )
            return
        self._time("bundle back", time.monotonic() - clock)
        self._time("bundle back bytes", float(len(result.bundle)))
        agent.commits.extend(result.commits)
        agent.node = node  # its gate ran there: the integration gate runs here whatever
        agent.exit_code = result.exit_code
        agent.gate = result.gate
        agent.limit = result.limit
        agent.usage = result.usage
        agent.sandbox = result.sandbox
        if result.log:
            with agent.files.log.open("ab") as fh:
                fh.write(result.log)
        if result.outbox:  # read by whoever started the run (the workflow scheduler)
            with agent.files.kept_outbox.open("ab") as fh:
                fh.write(result.outbox)
        passed = result.status is AgentStatus.PASSED
        receipts: list[str] = []
        if result.fields is not None:
            receipt = write_receipt(
                self.ctx.ws, "gate", result.fields, run_id=self.ctx.run_id, about=self.ctx.request
            )
            self.ctx.receipts.append(receipt.id)
            agent.receipts.append(receipt.id)
            receipts.append(receipt.id)
        agent.gated_commit = head if passed else None
        summary = result.gate.summary() if result.gate is not None else "no gate"
        self._set_status(
            agent,
            result.status,
            f"attempt {agent.attempts} on node {node} exited {result.exit_code}; {summary}",
            gate=result.gate.as_dict() if result.gate is not None else None,
            gated_commit=agent.gated_commit,
            receipts=agent.receipts,
            exit_code=result.exit_code,
        )
        self._time("take", time.monotonic() - clock)

    def _commits_back(self, agent: AgentState, result: AttemptResult, start: str) -> str:
        """Fetch the returned bundle and check it; the agent's branch moves to its tip by
        compare and swap. :class:`VerifyFailed` when it is not what the node's gate judged:
        its tip the judged commit, descending from ``start`` through the listed commits."""
        judged = (result.fields or {}).get("commit")
        if result.head is None or (result.fields is not None and judged != result.head):
            raise VerifyFailed(f"the gate judged {judged}, the node returned {result.head}")
        if result.head == start:
            if result.commits:
                raise VerifyFailed("commits listed, none sent")
            return start
        if not result.bundle or not result.ref.startswith("refs/heads/agentos/"):
            raise VerifyFailed(f"no bundle of {result.head}")
        try:
            listed = bundles.take_back(self.ctx.repo, result.bundle, result.ref, result.head, start)
        except VerifyFailed:
            raise
        except AgentOSError as exc:
            raise VerifyFailed(f"its bundle could not be taken: {exc}") from None
        fetched = result.head
        if listed != list(result.commits):
            raise VerifyFailed(
                f"{start[:12]}..{fetched[:12]} holds {len(listed)} commits, "
                f"the node listed {len(result.commits)}"
            )
        with wt.repo_lock(self.ctx.repo):  # compare and swap: from the tip it had
            done = wt.git_result(
                self.ctx.repo,
                "update-ref",
                f"refs/heads/{agent.branch}",
                fetched,
                start,
                check=False,
            )
        if done.returncode != 0:
            raise VerifyFailed(f"{agent.branch} moved: {done.stderr.strip()}")
        self.tips[agent.name] = fetched
        return fetched

    # -- records -----------------------------------------------------------------------------

    def _set_status(
        self, agent: AgentState, status: AgentStatus, message: str, **fields: Any
    ) -> None:
        agent.status = status
        self.ctx.store.update_agent(self.ctx.run_id, agent.name, status=status, **fields)
        self.ctx.events.emit(
            EventKind.AGENT, f"{agent.name}: {message}", status=status, agent=agent.name
        )

    def _where(
        self,
        agent: AgentState,
        *,
        started: Started | None = None,
        health: Health | None = None,
        lost: str | None = None,
        refused: str | None = None,
    ) -> None:
        """Where the agent runs and how it is, kept with the run (``options.cluster``):
        what ``attach``, ``status`` and ``cluster status`` read."""
        with self.lock:
            record = self.ctx.store.get(self.ctx.run_id)
            options = dict(record.options or {})
            cluster = dict(options.get("cluster") or {})
            entry = dict(cluster.get(agent.name) or {})
            entry["attempt"] = agent.attempts
            if started is not None:
                entry.update(
                    node=started.node.name,
                    node_id=started.node.id,
                    address=started.node.address,
                    socket=started.socket,
                    session=started.session,
                    worktree=started.worktree,
                    started_at=started.at,
                )
                entry.pop("health", None)
            if health is not None:
                entry["health"] = {
                    "alive": health.alive,
                    "output_age": health.output_age,
                    "heartbeat_age": health.heartbeat_age,
                    "at": health.at,
                }
            if lost is not None:
                entry.setdefault("lost", []).append({"attempt": agent.attempts, "node": lost})
            if refused is not None:
                entry.setdefault("refused", []).append({"attempt": agent.attempts, "node": refused})
            cluster[agent.name] = entry
            options["cluster"] = cluster
            self.ctx.store.update(self.ctx.run_id, options=options)

    def _time(self, step: str, seconds: float) -> None:
        self.timings.setdefault(step, []).append(seconds)


def _with_bundle(spec: AttemptSpec, bundle: Any) -> AttemptSpec:
    from dataclasses import replace

    return replace(spec, repo=replace(spec.repo, bundle=[bundle]))
