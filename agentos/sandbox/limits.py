"""Resource limits for a confined process tree: a control group where the kernel offers one
(memory and the number of processes, for the whole tree), rlimits otherwise and always (CPU
seconds and file size, per process).

A control group is made per agent or check under AgentOS's own directory
(``/sys/fs/cgroup/agentos/`` on cgroup v2, ``/sys/fs/cgroup/{memory,pids}/agentos/`` on v1);
the process enters it before it execs the sandbox (:meth:`Group.enter_command`), so every
child is inside from its first instruction. :meth:`Group.close` kills whatever is left in it
and removes it, and says whether the memory limit killed something.

Where no control group can be made (no write access, no controller), memory falls back to
an address-space rlimit and processes to RLIMIT_NPROC, which does not bind root: ``agentos
sandbox doctor`` says which is in force.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentos.sandbox.disk import DiskWatch

CGROUP_ROOT = Path("/sys/fs/cgroup")
_NAME = "agentos"


@dataclass(frozen=True)
class Resolved:
    """Limits in force for one agent or check (None: no limit)."""

    memory: int | None
    cpu: float | None
    processes: int | None
    file_size: int | None
    disk: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "memory": self.memory,
            "cpu": self.cpu,
            "processes": self.processes,
            "file_size": self.file_size,
            "disk": self.disk,
        }


def cgroup_mode(root: Path = CGROUP_ROOT) -> str | None:
    """``v2`` or ``v1`` when AgentOS can make control groups with a memory and a pids
    controller here, else None."""
    if (root / "cgroup.controllers").is_file():
        controllers = (root / "cgroup.controllers").read_text().split()
        if {"memory", "pids"} <= set(controllers) and os.access(root, os.W_OK):
            return "v2"
        return None
    if all(os.access(root / c, os.W_OK) for c in ("memory", "pids")):
        return "v1"
    return None


class Group:
    """One control group (or none), for one agent attempt or one check."""

    def __init__(self, limits: Resolved, *, root: Path = CGROUP_ROOT) -> None:
        self.limits = limits
        self.mode = cgroup_mode(root) if limits.memory or limits.processes else None
        self.dirs: list[Path] = []
        self.disk: DiskWatch | None = None
        if self.mode is not None:
            try:
                self._make(root, f"{os.getpid()}-{secrets.token_hex(4)}")
            except OSError:  # no room, no rights: rlimits only
                self.close()
                self.mode, self.dirs = None, []

    def _make(self, root: Path, name: str) -> None:
        if self.mode == "v2":
            parent = root / _NAME
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):  # already enabled, or not delegable
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
            group = parent / name
            group.mkdir()
            self.dirs = [group]
            if self.limits.memory:
                (group / "memory.max").write_text(str(self.limits.memory))
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
            if self.limits.processes:
                (group / "pids.max").write_text(str(self.limits.processes))
            return
        memory = root / "memory" / _NAME / name
        pids = root / "pids" / _NAME / name
        for d in (memory, pids):
            d.mkdir(parents=True)
            self.dirs.append(d)
        if self.limits.memory:
            (memory / "memory.limit_in_bytes").write_text(str(self.limits.memory))
            with contextlib.suppress(OSError):  # no swap accounting: memory alone binds
                (memory / "memory.memsw.limit_in_bytes").write_text(str(self.limits.memory))
        if self.limits.processes:
            (pids / "pids.max").write_text(str(self.limits.processes))

    def enter_command(self, argv: list[str], first: Sequence[str] = ()) -> list[str]:
        """``argv`` run by a shell that first runs the shell steps ``first``, moves itself
        into the group and sets the rlimits, then execs ``argv`` (so its whole tree is
        inside)."""
        steps = [*first]
        steps += [f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs]
        ulimits = []
        if self.limits.cpu:
            ulimits.append(f"-t {max(1, round(self.limits.cpu))}")
        if self.limits.file_size:
            ulimits.append(f"-f {max(1, self.limits.file_size // 512)}")  # 512-byte blocks
        if self.mode is None and self.limits.memory:
            ulimits.append(f"-v {max(1, self.limits.memory // 1024)}")
        if self.mode is None and self.limits.processes:
            ulimits.append(f"-u {self.limits.processes}")
        steps += [f"ulimit {u}" for u in ulimits]  # one resource per ulimit, for dash
        if not steps:
            return argv
        script = " && ".join(steps) + ' && exec "$@"'
        return ["/bin/sh", "-c", script, "agentos-sandbox", *argv]

    def watch_disk(
        self, roots: Sequence[Path], quota: int, mounts: Sequence[str] = ("/tmp",)
    ) -> None:
        """Keep the files written under ``roots`` and in the sandbox's tmpfs ``mounts``
        within ``quota`` bytes: past it, every process of the group is killed and
        :attr:`disk_hit` is set (see :mod:`agentos.sandbox.disk`)."""
        from agentos.sandbox.disk import DiskWatch

        self.disk = DiskWatch(roots, quota, self.kill, views=lambda: self._views(mounts))

    @property
    def disk_hit(self) -> bool:
        return self.disk is not None and self.disk.hit

    def _views(self, mounts: Sequence[str]) -> list[str]:
        """``mounts`` as seen by a process of the group inside its sandbox (the first one
        in another mount namespace than this process's), through ``/proc/<pid>/root``."""
        with contextlib.suppress(OSError):
            own = os.readlink("/proc/self/ns/mnt")
            for d in self.dirs:
                for pid in _procs(d):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/ns/mnt") != own:
                            return [f"/proc/{pid}/root{m}" for m in mounts]
        return []

    def kill(self) -> None:
        """Kill every process of the group now (it stays, to be closed)."""
        for d in self.dirs:
            for pid in _procs(d):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def memory_killed(self) -> bool:
        """Whether the memory limit killed a process of the group."""
        return self._counted(("memory.events", "memory.oom_control"), "oom_kill")

    def processes_hit(self) -> bool:
        """Whether a fork was refused at the process limit."""
        return self._counted(("pids.events",), "max")

    def _counted(self, files: tuple[str, ...], key: str) -> bool:
        """Whether one of the group's ``key value`` event files counts ``key`` above 0."""
        for d in self.dirs:
            for name in files:
                path = d / name
                if path.is_file():
                    for line in path.read_text().splitlines():
                        found, _, value = line.partition(" ")
                        if found == key and value.strip() not in ("", "0"):
                            return True
        return False

    def close(self) -> None:
        """Kill what is left in the group, then remove it."""
        if self.disk is not None:
            self.disk.close()
        for d in self.dirs:
            _remove(d)


def _remove(group: Path) -> None:
    """Kill every process of a control group, then remove it."""
    pause = 0.002  # a killed process is gone within a few milliseconds, mostly
    for _ in range(50):
        pids = _procs(group)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    with contextlib.suppress(OSError):
        group.rmdir()


def _procs(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def reap_orphans(root: Path = CGROUP_ROOT) -> list[str]:
    """Control groups whose AgentOS process died (its pid is the first part of the name):
    what is left in them is killed and they are removed. Returns their names."""
    parents = [root / _NAME, root / "memory" / _NAME, root / "pids" / _NAME]
    reaped: list[str] = []
    for parent in parents:
        if not parent.is_dir():
            continue
        for group in parent.iterdir():
            owner = group.name.split("-", 1)[0]
            if not group.is_dir() or not owner.isdigit() or Path(f"/proc/{owner}").exists():
                continue
            _remove(group)
            if not group.exists() and group.name not in reaped:
                reaped.append(group.name)
    return reaped
