"""Confinement: every agent, every check and everything later that runs code a model wrote
runs through here, and nothing else starts such code.

:func:`choose` picks the backend from ``sandbox.backend`` in agentos.yaml: ``bwrap``
(bubblewrap, preferred), ``unshare`` (util-linux namespaces, when bubblewrap is missing) or
``none`` (limits and the scrubbed environment only). ``auto`` takes the first that works
here; with neither, it refuses (:class:`~agentos.errors.MissingTool`, exit 2) unless
``sandbox.required: false``, and then every receipt says ``sandbox: none``.

A :class:`Policy` (:mod:`agentos.sandbox.policy`) says what one process may see and do;
:meth:`Sandbox.command` turns an argv into the confined argv, with its resource limits
(:mod:`agentos.sandbox.limits`) applied before the sandbox starts.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from agentos.errors import MissingTool
from agentos.sandbox.backends import bwrap_argv, unshare_argv
from agentos.sandbox.limits import Group, Resolved, cgroup_mode
from agentos.sandbox.policy import Policy, policy, resolve_limits, runtime_paths
from agentos.sandbox.settings import Limits, PackageSandbox, SandboxSettings, parse_size

__all__ = [
    "KEYRING_HINT",
    "Group",
    "Limits",
    "PackageSandbox",
    "Policy",
    "Resolved",
    "Sandbox",
    "SandboxSettings",
    "choose",
    "keyctl",
    "limits_hit",
    "parse_size",
    "policy",
    "resolve_limits",
    "runtime_paths",
]

INSTALL_HINT = (
    "install bubblewrap (apt-get install bubblewrap; scripts/setup does it as root), or set "
    "`sandbox: {required: false}` in agentos.yaml to run agents with limits only"
)


@dataclass(frozen=True)
class Sandbox:
    backend: str  # "bwrap" | "unshare" | "none"
    program: str | None  # the bwrap or unshare executable
    reason: str  # why this backend

    @property
    def confined(self) -> bool:
        return self.backend != "none"

    def command(self, policy: Policy, argv: list[str], group: Group | None = None) -> list[str]:
        """``argv`` confined by ``policy``: with a session keyring of its own, inside the
        control group (when ``group``), with its rlimits, in the sandbox."""
        if self.backend == "bwrap":
            assert self.program is not None
            inner = bwrap_argv(self.program, policy, argv)
        elif self.backend == "unshare":
            assert self.program is not None
            inner = unshare_argv(self.program, policy, argv)
        else:
            inner = argv
        first = _fresh_keyring() if self.confined else ()
        if group is not None:
            return group.enter_command(inner, first)
        if first:
            return ["/bin/sh", "-c", f'{first[0]}; exec "$@"', "agentos-sandbox", *inner]
        return inner

    def as_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "program": self.program,
            "reason": self.reason,
            "cgroups": cgroup_mode(),
            "keyring": "its own" if self.confined and keyctl() else "the caller's",
        }


@lru_cache(maxsize=1)
def keyctl() -> str | None:
    """keyutils' ``keyctl``, when installed."""
    return shutil.which("keyctl", path="/usr/local/bin:/usr/bin:/bin")


def _fresh_keyring() -> tuple[str, ...]:
    """The shell step that gives the shell starting the sandbox a new, empty session
    keyring (``keyctl new_session`` gives one to its parent): keyrings are not namespaced,
    and a confined process would read the keys of the one it inherits (a login's links the
    user's keyring)."""
    program = keyctl()
    return (f"{shlex.quote(program)} new_session >/dev/null 2>&1 || true",) if program else ()


KEYRING_HINT = (
    "install keyutils (apt-get install keyutils; scripts/setup does it as root): without "
    "it a confined process can read the keys of the session keyring it was started from"
)


@lru_cache(maxsize=8)
def _works(backend: str, program: str) -> str | None:
    """None when ``backend`` can confine a process here, else why not (one line)."""
    probe = ["/bin/true"]
    if backend == "bwrap":
        argv = [program, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--", *probe]
    else:
        argv = [program, "--mount", "--pid", "--fork", "--net", "--", *probe]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if out.returncode != 0:
        detail = (out.stderr or out.stdout).strip().splitlines()
        return detail[-1] if detail else f"exit {out.returncode}"
    return None


def choose(settings: SandboxSettings) -> Sandbox:
    """The backend ``settings`` ask for, checked to work here."""
    wanted = settings.backend
    if wanted == "none":
        return Sandbox("none", None, "sandbox.backend: none in agentos.yaml")
    tried: list[str] = []
    for backend in ("bwrap", "unshare") if wanted == "auto" else (wanted,):
        program = shutil.which(backend)
        if program is None:
            tried.append(f"{backend} is not installed")
            continue
        problem = _works(backend, program)
        if problem is not None:
            tried.append(f"{backend} does not work here ({problem})")
            continue
        why = "preferred" if backend == "bwrap" else "bwrap is missing"
        return Sandbox(backend, program, f"{backend} ({why})" if wanted == "auto" else backend)
    if wanted == "auto" and not settings.required:
        return Sandbox("none", None, "; ".join(tried) + "; sandbox.required is false")
    raise MissingTool(
        f"no sandbox for agents: {'; '.join(tried)}: {INSTALL_HINT}", field="sandbox.backend"
    )


def limits_hit(group: Group | None, exit_code: int | None) -> str | None:
    """Which limit ended a process, when one did: ``disk``, ``memory``, ``processes``,
    ``cpu`` (SIGXCPU), ``file_size`` (SIGXFSZ)."""
    if group is not None and group.disk_hit:
        return "disk"
    if group is not None and group.memory_killed():
        return "memory"
    if exit_code in (128 + 24, -24):
        return "cpu"
    if exit_code in (128 + 25, -25):
        return "file_size"
    if group is not None and group.processes_hit():
        return "processes"
    return None
