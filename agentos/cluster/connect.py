"""Joining the Ray cluster ``cluster.address`` names, as its driver.

Ray is imported here and below only: the CLI imports none of it unless the backend is
``ray``. Ray's usage statistics are off (``RAY_USAGE_STATS_ENABLED=0``): nothing is sent
anywhere. On Linux, Ray binds a machine's external address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` says otherwise (a cluster of one machine, such as
the tests', stays on 127.0.0.1).
"""

from __future__ import annotations

import os
import socket
import threading
from types import ModuleType

from agentos.errors import BadInput, MissingTool
from agentos.workspace.layout import Workspace

NAMESPACE = "agentos"
_LOCK = threading.Lock()


def ray_module() -> ModuleType:
    """``ray``, or :class:`MissingTool` with the install line."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise MissingTool(
            "Ray is not installed: pip install 'agentos-kit[ray]'", field="cluster.backend"
        ) from None
    return ray


PROBE_TIMEOUT = 3.0  # seconds to reach the head's port before Ray is asked (it waits minutes)


def _unreachable(address: str) -> str | None:
    """Why nothing listens at ``HOST:PORT`` (``ray://HOST:PORT``), or None. ``auto`` is
    Ray's to find (it answers at once when no cluster runs here)."""
    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def connect(ws: Workspace, address: str | None = None) -> ModuleType:
    """Join the cluster (``address``, else ``cluster.address`` of the workspace) once per
    process; ``ray``. A cluster that does not answer is bad input naming the address."""
    ray = ray_module()
    with _LOCK:
        if ray.is_initialized():
            return ray
        where = address or ws.settings.cluster.address
        problem = _unreachable(where)
        if problem:
            raise BadInput(
                f"no Ray cluster answers at {where} ({problem})",
                file=ws.settings_file,
                field="cluster.address",
                hint="start one with `agentos cluster join --head`, or fix the address",
            )
        try:
            ray.init(
                address=where,
                namespace=NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
                include_dashboard=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            detail = " ".join(str(exc).split())[:300]
            raise BadInput(
                f"no Ray cluster answers at {where} ({detail})",
                file=ws.settings_file,
                field="cluster.address",
                hint="start one with `agentos cluster join --head`, or fix the address",
            ) from None
    return ray
