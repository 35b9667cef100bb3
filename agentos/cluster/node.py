"""One attempt of an agent on a node of the cluster, as a local run makes it.

The node has its own workspace (its ``AGENTOS_HOME``): a cache clone per repository, the
packages it was sent, the environments it built, its worktrees and its logs. Nothing of
the driver's machine is read here: what the attempt needs arrives with it (the
:class:`AttemptSpec`: the driver's settings, the agent's checks, its package by sha256,
the commit it starts from as a bundle). Before anything starts, the node proves it can
run the attempt (AgentOS's version, git and tmux, the sandbox, the package verified
against the driver's ``hub.lock``, the runtime's needs, the checks' programs, the
repository's environment): what it lacks refuses the attempt in one line naming the node.

Then :class:`agentos.run.driver.AgentDriver` makes the attempt exactly as a local run
does (a worktree, the agent confined in a tmux session, its work committed, the gate on
that commit), on a tmux socket of the attempt's own, under a reaper
(:mod:`agentos.cluster.reaper`). What comes back is an :class:`AttemptResult`: the gate's
result and the fields of its receipt (the driver writes the receipt: one writer, one
chain), and a bundle of the attempt's commits.

The repository's environment on the node: the one ``cluster.node.environments`` names
for the repository (by its folder's name at the driver) in the node's ``agentos.yaml``;
else, when the driver tests the repository in a virtual environment, one this node builds
from the repository's own files at the base (``requirements*.txt``; else the dependencies
and the test, tests, testing and dev extras of ``pyproject.toml``; pytest when the
repository's tests run with it), kept under ``.agentos/cluster/envs/`` by the digest of
those files, so that it is built once per change of them.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from filelock import FileLock

from agentos import __version__
from agentos.cluster import bundles
from agentos.cluster.packages import Shipment, unpacked
from agentos.cluster.reaper import Lease, ensure_running
from agentos.errors import AgentOSError, EnvironmentBroken, NotFound, OperationFailed, Tampered
from agentos.gate.detect import venv_python
from agentos.gate.environment import gate_environment, missing_programs
from agentos.gate.judge import TestChanges
from agentos.gate.prepare import IgnoredFiles
from agentos.gate.repo import RepoProfile, check_profile, prepare_worktree
from agentos.gate.results import GateResult
from agentos.hub.manifest import Manifest
from agentos.run.driver import AgentDriver, RunContext, open_egress
from agentos.run.events import EventLog, RunEvent
from agentos.run.sessions import Sessions
from agentos.run.store import UNFINISHED, AgentStatus, RunStatus, RunStore
from agentos.run.values import AgentState
from agentos.runtimes import get_runtime
from agentos.runtimes.usage import Usage
from agentos.sandbox import Sandbox, choose
from agentos.sandbox.confine import Scene, venv_paths
from agentos.shared.checks import CheckSpec
from agentos.shared.fs import atomic_write
from agentos.workspace.files import AgentFiles, RunFiles
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import NodeSettings, Settings, load_settings
from agentos.worktrees import repo as wt

LOG_BACK = 64 * 1024  # bytes of the agent's output sent back to the driver's log
OUTBOX_MAX = 256 * 1024  # bytes of its outbox sent back (agentos.run.outbox.MAX_BYTES)
DEFAULT_HOME = "~/.agentos-node"  # a node's workspace when AGENTOS_HOME is not set
RENEW = 1.0  # seconds between renewals of an attempt's lease
ENV_DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
ENV_EXTRAS = ("test", "tests", "testing", "dev")
PIP_TIMEOUT = 1800.0


# --- what travels ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    """A node of the cluster, as results and receipts name it."""

    id: str  # Ray's node id (hex)
    address: str  # its IP address, as Ray knows it
    hostname: str

    @property
    def name(self) -> str:
        return f"{self.hostname}/{self.id[:8]}"


@dataclass(frozen=True)
class RepoSpec:
    """The repository an attempt works on, as it travels."""

    key: str  # the node's cache clone of it: .agentos/cluster/repos/<key>
    name: str  # its folder's name at the driver (what cluster.node.environments names)
    base: str  # what its gate judges against (the run's base; a verifier's integration)
    start: str  # the commit the attempt starts from (the agent's last attempt, or base)
    ref: str  # the ref the bundle carries
    bundle: list[Any]  # [a Ray object reference to the bundle's bytes]
    profile: RepoProfile  # how the driver tests it (paths of the driver's machine)
    needs_pytest: bool = False  # the driver's environment has pytest: a built one gets it


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt of one agent of a run: everything the node needs, nothing it must read
    from the driver's machine."""

    run_id: str
    request: str
    card: str
    manifest: Manifest
    package: Shipment
    checks: list[CheckSpec]
    repo: RepoSpec
    settings: Settings  # the driver's
    attempt: int  # 1, 2, ...
    context: str  # AGENTOS_CONTEXT.md
    feedback: str = ""  # AGENTOS_FEEDBACK.md: what the gate said of the last attempt
    named: tuple[str, ...] = ()
    allow: TestChanges = field(default_factory=TestChanges)
    extra_env: dict[str, str] = field(default_factory=dict)
    version: str = __version__  # the driver's AgentOS
    # "module:function" the node runs beside the agent to watch it (the guardian's,
    # agentos.guardian.REMOTE_WATCH, handed in by the caller: the library names no adapter)
    watch: str | None = None

    @property
    def agent(self) -> str:
        return self.manifest.name


