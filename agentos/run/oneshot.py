"""An agent package run once, outside tmux: as a run's agent is (its scrubbed environment,
its wrapper, its sandbox) but in a folder of AgentOS's choosing, until it exits or its time
ends. Evals run their agents and judges this way, evolve its meta agent.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from agentos.hub.manifest import Manifest
from agentos.run.driver import confine_agent, open_egress
from agentos.run.launch import prepare
from agentos.runtimes import AgentTask
from agentos.runtimes.agent_tools import AgentToolServer
from agentos.runtimes.usage import Usage, take_usage
from agentos.sandbox import Group, Sandbox
from agentos.sandbox.confine import Scene
from agentos.shared.fs import read_regular
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

CANCEL_POLL = 0.1  # seconds between looks at the cancel event


@dataclass(frozen=True)
class OneShot:
    seconds: float
    exit_code: int | None  # None: it wrote no exit status (killed, or never started)
    limit: str | None  # "time" when its time ran out, "cancelled" when it was stopped, "disk"
    usage: Usage | None  # what it reported it used ($AGENTOS_USAGE_FILE)


def run_once(
    ws: Workspace,
    sandbox: Sandbox,
    scene: Scene,
    manifest: Manifest,
    package_dir: Path,
    *,
    run_id: str,
    workdir: Path,
    request: str,
    files: AgentFiles,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    attempt: int = 1,
) -> OneShot:
    """Run the package on ``request`` in ``workdir`` (writable to it, with its own files
    ``files.io``), its environment completed with ``env``, until it exits, ``timeout``
    seconds pass or ``cancel`` is set; everything it started dies with it."""
    workdir.mkdir(parents=True, exist_ok=True)
    task = AgentTask(
        run_id=run_id,
        agent=manifest.name,
        manifest=manifest,
        package_dir=package_dir,
        worktree=workdir,
        repo=workdir,
        workspace=ws.root,
        request=request,
        files=files,
        attempt=attempt,
        confined=sandbox.confined,
    )
    groups: list[Group] = []

    def environment(base: dict[str, str]) -> dict[str, str]:
        return {**base, **(env or {})}

    def confine(argv: list[str], agent_env: dict[str, str]) -> list[str]:
        confined, group, _ = confine_agent(
            sandbox, scene, ws, manifest, package_dir, workdir, files, argv, agent_env
        )
        groups.append(group)
        return confined

    # Its proxy and its MCP tools (when its package asks for them) live as long as it does.
    egress = open_egress(sandbox, manifest, files)
    tools = None
    started = time.monotonic()
    limit = None
    try:
        argv, _ = prepare(
            task, files, environment=environment, confine=confine, relay=egress is not None
        )
        tools = AgentToolServer.start(ws, workdir, manifest, files)
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        limit = _wait(proc, started + timeout, cancel, groups)
        if limit is None and any(g.disk_hit for g in groups):
            limit = "disk"  # its control group was killed at the quota
        if limit is not None:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        for group in groups:
            group.close()
        if tools is not None:
            tools.stop()
        if egress is not None:
            egress.close()
    used, _ = take_usage(files.usage)  # a report that is not one is none
    return OneShot(round(time.monotonic() - started, 3), files.exit_code(), limit, used)


def _wait(
    proc: subprocess.Popen[bytes],
    deadline: float,
    cancel: threading.Event | None,
    groups: Sequence[Group] = (),
) -> str | None:
    """None when the process exited; else why it must be stopped (``time``,
    ``cancelled``, ``disk``). The exit is seen the moment it happens (a pidfd, where Linux
    has one; ``Popen.wait`` with a timeout polls with sleeps of up to 50 ms)."""
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "time"
            if cancel is not None and cancel.is_set():
                return "cancelled"
            if any(g.disk_hit for g in groups):
                return "disk"
            step = min(left, CANCEL_POLL)
            if pidfd is not None:
                if select.select([pidfd], [], [], step)[0]:
                    proc.wait()
                    return None
                continue
            try:
                proc.wait(timeout=step)
                return None
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


def read_output(path: Path, limit: int) -> str | None:
    """What an agent wrote to its output file (a regular file only, never through a link,
    never a FIFO waited on; at most ``limit`` bytes). None: it wrote none."""
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        return None
    return None if data is None else data.decode("utf-8", errors="replace")
