"""Fan-outs on the cluster besides runs: an eval's tasks, each a package run once on a node.

A task asks Ray for an ``agentos_slot`` (and its runtime, and ``cluster.resources``), spread
over the nodes, so ``eval run --backend ray --jobs N`` keeps N tasks on the cluster at
once. The package travels as a run's does (its archive by sha256; a hub package checked
against ``hub.lock``, an evolve candidate against the digest computed where it was made);
the task's answer comes back and is graded here, by the same code as a local eval, so the
scores are the same. A task lost with its node is run again on another (up to
:data:`LOST_RETRIES` times), the node named in the eval's events.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agentos.cluster.connect import connect
from agentos.cluster.dispatch import RUNTIME_RESOURCES, SLOT, TOOL_AMOUNT
from agentos.cluster.node import OnceResult, OnceSpec
from agentos.cluster.packages import Shipment, described, locked, pack
from agentos.errors import AgentOSError, OperationFailed
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.workspace.layout import Workspace

LOST_RETRIES = 2
POLL = 0.2
CANCEL_WAIT = 60.0


class TaskCancelled(Exception):
    """The task was cancelled (the eval's cancel) and has ended on its node."""


class RemoteOnce:
    """Runs packages once on the cluster for one job (an eval)."""

    def __init__(self, ws: Workspace, job: str, *, say: Any = None) -> None:
        self.ws, self.job = ws, job
        self.ray = connect(ws)
        self.lock = threading.Lock()
        self.shipments: dict[str, Shipment] = {}
        self.say = say or (lambda _line: None)

    def run(
        self,
        manifest: Manifest,
        package_dir: Path,
        request: str,
        name: str,
        *,
        timeout: float,
        output_max: int,
        cancel: threading.Event | None = None,
    ) -> OnceResult:
        """Run the package once on a node; what it answered. A node that refuses it is
        :class:`OperationFailed` naming the node and what it lacks."""
        from agentos.cluster.tasks import ONCE, CancelledHere, follow

        spec = OnceSpec(
            job=self.job,
            name=name,
            request=request,
            manifest=manifest,
            package=self._shipment(manifest, package_dir),
            settings=self.ws.settings,
            timeout=timeout,
            output_max=output_max,
        )
        stop = cancel or threading.Event()
        lost: list[str] = []
        for _ in range(LOST_RETRIES + 1):
            stream = ONCE.options(
                resources=self._resources(manifest), num_cpus=0, scheduling_strategy="SPREAD"
            ).remote(spec)
            try:
                for item in follow(stream, stop, POLL, CANCEL_WAIT):
                    if isinstance(item, OnceResult):
                        if item.refused:
                            raise OperationFailed(item.refused)
                        return item
            except CancelledHere:
                raise TaskCancelled() from None
            except self.ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, AgentOSError):
                    raise exc.cause from None
                raise OperationFailed(
                    f"task {name}: {type(exc.cause).__name__}: {exc.cause}"
                ) from None
            except self.ray.exceptions.RayError as exc:
                lost.append(f"{type(exc).__name__}")
                self.say(f"task {name} lost ({type(exc).__name__}); submitted again")
                continue
            lost.append("ended without a result")
        raise OperationFailed(f"task {name} was lost {len(lost)} times: {', '.join(lost)}")

    def _resources(self, manifest: Manifest) -> dict[str, float]:
        wanted: dict[str, float] = {SLOT: 1}
        tool = RUNTIME_RESOURCES.get(manifest.runtime)
        if tool:
            wanted[tool] = TOOL_AMOUNT
        wanted.update(self.ws.settings.cluster.resources)
        return wanted

    def _shipment(self, manifest: Manifest, package_dir: Path) -> Shipment:
        """A hub package by its hub.lock entry; any other (an evolve candidate) by the
        digest of its folder as it is now."""
        key = f"{manifest.ref}:{package_dir}"
        with self.lock:
            if key not in self.shipments:
                hub = self.ws.hub_dir.resolve()
                if package_dir.resolve().is_relative_to(hub):
                    sha, files = locked(Hub(self.ws.hub_dir), manifest.name, manifest.version)
                else:
                    sha, files = described(package_dir)
                prefix = f"{manifest.name}-{manifest.version}"
                data = pack(package_dir, prefix)
                self.shipments[key] = Shipment(
                    manifest.name, manifest.version, sha, files, [self.ray.put(data)]
                )
            return self.shipments[key]