@dataclass(frozen=True)
class Started:
    """Sent when the agent starts on the node."""

    node: NodeInfo
    socket: str  # its tmux socket there
    session: str
    worktree: str  # its worktree there
    at: float


@dataclass(frozen=True)
class Note:
    """A line for the run's events, from the node (the driver records it)."""

    message: str
    status: str | None = None


@dataclass(frozen=True)
class Health:
    """How the agent is doing, measured on its node, every guardian interval."""

    alive: bool
    output_age: float  # seconds since its output last grew
    heartbeat_age: float | None  # seconds since it last touched AGENTOS_HEARTBEAT_FILE
    at: float


@dataclass(frozen=True)
class Intervened:
    """The guardian on the node nudged, restarted or stopped the agent: the fields of its
    receipt, for the driver to write (and count)."""

    fields: dict[str, Any]
    at: float


@dataclass(frozen=True)
class AttemptResult:
    node: NodeInfo
    refused: str | None = None  # why the node would not start it (nothing ran)
    need_history: bool = False  # the node lacks a prerequisite of the bundle
    status: AgentStatus = AgentStatus.FAILED
    exit_code: int | None = None
    head: str | None = None  # the commit the gate judged
    commits: tuple[str, ...] = ()  # the commits of this attempt, start..head
    bundle: bytes = b""  # start..head
    ref: str = ""  # the ref the bundle carries (at head)
    gate: GateResult | None = None
    fields: dict[str, Any] | None = None  # the gate receipt's, for the driver to write
    limit: str | None = None
    usage: Usage | None = None
    sandbox: dict[str, Any] | None = None
    feedback: str = ""  # for the next attempt, when this one failed
    log: bytes = b""  # the end of its output
    outbox: bytes = b""  # what it asked of AgentOS besides its work (agentos.run.outbox)
    timings: dict[str, float] = field(default_factory=dict)  # seconds, by step


class Refused(AgentOSError):
    """The node cannot run the attempt: it names what is missing. Nothing ran."""


# --- the node's workspace -------------------------------------------------------------------


@dataclass(frozen=True)
class NodeWorkspace(Workspace):
    """A node's own workspace (its AGENTOS_HOME), running a driver's agents by the driver's
    settings; of its own ``agentos.yaml`` only ``cluster.node`` counts."""

    driver_settings: Settings | None = None

    @cached_property
    def settings(self) -> Settings:
        own = load_settings(self.settings_file).cluster.node
        given = self.driver_settings or Settings()
        cluster = given.cluster.model_copy(update={"node": own})
        return given.model_copy(update={"cluster": cluster, "repos": {}})

    @property
    def node(self) -> NodeSettings:
        return self.settings.cluster.node


def node_workspace(settings: Settings | None = None) -> NodeWorkspace:
    """This node's workspace: ``AGENTOS_HOME``, else ``~/.agentos-node``; made if missing."""
    root = Path(os.environ.get("AGENTOS_HOME") or DEFAULT_HOME).expanduser().resolve()
    ws = NodeWorkspace(root, settings)
    ws.ensure()
    return ws


_SANDBOXES: dict[str, Sandbox] = {}


def sandbox_of(ws: Workspace) -> Sandbox:
    """The sandbox the driver's settings choose here, probed once per worker process."""
    key = ws.settings.sandbox.model_dump_json()
    if key not in _SANDBOXES:
        _SANDBOXES[key] = choose(ws.settings.sandbox)
    return _SANDBOXES[key]


