"""Running one command confined, start to end: ``agentos sandbox run`` and the self-test of
``agentos sandbox doctor``."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentos.sandbox import Sandbox, limits_hit
from agentos.sandbox.limits import Group
from agentos.sandbox.policy import Policy
from agentos.sandbox.settings import SandboxSettings


@dataclass(frozen=True)
class Confined:
    exit_code: int
    limit: str | None  # memory, processes, cpu, file_size, time
    wall: float
    cpu: float
    backend: str

    def as_dict(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "limit": self.limit,
            "wall": round(self.wall, 3),
            "cpu": round(self.cpu, 3),
            "backend": self.backend,
        }


def run_confined(
    sandbox: Sandbox,
    policy: Policy,
    argv: list[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    capture: bool = False,
) -> tuple[Confined, str]:
    """Run ``argv`` confined by ``policy``; its exit code, the limit that stopped it if
    one did, wall and CPU time. With ``capture``, its output (stdout and stderr) is
    returned instead of passed through."""
    group = Group(policy.limits)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    limit: str | None = None
    output = ""
    try:
        proc = subprocess.Popen(
            sandbox.command(policy, argv, group),
            cwd=policy.cwd,
            env=env,
            stdin=subprocess.DEVNULL if capture else None,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
            output = out.decode("utf-8", "replace") if out else ""
        except subprocess.TimeoutExpired:
            limit = "time"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            output = out.decode("utf-8", "replace") if out else ""
        code = proc.returncode
    finally:
        wall = time.monotonic() - started
        limit = limit or limits_hit(group, None)
        group.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    limit = limit or limits_hit(None, code)
    return Confined(code, limit, wall, cpu, sandbox.backend), output


def view_here(settings: SandboxSettings, workspace: Path) -> list[dict[str, object]]:
    """What a process confined here sees of the file system, besides the paths of its
    own run (see :func:`agentos.sandbox.view.listing`): the system, the tools on this
    PATH and where they live, ``sandbox.read``; the workspace hidden."""
    from agentos.sandbox import policy, runtime_paths
    from agentos.sandbox.view import listing

    home = Path(os.environ.get("HOME", "/"))
    listed = [Path(p).expanduser() for p in settings.read]
    pol = policy(
        settings=settings,
        package=None,
        hidden=[workspace],
        writable=[],
        readable=runtime_paths(os.environ.get("PATH", ""), home, listed),
        home=home,
        home_dir=None,
        cwd=Path("/"),
    )
    return listing(pol)


@dataclass(frozen=True)
class Probe:
    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def self_test(sandbox: Sandbox) -> list[Probe]:
    """Prove the sandbox here: the network is blocked, the memory cap kills, a hidden
    directory is empty and read-only, and a double-forked process does not outlive it."""
    from agentos.sandbox import SandboxSettings, policy, runtime_paths

    probes: list[Probe] = []
    with tempfile.TemporaryDirectory(prefix="agentos-sandbox-") as tmp:
        root = Path(tmp)
        secret = root / "hidden" / "secret.txt"
        secret.parent.mkdir()
        secret.write_text("do not read\n")
        work = root / "work"
        work.mkdir()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        settings = SandboxSettings(memory=64 << 20, processes=64)
        pol = policy(
            settings=settings,
            package=None,
            hidden=[root / "hidden"],
            writable=[work],
            readable=runtime_paths(os.environ.get("PATH", ""), Path.home()),
            home=Path.home(),
            home_dir=None,
            cwd=work,
        )
        py = sys.executable
        try:
            net, out = run_confined(
                sandbox,
                pol,
                [py, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"],
                timeout=30,
                capture=True,
            )
        finally:
            listener.close()
        probes.append(
            Probe(
                "network blocked",
                net.exit_code != 0,
                "a connection to the host's loopback was refused"
                if net.exit_code != 0
                else "a sandboxed process reached the host's loopback",
            )
        )
        mem, _ = run_confined(
            sandbox, pol, [py, "-c", "x = bytearray(256 << 20)"], timeout=60, capture=True
        )
        probes.append(
            Probe(
                "memory cap",
                mem.limit == "memory" or (mem.exit_code != 0 and sandbox.backend == "none"),
                f"256 MB under a 64 MB cap: exit {mem.exit_code}, limit {mem.limit}",
            )
        )
        _, out = run_confined(
            sandbox,
            pol,
            ["/bin/sh", "-c", f"cat {secret}; echo x > {secret.parent}/new"],
            timeout=30,
            capture=True,
        )
        hidden_ok = "do not read" not in out and not (secret.parent / "new").exists()
        probes.append(
            Probe(
                "hidden and read-only",
                hidden_ok,
                "a hidden directory was empty and refused a write"
                if hidden_ok
                else "a hidden file was read or written",
            )
        )
        _, out = run_confined(
            sandbox,
            pol,
            [
                "/bin/sh",
                "-c",
                f"umount -l {secret.parent}; sed -n 's/^CapEff:\\s*//p' /proc/self/status",
            ],
            timeout=30,
            capture=True,
        )
        held = out.strip().splitlines()[-1:] or ["?"]
        none_held = held[0].strip("0") == ""
        probes.append(
            Probe(
                "no capabilities",
                none_held and sandbox.confined,
                "no capability inside (nothing can be unmounted)"
                if none_held
                else f"capabilities held inside: {held[0]}",
            )
        )
        marker = f"agentos-sandbox-probe-{os.getpid()}"
        run_confined(
            sandbox,
            pol,
            ["/bin/bash", "-c", f"setsid bash -c 'exec -a {marker} sleep 1000' & sleep 0.2"],
            timeout=30,
            capture=True,
        )
        time.sleep(0.2)
        left = _processes_named(marker)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        probes.append(
            Probe(
                "no escape of a double fork",
                not left,
                "a setsid double fork died with the sandbox"
                if not left
                else f"a setsid double fork outlived the sandbox (pid {left[0]})",
            )
        )
    return probes


def _processes_named(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if cmdline == marker:
            found.append(int(entry.name))
    return found