def cluster_dir(ws: Workspace) -> Path:
    return ws.state_dir / "cluster"


# --- one attempt ----------------------------------------------------------------------------


Say = Callable[[object], None]


def run_attempt(
    spec: AttemptSpec,
    node: NodeInfo,
    fetch: Callable[[Any], bytes],
    cancel: threading.Event,
    say: Say,
) -> AttemptResult:
    """Make one attempt here. ``fetch`` gets the bytes of an object reference (a package,
    a bundle) from the object store; ``say`` sends a :class:`Started`, :class:`Note` or
    :class:`Health` to the driver as it happens; setting ``cancel`` stops the agent (its
    teardown still runs)."""
    timings: dict[str, float] = {}
    clock = time.monotonic()
    ws = node_workspace(spec.settings)
    try:
        package_dir = _prove(ws, spec.manifest, spec.package, spec.version, node, fetch)
        cache = bundles.cache_clone(cluster_dir(ws) / "repos" / spec.repo.key)
        if not bundles.has_commit(cache, spec.repo.start):
            try:
                data = fetch(spec.repo.bundle[0])
                with wt.repo_lock(cache):  # the node's other attempts add worktrees here
                    bundles.receive(cache, data, spec.repo.ref, spec.repo.start)
            except bundles.NeedHistory:
                return AttemptResult(node, need_history=True)
        timings["received"] = time.monotonic() - clock
        profile = node_profile(ws, cache, spec, node)
        env = gate_environment(profile, cache)
        missing = missing_programs(spec.checks, env)
        if missing:
            raise Refused(f"node {node.name}: " + "; ".join(missing))
    except Refused as exc:
        return AttemptResult(node, refused=exc.message)
    timings["proved"] = time.monotonic() - clock
    return _Attempt(ws, spec, node, cache, profile, package_dir, cancel, say, timings).run()


def _prove(
    ws: NodeWorkspace,
    manifest: Manifest,
    package: Shipment,
    version: str,
    node: NodeInfo,
    fetch: Any,
) -> Path:
    """What must hold before anything starts here; the package's folder, verified.
    :class:`Refused` naming the node and what is missing."""
    where = f"node {node.name}"
    if version != __version__:
        raise Refused(f"{where}: AgentOS {__version__} is installed, the driver runs {version}")
    lacking = [tool for tool in ("git", "tmux") if shutil.which(tool) is None]
    if lacking:
        raise Refused(f"{where}: {' and '.join(lacking)} not installed")
    if manifest.mcp:
        raise Refused(
            f"{where}: {manifest.ref} asks for AgentOS's MCP tools "
            f"({', '.join(manifest.mcp)}), which act on the driver's workspace: run it "
            "with the local backend"
        )
    try:
        sandbox_of(ws)
    except AgentOSError as exc:
        raise Refused(f"{where}: {exc.message}") from None
    try:
        package_dir = unpacked(ws, package, lambda: fetch(package.archive[0]))
    except Tampered as exc:
        problems = "; ".join(exc.problems) if exc.problems else exc.message
        raise Refused(
            f"{where}: {package.ref} refused, it is not what the driver's hub.lock "
            f"says ({problems}); remove {cluster_dir(ws) / 'packages' / package.sha256} "
            "there to fetch it again"
        ) from None
    except AgentOSError as exc:
        raise Refused(f"{where}: {package.ref} could not be unpacked: {exc}") from None
    try:
        get_runtime(manifest.runtime).preflight(manifest, package_dir)
    except AgentOSError as exc:
        raise Refused(f"{where}: {exc.message}") from None
    return package_dir


def attempt_key(run_id: str, agent: str, attempt: int) -> str:
    """An attempt's name on its node: its tmux socket's and its lease's."""
    return hashlib.sha256(f"{run_id}/{agent}/{attempt}".encode()).hexdigest()[:12]


def torn_down_here(key: str, wait: float) -> bool:
    """Whether the attempt ``key`` of this node has been torn down (its lease given up),
    waiting for it at most ``wait`` seconds."""
    lease = cluster_dir(node_workspace()) / "leases" / f"{key}.json"
    deadline = time.monotonic() + wait
    while lease.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class _Attempt:
    """The attempt itself, from its worktree to its teardown."""

    def __init__(
        self,
        ws: NodeWorkspace,
        spec: AttemptSpec,
        node: NodeInfo,
        cache: Path,
        profile: RepoProfile,
        package_dir: Path,
        cancel: threading.Event,
        say: Say,
        timings: dict[str, float],
    ) -> None:
        self.ws, self.spec, self.node, self.cache = ws, spec, node, cache
        self.profile, self.cancel, self.say, self.timings = profile, cancel, say, timings
        self.clock = time.monotonic() - timings.get("proved", 0.0)
        name = spec.agent
        key = attempt_key(spec.run_id, name, spec.attempt)
        self.socket = f"agentos-r-{key}"
        run_files = RunFiles.of(ws, spec.run_id)
        # Its files on this node, for this attempt (its log and outbox go back whole).
        self.files = AgentFiles(
            run_files.run_dir / f"{name}-{spec.attempt}",
            run_files.logs / f"{name}-{spec.attempt}.log",
        )
        self.agent = AgentState(
            card=spec.card,
            manifest=spec.manifest,
            package_dir=package_dir,
            checks=list(spec.checks),
            branch=f"agentos/{spec.run_id}/{name}-{spec.attempt}",
            worktree=ws.worktrees_dir / spec.run_id / f"{name}-{spec.attempt}",
            session=f"agentos-{spec.run_id}-{name}",
            files=self.files,
            base=spec.repo.base,
            attempts=spec.attempt - 1,
        )
        self.lease = cluster_dir(ws) / "leases" / f"{key}.json"
        self.fields: dict[str, Any] | None = None
        self.done = threading.Event()  # the attempt is over: its watchers stop
        # The lease is renewed until the teardown is through (a teardown cut short leaves it
        # to lapse, and the reaper ends the rest); the lock keeps a renewal from writing it
        # again after the teardown gave it up.
        self.torn_down = threading.Event()
        self.lease_lock = threading.Lock()

    def run(self) -> AttemptResult:
        sessions = Sessions(self.ws.root)
        sessions.socket = self.socket
        store = RunStore(self.ws)
        try:
            self._record(store)
            self.timings["recorded"] = time.monotonic() - self.clock
            ctx = self._context(sessions, store)
            self.timings["context"] = time.monotonic() - self.clock
            self._start_reaper()
            self.timings["reaper"] = time.monotonic() - self.clock
            renewing = threading.Thread(target=self._renew, daemon=True)
            renewing.start()
            self._setup(ctx)
            self.timings["setup"] = time.monotonic() - self.clock
            self.say(
                Started(
                    self.node,
                    self.socket,
                    self.agent.session,
                    str(self.agent.worktree),
                    time.time(),
                )
            )
            watching = threading.Thread(target=self._watcher(sessions), daemon=True)
            watching.start()
            driver = AgentDriver(ctx)
            try:
                driver.attempt(self.agent)
            except EnvironmentBroken as exc:
                self._environment_at_base(exc)  # the node's fault, or the agent's (then on)
            self.timings["attempt"] = time.monotonic() - self.clock
            result = self._result(driver)
            self.say(result)  # the driver has it now; the teardown below does not delay it
            return result
        finally:
            self.done.set()
            try:
                self._teardown(sessions, store)
            finally:
                self.torn_down.set()

    # -- before --------------------------------------------------------------------------

    def _record(self, store: RunStore) -> None:
        """The node's own record of the attempt (``agentos status`` and ``gc`` there see
        it; the run's record is the driver's)."""
        spec = self.spec
        # The attempts of one run on this node (workers of their own) make its record once.
        with FileLock(str(cluster_dir(self.ws) / "record.lock")):
            try:
                record = store.get(spec.run_id)
            except NotFound:
                store.create(spec.run_id, spec.request, self.cache)
                record = store.get(spec.run_id)
        store.update(
            spec.run_id,
            status=RunStatus.RUNNING,
            base_commit=spec.repo.base,
            started_at=record.started_at or time.time(),
            ended_at=None,
            options={"cluster": "node"},
        )
        if not any(a.agent == spec.agent for a in record.agents):
            store.add_agent(spec.run_id, spec.agent, spec.manifest.version, card=spec.card)
        store.update_agent(
            spec.run_id,
            spec.agent,
            status=AgentStatus.PENDING,
            branch=self.agent.branch,
            worktree=str(self.agent.worktree),
            session=self.agent.session,
        )

    def _context(self, sessions: Sessions, store: RunStore) -> RunContext:
        spec, ws = self.spec, self.ws
        sandbox = sandbox_of(ws)
        scene = Scene(
            ws.settings.sandbox,
            ws.root,
            self.cache,
            Path(os.environ.get("HOME", "/")),
            tuple(venv_paths(self.profile.venv, self.profile.python)),
        )

        def note(event: RunEvent) -> None:
            self.say(Note(event.message, event.status))

        return RunContext(
            ws,
            spec.run_id,
            spec.request,
            self.cache,
            spec.repo.base,
            self.profile,
            sessions,
            store,
            self.cancel,
            EventLog(spec.run_id, self.files.log.with_suffix(".events.jsonl"), note),
            [],
            sandbox,
            scene,
            None,  # a sandbox keeps agents out of the cache clone's git directory
            [],
            dict(spec.extra_env),
            spec.named,
            spec.allow,
            record_gate=self._keep_gate,
            ignored=IgnoredFiles(self.cache),
        )

    def _keep_gate(self, fields: dict[str, Any]) -> str:
        """The gate's receipt is the driver's to write: its fields go back with the result."""
        self.fields = {**fields, "node": self.node.name}
        return f"pending:{self.spec.attempt}"

    def _setup(self, ctx: RunContext) -> None:
        """As :meth:`AgentDriver.setup`, on the commit the attempt starts from."""
        agent, spec = self.agent, self.spec
        wt.add_worktree(
            self.cache,
            agent.worktree,
            agent.branch,
            spec.repo.start,
            sparse_paths=spec.manifest.paths or None,
        )
        for note in prepare_worktree(self.profile, agent.worktree, ctx.ignored):
            self.say(Note(f"{agent.name}: {note}"))
        agent.egress = open_egress(ctx.sandbox, spec.manifest, self.files)
        atomic_write(agent.worktree / "AGENTOS_CONTEXT.md", spec.context, durable=False)
        if spec.feedback:
            atomic_write(agent.worktree / "AGENTOS_FEEDBACK.md", spec.feedback, durable=False)
        self.lease_data(None).write(self.lease)

    def _environment_at_base(self, broken: EnvironmentBroken) -> None:
        """The gate's tests could not start: when they cannot start on the repository at
        the base either, this node's environment is broken (raised, naming the node); else
        the agent broke them, and its failed gate stands. (A local run asks the main
        checkout; a node's cache clone has none: a scratch worktree at the base stands in.)"""
        tree = self.ws.worktrees_dir / self.spec.run_id / f"_base-{self.spec.attempt}"
        with wt.repo_lock(self.cache):
            wt.run_git(
                self.cache, "worktree", "add", "-q", "--detach", str(tree), self.spec.repo.base
            )
        try:
            problems = check_profile(self.profile, tree)
        finally:
            wt.remove_worktree(self.cache, tree)
        if problems:
            raise EnvironmentBroken(
                f"node {self.node.name}: {broken.message}", file=broken.file, field=broken.field
            ) from None

    # -- the reaper and the health of the agent --------------------------------------------

    def lease_data(self, pane: int | None) -> Lease:
        return Lease(
            lapse=self.ws.settings.cluster.lease,
            socket=self.socket,
            pane=pane,
            check_pid=str(self.files.check_pid),
            run_dir=str(self.files.run_dir),
            worktree=str(self.agent.worktree),
            cache=str(self.cache),
            workspace=str(self.ws.root),
            run_id=self.spec.run_id,
            agent=self.spec.agent,
        )

    def _start_reaper(self) -> None:
        """The attempt's lease, then the node's reaper unless one runs."""
        self.lease.parent.mkdir(parents=True, exist_ok=True)
        self.lease_data(None).write(self.lease)
        ensure_running(self.lease.parent)

    def _renew(self) -> None:
        """Renew the lease while this worker lives (Ray ends it with the driver's job), until
        its teardown is through."""
        written: int | None = None
        while not self.torn_down.wait(RENEW):
            with self.lease_lock:
                if self.torn_down.is_set():
                    return
                try:
                    if self.agent.pane_pid != written:
                        written = self.agent.pane_pid
                        self.lease_data(written).write(self.lease)
                    else:
                        os.utime(self.lease)
                except OSError:
                    return

    def _watcher(self, sessions: Sessions) -> Callable[[], None]:
        """What watches the agent here: the guardian's cycle the run was handed
        (``AttemptSpec.watch``) when ``run.guardian`` is on, else :meth:`_watch`."""
        if not (self.spec.watch and self.ws.settings.run.guardian):
            return self._watch
        module, _, name = self.spec.watch.partition(":")
        watch = getattr(importlib.import_module(module), name)

        def report(kind: str, data: dict[str, Any]) -> None:
            if kind == "health":
                self.say(Health(**data))
            elif kind == "intervention":
                self.say(Intervened(data["fields"], data["at"]))

        return lambda: watch(
            self.ws, sessions, self.files, self.spec.run_id, self.spec.manifest, self.done, report
        )

    def _watch(self) -> None:
        """The agent's health for the driver, every guardian interval: whether its pane
        lives, since when its output is quiet, its last heartbeat."""
        interval = self.ws.settings.guardian.interval
        size, changed = -1, time.time()
        while not self.done.wait(interval):
            now = time.time()
            try:
                grown = self.files.log.stat().st_size
            except OSError:
                grown = -1
            if grown != size:
                size, changed = grown, now
            try:
                beat: float | None = now - self.files.heartbeat.stat().st_mtime
            except OSError:
                beat = None
            pane = self.agent.pane_pid
            alive = pane is not None and _running(pane)
            self.say(Health(alive, round(now - changed, 1), beat, now))

    # -- after ---------------------------------------------------------------------------

    def _result(self, driver: AgentDriver) -> AttemptResult:
        agent, spec = self.agent, self.spec
        head = (self.fields or {}).get("commit") or spec.repo.start
        data = b""
        commits: list[str] = []
        ref = f"refs/heads/{agent.branch}"  # at the commit the gate judged
        if head != spec.repo.start:
            commits = bundles.commits_between(self.cache, spec.repo.start, head)
            with wt.repo_lock(self.cache):  # as the driver does (RayDispatch._commits_back)
                out = bundles.create(self.cache, ref, [spec.repo.start])
            if out.tip != head:
                raise OperationFailed(f"{ref} moved from {head} to {out.tip} after the gate")
            data = out.data
        self.timings["bundled"] = time.monotonic() - self.clock
        feedback = ""
        if agent.status is AgentStatus.FAILED and agent.gate is not None:
            feedback = driver.feedback(agent)
        log = _read(self.files.log)[-LOG_BACK:]
        outbox = _read(self.files.kept_outbox)[:OUTBOX_MAX]
        self.files.kept_outbox.unlink(missing_ok=True)  # the driver keeps it now
        return AttemptResult(
            self.node,
            status=agent.status,
            exit_code=agent.exit_code,
            head=head,
            commits=tuple(commits),
            bundle=data,
            ref=ref,
            gate=agent.gate,
            fields=self.fields,
            limit=agent.limit,
            usage=agent.usage,
            sandbox=agent.sandbox,
            feedback=feedback,
            log=log,
            outbox=outbox,
            timings=self.timings,
        )

    def _teardown(self, sessions: Sessions, store: RunStore) -> None:
        """Always: the session and its tmux server, the agent's proxy, its worktree and
        its secret files, its lease (the reaper then exits)."""
        agent = self.agent
        try:
            sessions.kill(agent.session, agent.pane_pid)
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
            if agent.egress is not None:
                agent.egress.close()
            if agent.worktree.exists():
                try:
                    wt.restore_gitfile(self.cache, agent.worktree)
                    wt.remove_worktree(self.cache, agent.worktree)
                except AgentOSError:
                    shutil.rmtree(agent.worktree, ignore_errors=True)
                    wt.git_result(self.cache, "worktree", "prune", check=False)
            head = (self.fields or {}).get("commit")
            if head and head != self.spec.repo.start:  # a later attempt here starts from it
                wt.git_result(
                    self.cache, "update-ref", bundles.HAVE_PREFIX + head, head, check=False
                )
            wt.git_result(self.cache, "branch", "-D", agent.branch, check=False)
            ended = agent.status
            if ended in (AgentStatus.PENDING, AgentStatus.RUNNING, AgentStatus.GATING):
                ended = AgentStatus.CANCELLED
            store.update_agent(self.spec.run_id, agent.name, status=ended)
            record = store.get(self.spec.run_id)
            if not any(a.status in UNFINISHED for a in record.agents):
                passed = all(a.status is AgentStatus.PASSED for a in record.agents)
                ended_as = RunStatus.SUCCEEDED if passed else RunStatus.FAILED
                store.update(self.spec.run_id, status=ended_as, ended_at=time.time())
        finally:
            store.close()
            shutil.rmtree(self.files.run_dir, ignore_errors=True)
            shutil.rmtree(
                self.ws.state_dir / "gate" / self.spec.run_id / agent.name, ignore_errors=True
            )
        # Only a teardown that went through gives its lease up: one cut short (Ray's second
        # interrupt, an error) leaves it, and the reaper ends what is left when it lapses.
        with self.lease_lock:
            self.torn_down.set()
            self.lease.unlink(missing_ok=True)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _running(pid: int) -> bool:
    from agentos.run.store import pid_running

    return pid_running(pid)


# --- the repository's environment on the node -----------------------------------------------


def node_profile(ws: NodeWorkspace, cache: Path, spec: AttemptSpec, node: NodeInfo) -> RepoProfile:
    """How the repository is tested on this node: the driver's profile, with this node's
    environment in place of the driver's (named by ``cluster.node.environments``, or
    built from the repository's files). :class:`Refused` when it cannot be had."""
    driver = spec.repo.profile
    if driver.venv is None:
        # No environment of the repository's own: the interpreter on PATH, as at the driver.
        python = driver.python if driver.python and driver.python.exists() else None
        return replace(driver, repo=cache, python=python, problems=(), unasked=False)
    named = ws.node.environments.get(spec.repo.name)
    if named:
        venv = Path(named).expanduser()
        how = f"the environment cluster.node.environments names on node {node.name}: {venv}"
    else:
        venv = build_environment(ws, cache, spec, node)
        how = f"built on node {node.name} from the repository's files: {venv}"
    python = venv_python(venv)
    if python is None:
        raise Refused(f"node {node.name}: {venv} has no interpreter (bin/python)")
    test = driver.test
    if driver.python is not None:
        for old in (shlex.quote(str(driver.python)), str(driver.python)):
            test = test.replace(old, shlex.quote(str(python)))
    return replace(
        driver,
        repo=cache,
        python=python,
        venv=venv,
        test=test,
        reasons=(*driver.reasons, f"environment: {how}"),
        problems=(),
        unasked=False,  # the node's problems are found by collecting there, as before
    )


def build_environment(ws: NodeWorkspace, cache: Path, spec: AttemptSpec, node: NodeInfo) -> Path:
    """The repository's environment built on this node from its files at the base, once per
    digest of them (and of the pip arguments), under ``.agentos/cluster/envs/``."""
    base = spec.repo.base
    files = _dependency_files(cache, base)
    wanted = _requirements(files, spec.repo.needs_pytest)
    pip = list(ws.node.pip)
    digest = hashlib.sha256(
        repr((sorted(files.items()), wanted, pip, sys.version_info[:2])).encode()
    ).hexdigest()[:16]
    venv = cluster_dir(ws) / "envs" / f"{spec.repo.name}-{digest}"
    built = venv / ".agentos-built"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock"):
        if built.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        with _written(files) as folder:
            listed = [
                name
                for name in sorted(files)
                if name.startswith("requirements") and _requires_something(files[name])
            ]
            args = [a for name in listed for a in ("-r", str(folder / name))]
            if listed and spec.repo.needs_pytest:
                args.append("pytest")
            args = args or wanted
            create = [sys.executable, "-m", "venv", *([] if args else ["--without-pip"])]
            _run(node, [*create, str(venv)], "create its environment")
            python = venv_python(venv)
            assert python is not None
            if args:
                pip_install = [str(python), "-m", "pip", "install", "-q"]
                _run(
                    node,
                    [*pip_install, "--disable-pip-version-check", *pip, *args],
                    "install its environment",
                    cwd=folder,
                )
        atomic_write(built, f"{spec.repo.name}\n")
    return venv


def _dependency_files(cache: Path, base: str) -> dict[str, str]:
    """The repository's files that say what its environment holds, at ``base``."""
    names = wt.run_git(cache, "ls-tree", "--name-only", base).split("\n")
    chosen = [
        n
        for n in names
        if n in ENV_DEPENDENCY_FILES or (n.startswith("requirements") and n.endswith(".txt"))
    ]
    out = {}
    for name in chosen:
        out[name] = wt.run_git(cache, "show", f"{base}:{name}")
    return out


def _requirements(files: dict[str, str], needs_pytest: bool) -> list[str]:
    """What pip installs when no requirements file says: pyproject's dependencies and
    its test extras (never the project itself: the gate imports the worktree's code)."""
    wanted: list[str] = []
    try:
        project = tomllib.loads(files.get("pyproject.toml", "")).get("project", {})
    except tomllib.TOMLDecodeError:
        project = {}
    if isinstance(project, dict):
        wanted += [d for d in project.get("dependencies", []) if isinstance(d, str)]
        extras = project.get("optional-dependencies", {})
        if isinstance(extras, dict):
            for extra in ENV_EXTRAS:
                wanted += [d for d in extras.get(extra, []) if isinstance(d, str)]
    if needs_pytest and not any(
        d.split("[")[0].split(">")[0].split("=")[0].strip().lower() == "pytest" for d in wanted
    ):
        wanted.append("pytest")
    return list(dict.fromkeys(wanted))


def _requires_something(text: str) -> bool:
    """Whether a requirements file names anything (not only comments and blank lines)."""
    return any(line.split("#")[0].strip() for line in text.splitlines())


def _project_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()


class _written:
    """The dependency files written to a temporary folder (pip reads requirements files)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.folder: Path | None = None

    def __enter__(self) -> Path:
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="agentos-env-"))
        for name, text in self.files.items():
            (self.folder / name).write_text(text)
        return self.folder

    def __exit__(self, *exc: object) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _run(node: NodeInfo, argv: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=PIP_TIMEOUT, cwd=cwd, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"node {node.name}: could not {what}: {exc}") from None
    if out.returncode != 0:
        lines = [line for line in (out.stderr or out.stdout).splitlines() if line.strip()]
        raise Refused(
            f"node {node.name}: could not {what}: {lines[-1] if lines else out.returncode}"
        )


# --- a package run once (an eval's task) ----------------------------------------------------


@dataclass(frozen=True)
class OnceSpec:
    """A package run once on a node, on ``request``, as an eval's agent is (its answer
    written to ``$AGENTOS_OUTPUT_FILE``)."""

    job: str  # the eval's id: its scratch folder on the node
    name: str  # the task's name in it
    request: str
    manifest: Manifest
    package: Shipment
    settings: Settings  # the driver's
    timeout: float
    output_max: int  # bytes of the answer read
    version: str = __version__


@dataclass(frozen=True)
class OnceResult:
    node: NodeInfo
    refused: str | None = None
    answer: str | None = None  # None: it wrote none
    seconds: float = 0.0
    exit_code: int | None = None
    limit: str | None = None
    usage: Usage | None = None


def bundled_suites() -> Path:
    """The eval suites AgentOS's package holds (their answers among them), on this node."""
    import agentos

    return Path(agentos.__file__).resolve().parent / "evals" / "_bundled"


def run_once_here(
    spec: OnceSpec, node: NodeInfo, fetch: Callable[[Any], bytes], cancel: threading.Event
) -> OnceResult:
    """Run the package once here, confined as on the driver, with the suites' folders
    hidden; its answer. Refused (nothing ran) as an attempt is."""
    from agentos.run.oneshot import read_output, run_once

    ws = node_workspace(spec.settings)
    try:
        package_dir = _prove(ws, spec.manifest, spec.package, spec.version, node, fetch)
    except Refused as exc:
        return OnceResult(node, refused=exc.message)
    base = ws.state_dir / "evals" / spec.job
    files = AgentFiles(base / "run" / spec.name, base / "logs" / f"{spec.name}.log")
    workdir = base / "work" / spec.name
    scene = Scene(
        ws.settings.sandbox,
        ws.root,
        base,
        Path(os.environ.get("HOME", "/")),
        also_hidden=(bundled_suites(),),
    )
    answer_file = files.io / "answer"
    try:
        done = run_once(
            ws,
            sandbox_of(ws),
            scene,
            spec.manifest,
            package_dir,
            run_id=spec.job,
            workdir=workdir,
            request=spec.request,
            files=files,
            timeout=spec.timeout,
            env={"AGENTOS_OUTPUT_FILE": str(answer_file)},
            cancel=cancel,
        )
        answer = read_output(answer_file, spec.output_max)
    finally:
        shutil.rmtree(files.run_dir, ignore_errors=True)  # env files: secrets
        shutil.rmtree(workdir, ignore_errors=True)
    return OnceResult(node, None, answer, done.seconds, done.exit_code, done.limit, done.usage)
