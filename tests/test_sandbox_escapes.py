"""Escape attempts in the style of public sandbox-breakout suites (tests/_escape_probes.py),
each run confined by every backend here (bwrap, unshare), as root and as an unprivileged
user, against real host processes, a real tmux server, a real pty and real control groups.

Every attempt has its positive control: the same probe, run with ``backend: none`` by the
same user, gets what it is after. A probe whose control cannot succeed here (no /dev/mem on
this machine, a cgroup file an unprivileged user may not write even unconfined) proves
nothing and is skipped, saying why; it never counts as contained.

And the egress allow-list's wildcard: ``*.example.com`` through the real proxy.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import tempfile
import termios
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _escape_probes import PROBES
from conftest import Lines, wait_until

from agentos.errors import MissingTool
from agentos.sandbox import Group, Sandbox, SandboxSettings, choose, policy

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"  # the system's: AgentOS's own may live in a home only root enters
BACKENDS = ("bwrap", "unshare")
USERS = {"root": 0, "nobody": 65534}

pytestmark = [
    pytest.mark.skipif(
        platform.system() != "Linux" or platform.machine() != "x86_64",
        reason="the probes make x86_64 Linux system calls",
    ),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the battery runs as root and as nobody: only root starts both"
    ),
    pytest.mark.skipif(not Path(PYTHON).exists(), reason=f"no {PYTHON} (the probes' interpreter)"),
]

# Why a positive control cannot succeed, where it is known (else the probe's own error).
CANNOT = {
    "dev-mem": "this machine has no /dev/mem",
    "raw-disk": "this machine refuses to open its disk even to root outside any sandbox "
    "(the probe mknod-disk still shows that no sandbox can make a node of it)",
    "kernel-module": "this kernel loads no modules (no /proc/sys/kernel/modprobe)",
}
CANNOT_UNPRIVILEGED = (
    "an unprivileged user cannot do this even without a sandbox (permissions or a "
    "capability it does not hold), so a refusal inside would prove nothing"
)


def must_work(user: str) -> set[str]:
    """Controls that work wherever these tests run (their targets are the test's own, and
    they need nothing of the kernel's configuration): a failure there is a broken probe,
    not a probe that cannot run here."""
    needs_nothing = {
        "proc-environ",
        "proc-cmdline",
        "proc-root",
        "proc-cwd",
        "signal-host",
        "keyring-user",
        "keyring-session",
        "abstract-socket",
        "hidden-socket",
        "umount-hidden",
    }
    yama = Path("/proc/sys/kernel/yama/ptrace_scope")
    if not yama.exists() or yama.read_text().strip() == "0":
        needs_nothing |= {"ptrace-host", "ptrace-agent"}
    if shutil.which("tmux"):
        needs_nothing |= {"tmux-connect", "tmux-send-keys"}
    if USERS[user] == 0:
        needs_nothing |= {"etc-shadow", "system-write"}
    return needs_nothing


# Holes found by this battery, each reported with a reproduction: strict xfails, so that
# the fix turns them into failures to remove from here. None is open. Fixed since: /proc/sys
# writable under bwrap (kernel.core_pattern), TIOCSTI on the pane's terminal (a session of
# its own), the caller's session keyring (a new one before the sandbox starts), nested user
# namespaces (bwrap --disable-userns; for unshare, a user namespace of its own whose limit
# of further ones is 0).
KNOWN_HOLES: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Outcome:
    escaped: bool  # the probe got what it was after
    detail: str
    seen: bool | None = None  # what the host saw of it, for probes the host can witness

    @property
    def worked(self) -> bool:
        """As a positive control: the probe did it, and the host saw it where it can."""
        return self.escaped and self.seen is not False

    @property
    def got_out(self) -> bool:
        """As an escape: the probe says it did it, or the host saw it."""
        return self.escaped or bool(self.seen)


def as_user(user: str, argv: list[str]) -> list[str]:
    uid = USERS[user]
    if uid == 0:
        return argv
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]


def file_handle(path: Path) -> tuple[int, str]:
    """(handle type, handle bytes in hex) of a file, for open_by_handle_at."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(struct.pack("=Ii", 128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, str(path).encode(), buf, ctypes.byref(mount_id), 0) != 0:
        return 0, ""
    size, kind = struct.unpack_from("=Ii", buf.raw)
    return kind, buf.raw[8 : 8 + size].hex()


def whole_disk() -> tuple[str, tuple[int, int]]:
    """The first whole disk of /proc/partitions and its device numbers."""
    for line in Path("/proc/partitions").read_text().splitlines()[2:]:
        major, minor, _, name = line.split()
        if Path(f"/sys/block/{name}").exists():
            return name, (int(major), int(minor))
    return "none", (0, 0)


def probes_holding(marker: str) -> list[int]:
    """Host pids of the probe processes holding ``marker`` (not the sandbox around them,
    whose command line names it too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if argv[0] == PYTHON.encode() and marker.encode() in argv:
                    found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class HostSide:
    """One user's targets on the host."""

    user: str
    uid: int
    work: Path  # the confined process's worktree (writable)
    home: Path
    signals: Path  # a letter for each SIGUSR1 its process got
    holder: subprocess.Popen[bytes]  # a process of the user, the secret in its environment
    marker: str  # in its command line
    user_key: str  # a key of the user's keyring holding the secret
    tmux: str  # a tmux server of the user (tmux -L), a session "escape" running cat

    @property
    def tmux_socket(self) -> str:
        return f"/tmp/tmux-{self.uid}/{self.tmux}"


class Lab:
    """What the probes aim at, made once per module: a hidden secret, and for each user a
    host process holding it, a key, a tmux server; an abstract socket; each battery's
    results, run once."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.id = uuid.uuid4().hex[:10]
        self.secret = f"agentos-escape-secret-{self.id}"
        base.chmod(0o755)
        self.probes = base / "probes"
        self.probes.mkdir()
        self.script = str(self.probes / "_escape_probes.py")
        shutil.copy(HERE / "_escape_probes.py", self.script)
        self.setuid_cat = self.probes / "setuid-cat"
        shutil.copy("/usr/bin/cat", self.setuid_cat)
        os.chown(self.setuid_cat, 0, 0)
        self.setuid_cat.chmod(0o4755)
        self.shown = base / "shown"  # readable, with a hidden directory inside
        self.hidden = self.shown / "hidden"
        self.hidden.mkdir(parents=True)
        self.hidden_file = self.hidden / "secret.txt"
        self.hidden_file.write_text(self.secret + "\n")
        for p in (self.probes, self.shown, self.hidden):
            p.chmod(0o755)
        self.hidden_file.chmod(0o644)
        self.disk, self.devno = whole_disk()
        self.system_file = Path(f"/usr/local/agentos-escape-{self.id}")
        self.abstract = socket.socket(socket.AF_UNIX)  # as the MCP server's or X11's
        self.abstract.bind(f"\0agentos-escape-{self.id}")
        self.abstract.listen(64)
        self.hidden_socket = socket.socket(socket.AF_UNIX)  # as the agents' fork server's
        self.hidden_socket.bind(str(self.hidden / "agent-tools.sock"))
        (self.hidden / "agent-tools.sock").chmod(0o777)
        self.hidden_socket.listen(64)
        self.host_pidns = os.readlink("/proc/self/ns/pid")
        self.sides: dict[str, HostSide] = {}
        self.results: dict[tuple[str, str], dict[str, Outcome] | str] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self, user: str) -> dict[str, str]:
        home = self.base / user / "home"
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home)}

    def probe_argv(self, user: str, *args: str) -> list[str]:
        return as_user(user, [PYTHON, "-I", self.script, *args])

    def side(self, user: str) -> HostSide:
        """That user's targets on the host, started once."""
        if user in self.sides:
            return self.sides[user]
        uid = USERS[user]
        top = self.base / user
        work, home = top / "work", top / "home"
        (work / "mnt").mkdir(parents=True)
        home.mkdir()
        signals = top / "signals"
        signals.touch()
        for p in (top, work, work / "mnt", home, signals):
            os.chown(p, uid, uid)
        marker = f"agentos-escape-host-{self.id}-{user}"
        holder = subprocess.Popen(
            self.probe_argv(user, "hold", marker, str(signals)),
            cwd=self.hidden,
            env={**self.env(user), "AGENTOS_ESCAPE_SECRET": self.secret},
            stdout=subprocess.PIPE,
        )
        self.procs.append(holder)
        assert Lines(holder.stdout).next(timeout=60, what="the holder") == b"ready\n"
        user_key = f"agentos-escape-user-key-{self.id}"
        subprocess.run(self.probe_argv(user, "key", "add", user_key, self.secret), check=True)
        tmux = f"agentos-escape-{self.id}-{user}"
        if shutil.which("tmux"):  # (else the tmux probes' controls fail: they are skipped)
            subprocess.run(
                as_user(user, ["tmux", "-L", tmux, "new-session", "-d", "-s", "escape", "cat"]),
                env={**self.env(user), "TERM": "xterm", "SHELL": "/bin/sh"},  # nobody's: nologin
                check=True,
            )
        self.sides[user] = HostSide(user, uid, work, home, signals, holder, marker, user_key, tmux)
        return self.sides[user]

    def battery(self, backend: str, user: str) -> dict[str, Outcome]:
        """Every probe, in one process confined by ``backend``, run by ``user``."""
        key = (backend, user)
        if key not in self.results:
            try:
                self.results[key] = self._run(backend, user)
            except MissingTool as exc:
                self.results[key] = f"{backend} does not work here: {exc}"
        found = self.results[key]
        if isinstance(found, str):
            pytest.skip(found)
        return found

    def _sandbox(self, backend: str, user: str) -> Sandbox:
        if backend == "none":
            return Sandbox("none", None, "the positive control")
        if backend == "unshare" and USERS[user] != 0:
            out = subprocess.run(
                as_user(user, ["unshare", "--mount", "--pid", "--fork", "--", "/bin/true"]),
                capture_output=True,
                text=True,
            )
            assert out.returncode != 0, "unshare made namespaces for an unprivileged user"
            raise MissingTool(
                f"as {user}: {out.stderr.strip()} (util-linux unshare makes a mount "
                "namespace only as root: an unprivileged AgentOS gets bwrap, which uses a "
                "user namespace)"
            )
        return choose(SandboxSettings.model_validate({"backend": backend}))

    def _run(self, backend: str, user: str) -> dict[str, Outcome]:
        sandbox = self._sandbox(backend, user)
        side = self.side(user)
        pol = policy(
            settings=SandboxSettings(memory=512 << 20, processes=256),
            package=None,
            hidden=[self.hidden],
            writable=[side.work],
            readable=[self.probes, self.shown],
            home=side.home,
            home_dir=None,
            cwd=side.work,
        )
        tag = f"{self.id}-{backend}-{user}"
        # Another agent, confined the same way, beside this one.
        agent_marker = f"agentos-escape-agent-{tag}"
        inner = [PYTHON, "-I", self.script, "hold", agent_marker, "/dev/null"]
        agent = subprocess.Popen(
            as_user(user, sandbox.command(pol, inner)),
            cwd=side.work,
            env=self.env(user),
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.procs.append(agent)
        assert Lines(agent.stdout).next(timeout=60, what="the other agent") == b"ready\n"
        (agent_pid,) = probes_holding(agent_marker)
        group = Group(pol.limits)
        for d in group.dirs:  # delegated to the user: the user could write it, unconfined
            for p in (d, *d.iterdir()):
                os.chown(p, side.uid, side.uid)
        cfg = {
            "uid": side.uid,
            "gid": side.uid,
            "secret": self.secret,
            "host_pid": side.holder.pid,
            "host_marker": side.marker,
            "agent_pid": agent_pid,
            "hidden_dir": str(self.hidden),
            "hidden_file": str(self.hidden_file),
            "work": str(side.work),
            "mountpoint": str(side.work / "mnt"),
            "disk": self.disk,
            "disk_devno": self.devno,
            "system_file": str(self.system_file),
            "setuid_cat": str(self.setuid_cat),
            "memory_group": str(next((d for d in group.dirs if "memory" in d.parts), "")),
            "user_key": side.user_key,
            "session_key": f"agentos-escape-session-{tag}",
            "abstract": f"agentos-escape-{self.id}",
            "hidden_socket": str(self.hidden / "agent-tools.sock"),
            "tmux_socket": side.tmux_socket,
            "tmux_keys": f"agentos-tmux-{tag}",
            "tiocsti_keys": f"echo agentos-tiocsti-{tag}\n",
            "kmsg_line": f"agentos escape test {tag}: a probe of tests/test_sandbox_escapes.py\n",
            "handle": file_handle(self.hidden_file),
        }
        confined = sandbox.command(pol, [PYTHON, "-I", self.script, "battery", json.dumps(cfg)])
        # A session keyring holding a key (the user's keyring linked in), and the pane's
        # terminal: a real pty, the controlling terminal of what starts the sandbox, as
        # tmux makes it for the shell of a pane.
        launch = ["launch", str(cfg["session_key"]), self.secret, "--", *confined]
        argv = ["setsid", "--ctty", *self.probe_argv(user, *launch)]
        master, slave = os.openpty()
        signals = len(side.signals.read_text())
        try:
            proc = subprocess.run(
                group.enter_command(argv),
                stdin=slave,
                capture_output=True,
                cwd=side.work,
                env=self.env(user),
                timeout=120,
            )
        finally:
            group.close()
            agent.kill()
            agent.wait()
        try:
            found = self._read(proc, backend)
            self._witness(found, side, cfg, (master, slave), signals)
        finally:
            os.close(master)
            os.close(slave)
        return found

    def _read(self, proc: subprocess.CompletedProcess[bytes], backend: str) -> dict[str, Outcome]:
        lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
        where = next((x["pidns"] for x in lines if x["probe"] == "where"), None)
        assert where is not None, proc.stderr.decode()
        # Confined means another pid namespace: the battery ran where it says it did.
        assert (where == self.host_pidns) == (backend == "none"), (backend, where)
        found = {
            x["probe"]: Outcome(x["escaped"], x["detail"]) for x in lines if x["probe"] != "where"
        }
        assert list(found) == list(PROBES), proc.stderr.decode()
        return found

    def _witness(
        self,
        found: dict[str, Outcome],
        side: HostSide,
        cfg: dict[str, object],
        pty: tuple[int, int],
        signals_before: int,
    ) -> None:
        """What the host saw: the signals its process got, the keys its tmux pane got,
        the line typed into the pty (echoed on its master side, waiting to be read on the
        side the pane's programs read)."""

        def seen(probe: str, check: Callable[[], bool]) -> None:
            said = found[probe]
            try:  # what was not sent cannot arrive later: one look then
                saw = bool(wait_until(check, timeout=5 if said.escaped else 0, what=probe))
            except AssertionError:
                saw = False
            found[probe] = Outcome(said.escaped, said.detail, saw)

        seen("signal-host", lambda: len(side.signals.read_text()) > signals_before)

        def pane() -> bool:
            capture = ["tmux", "-L", side.tmux, "capture-pane", "-p", "-t", "escape"]
            out = subprocess.run(
                as_user(side.user, capture),
                capture_output=True,
                text=True,
                env=self.env(side.user),
            )
            return str(cfg["tmux_keys"]) in out.stdout

        seen("tmux-send-keys", pane)
        typed = b""
        for fd in pty:
            os.set_blocking(fd, False)

        def arrived() -> bool:
            nonlocal typed
            for fd in pty:
                with contextlib.suppress(OSError):
                    typed += os.read(fd, 65536)
            return str(cfg["tiocsti_keys"]).strip().encode() in typed

        seen("tiocsti", arrived)

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        for user, side in self.sides.items():
            subprocess.run(
                as_user(user, ["tmux", "-L", side.tmux, "kill-server"]),
                capture_output=True,
                env=self.env(user),
            )
            Path(side.tmux_socket).unlink(missing_ok=True)  # (kill-server leaves it)
            subprocess.run(self.probe_argv(user, "key", "drop", side.user_key))
        self.abstract.close()
        self.hidden_socket.close()
        self.system_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    base = Path(tempfile.mkdtemp(prefix="agentos-escapes-", dir="/tmp"))  # others may enter
    made = Lab(base)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(base, ignore_errors=True)


def cases() -> Iterator[object]:
    for backend in BACKENDS:
        for user in USERS:
            for probe in PROBES:
                why = KNOWN_HOLES.get((probe, backend, user))
                marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                yield pytest.param(
                    probe, backend, user, id=f"{backend}-{user}-{probe}", marks=marks
                )


@pytest.mark.parametrize(("probe", "backend", "user"), list(cases()))
def test_an_escape_attempt_is_contained(lab: Lab, probe: str, backend: str, user: str) -> None:
    control = lab.battery("none", user)[probe]
    if not control.worked:
        assert probe not in must_work(user), f"the control of {probe} failed: {control.detail}"
        why = CANNOT.get(probe) or (CANNOT_UNPRIVILEGED if USERS[user] else "")
        pytest.skip(f"{probe} as {user} fails even without a sandbox: {control.detail}. {why}")
    outcome = lab.battery(backend, user)[probe]
    assert not outcome.got_out, f"{probe} escaped {backend} as {user}: {outcome.detail}" + (
        " (the host saw it)" if outcome.seen else ""
    )


# The egress allow-list's wildcard.

WILDCARD = [
    ("a.example.com", True),
    ("deep.a.example.com", True),
    ("A.Example.COM", True),
    ("X.example.com", True),  # resolved by the name asked, capitals and all
    ("evilexample.com", False),  # the suffix without its dot
    ("example.com.evil.net", False),  # the name inside another
    ("example.com", False),  # the domain itself: `*.` names its subdomains only
]


def test_a_wildcard_admits_subdomains_only(tmp_path: Path) -> None:
    from agentos.sandbox.egress import Egress

    egress = Egress(tmp_path / "egress.sock", ["*.example.com"])
    try:
        admitted = {host: egress.permits(host, 443) for host, _ in WILDCARD}
    finally:
        egress.close()
    assert admitted == dict(WILDCARD)


@pytest.fixture
def echo_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on loopback that echoes; the list names each connection it got."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    got: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                got.append("connection")
                with contextlib.suppress(OSError):
                    while data := conn.recv(4096):
                        conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], got
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept
    server.close()
    thread.join(timeout=5)


def test_the_proxy_lets_a_wildcard_through_to_subdomains_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, echo_server: tuple[int, list[str]]
) -> None:
    """Every name of the table resolves to a live server (the DNS is faked: it is outside),
    so that only the allow-list decides what gets through; no other name resolves."""
    from agentos.sandbox.egress import Egress

    port, got = echo_server
    real = socket.getaddrinfo
    names = {host.lower() for host, _ in WILDCARD}

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.lower() in names:
            host = "127.0.0.1"
        elif isinstance(host, str) and host.lower().endswith(("example.com", ".net")):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    egress = Egress(tmp_path / "egress.sock", ["*.example.com"])
    answers = {}
    try:
        for host, _ in WILDCARD:
            with socket.socket(socket.AF_UNIX) as conn:
                conn.settimeout(10)
                conn.connect(str(tmp_path / "egress.sock"))
                conn.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                status = conn.recv(4096).split(b"\r\n")[0].decode()
                if status.endswith("200 Connection established"):
                    conn.sendall(b"ping")
                    status += " / " + conn.recv(4).decode()
                answers[host] = status
    finally:
        egress.close()
    through = "HTTP/1.1 200 Connection established / ping"
    refused = "HTTP/1.1 403 Forbidden"
    assert answers == {host: through if ok else refused for host, ok in WILDCARD}
    assert egress.denied == [f"{host.lower()}:{port}" for host, ok in WILDCARD if not ok]
    assert len(got) == sum(ok for _, ok in WILDCARD)  # nothing refused reached the server


# --- the allow-list's entries, ports and plain HTTP (found by mutation testing: docs/mutation.md)

HOST_ENTRIES = [
    ("API.Example.com", ("api.example.com", None)),
    (" api.example.com:8443 ", ("api.example.com", 8443)),
    ("h:1", ("h", 1)),
    ("h:65535", ("h", 65535)),
    ("[::1]:443", ("::1", 443)),
    ("[::1]", ("::1", None)),
    ("*.example.com", ("*.example.com", None)),
    ("*.example.com:443", ("*.example.com", 443)),
]
BAD_HOST_ENTRIES = [
    ("https://api.example.com", "is not a host or host:port"),
    ("user@api.example.com", "is not a host or host:port"),
    ("api.example.com/v1", "is not a host or host:port"),
    ("h:0", "^'h:0': '0' is not a port$"),
    ("h:65536", "'65536' is not a port"),
    ("h:http", "'http' is not a port"),
    ("[::1]:0", r"^'\[::1\]:0': '0' is not a port$"),
    ("[::1]]", "is not a host or host:port$"),
    ("[::1]443", "is not a host or host:port$"),
    ("[::1", "is not a host or host:port$"),  # a bracket that does not close
    ("[api.example.com", "is not a host or host:port$"),
    ("api.example.com]", "is not a host or host:port"),  # a bracket outside [v6]
    ("[[::1]:443", "is not a host or host:port"),
    ("*.", "is not a host or host:port"),
    (".example.com", "is not a host or host:port"),
    ("*.*.example.com", "is not a host or host:port"),
    (":443", "is not a host or host:port"),
    ("api.example.com\n:443", "is not a host or host:port"),  # a name no host could match
    ("api.example\x0b.com", "is not a host or host:port"),
]


@pytest.mark.parametrize(("entry", "parsed"), HOST_ENTRIES, ids=[e for e, _ in HOST_ENTRIES])
def test_an_allowed_host_is_a_lowercase_name_and_an_optional_port(
    entry: str, parsed: tuple[str, int | None]
) -> None:
    from agentos.sandbox.egress import parse_host

    assert parse_host(entry) == parsed


def _shown(entry: str) -> str:
    """An id for a test of ``entry``: its control characters written ``<0xN>``."""
    return "".join(c if c.isprintable() else f"<{ord(c):#x}>" for c in entry)


@pytest.mark.parametrize(
    ("entry", "why"), BAD_HOST_ENTRIES, ids=[_shown(e) for e, _ in BAD_HOST_ENTRIES]
)
def test_an_entry_that_is_not_a_host_is_refused_saying_why(entry: str, why: str) -> None:
    from agentos.sandbox.egress import parse_host

    with pytest.raises(ValueError, match=why):
        parse_host(entry)


URL_HOSTS = [
    ("https://api.anthropic.com/v1", "api.anthropic.com:443"),
    ("HTTPS://API.anthropic.com", "api.anthropic.com:443"),
    ("http://localhost", "localhost:80"),
    ("http://localhost:11434/api", "localhost:11434"),
    ("https://[::1]:9/", "[::1]:9"),
    ("https://[::1]/", "[::1]:443"),
    ("not a url", None),
    ("http://localhost:99999/", None),
]


@pytest.mark.parametrize(("url", "host"), URL_HOSTS, ids=[u for u, _ in URL_HOSTS])
def test_a_urls_host_is_its_name_and_the_port_its_scheme_implies(
    url: str, host: str | None
) -> None:
    from agentos.sandbox.egress import host_of_url

    assert host_of_url(url) == host


def test_an_entry_with_a_port_admits_that_port_only(tmp_path: Path) -> None:
    from agentos.sandbox.egress import Egress

    allowed = ["api.example.com:443", "[::1]:8080", "*.example.org:443", "any.example.net"]
    asked = [
        ("api.example.com", 443, True),
        ("api.example.com", 80, False),
        ("[::1]", 8080, True),
        ("::1", 8080, True),
        ("::1", 8081, False),
        ("a.example.org", 443, True),
        ("a.example.org", 22, False),
        ("ANY.example.net", 22, True),
        ("other.example.net", 22, False),
    ]
    egress = Egress(tmp_path / "egress.sock", allowed)
    try:
        admitted = [(host, port, egress.permits(host, port)) for host, port, _ in asked]
    finally:
        egress.close()
    assert admitted == asked


def _ask(sock: Path, request: bytes, *, then: bytes = b"", want: int = 0) -> bytes:
    """Send ``request`` through the proxy at ``sock`` (then ``then``) and read its answer
    until it closes, or until ``want`` bytes came."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(sock))
        conn.sendall(request)
        if then:
            conn.sendall(then)
        got = b""
        while (not want or len(got) < want) and (data := conn.recv(65536)):
            got += data
        return got


def test_plain_http_goes_through_as_a_request_for_the_path_and_a_relative_one_is_refused(
    tmp_path: Path, echo_server: tuple[int, list[str]]
) -> None:
    """The echo server sends back what the proxy sent it: the request in origin form."""
    from agentos.sandbox.egress import Egress

    port, got = echo_server
    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [f"127.0.0.1:{port}"])
    request = f"GET http://127.0.0.1:{port}/a/b?q=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    bare = f"GET http://127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()
    try:
        through = _ask(sock, request, want=len(request) - len(f"http://127.0.0.1:{port}"))
        root = _ask(sock, bare, want=len(b"GET / HTTP/1.1\r\n\r\n"))
        relative = _ask(sock, b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        tls = _ask(sock, f"GET https://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
        default_port = _ask(sock, b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n")
    finally:
        egress.close()
    assert through == b"GET /a/b?q=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    assert root == b"GET / HTTP/1.1\r\n\r\n"
    body = b"AgentOS: /a: only absolute http:// URLs are by this agent's sandbox.network\n"
    assert relative == (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    assert tls.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert default_port.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert egress.denied == ["/a", f"https://127.0.0.1:{port}/", "127.0.0.1:80"]
    assert len(got) == 2


def test_bytes_sent_with_a_connect_reach_the_host_and_a_denial_is_remembered_once(
    tmp_path: Path, echo_server: tuple[int, list[str]]
) -> None:
    from agentos.sandbox.egress import Egress

    port, _ = echo_server
    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [f"127.0.0.1:{port}"])
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    try:
        eager = _ask(
            sock,
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nhello".encode(),
            want=len(established) + 5,
        )
        later = _ask(
            sock,
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode(),
            then=b"a\r\n\r\nb",
            want=len(established) + 6,
        )
        for _ in range(2):
            _ask(sock, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
        no_port = _ask(sock, b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n")
    finally:
        egress.close()
    assert eager == established + b"hello"
    assert later == established + b"a\r\n\r\nb"
    assert no_port == b""  # not a CONNECT target: closed without an answer
    assert egress.denied == ["127.0.0.1:1"]


def test_an_allowed_host_that_does_not_answer_is_a_bad_gateway(tmp_path: Path) -> None:
    from agentos.sandbox.egress import Egress

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [f"127.0.0.1:{port}"])
    try:
        answer = _ask(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        egress.close()
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
    assert b"refused" in answer.lower()
    assert egress.denied == []


def _unread(conn: socket.socket) -> int:
    """Bytes ``conn`` sent that its peer has not read yet (Linux's TIOCOUTQ)."""
    return int(struct.unpack("i", fcntl.ioctl(conn, termios.TIOCOUTQ, b"\0" * 4))[0])


def _head_of(size: int, target: str = "127.0.0.1:1") -> bytes:
    """A ``CONNECT`` head of exactly ``size`` bytes (a header padded to length)."""
    start, end = f"CONNECT {target} HTTP/1.1\r\nX-Pad: ".encode(), b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_a_request_head_is_read_whole_up_to_64_kib_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    """A head in two pieces (the proxy read the first before the second was sent) is one
    head; a head of exactly MAX_HEAD bytes is answered, one byte more is hung up on."""
    from agentos.sandbox.egress import MAX_HEAD, Egress

    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [])
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(str(sock))
            conn.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1")
            wait_until(lambda: _unread(conn) == 0, what="the proxy read the first piece")
            conn.sendall(b"\r\n\r\n")
            pieces = conn.recv(4096)
        whole = _ask(sock, _head_of(MAX_HEAD, "127.0.0.2:1"))
        over = _ask(sock, _head_of(MAX_HEAD + 1, "127.0.0.3:1"))
    finally:
        egress.close()
    body = b"AgentOS: 127.0.0.1:1: not allowed by this agent's sandbox.network\n"
    assert pieces == (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    assert whole.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert over == b""  # hung up on without an answer, and not judged
    assert egress.denied == ["127.0.0.1:1", "127.0.0.2:1"]


def test_a_request_line_that_is_not_three_words_between_single_spaces_gets_no_answer(
    tmp_path: Path,
) -> None:
    from agentos.sandbox.egress import Egress

    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [])
    try:
        answers = [
            _ask(sock, b"CONNECT  127.0.0.1:1 HTTP/1.1\r\n\r\n"),  # two spaces
            _ask(sock, b"CONNECT 127.0.0.1:1\r\n\r\n"),
            _ask(sock, b"CONNECT 443 HTTP/1.1\r\n\r\n"),  # a port and no host
            _ask(sock, b"CONNECT 127.0.0.1:https HTTP/1.1\r\n\r\n"),
        ]
    finally:
        egress.close()
    assert answers == [b"", b"", b"", b""]
    assert egress.denied == []


def test_a_refused_relative_target_is_remembered_by_its_first_200_characters(
    tmp_path: Path,
) -> None:
    from agentos.sandbox.egress import Egress

    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [])
    target = "/" + "a" * 299
    try:
        answer = _ask(sock, f"GET {target} HTTP/1.1\r\n\r\n".encode())
    finally:
        egress.close()
    body = f"AgentOS: {target[:200]}: only absolute http:// URLs are by this agent's "
    assert answer.endswith((body + "sandbox.network\n").encode())
    assert egress.denied == [target[:200]]


def test_at_most_100_denials_are_remembered_the_first_ones(tmp_path: Path) -> None:
    from agentos.sandbox.egress import MAX_DENIED, Egress

    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [])
    try:
        for n in range(1, MAX_DENIED + 3):
            answer = _ask(sock, f"CONNECT 127.0.0.1:{n} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")  # denied, remembered or not
    finally:
        egress.close()
    assert MAX_DENIED == 100
    assert egress.denied == [f"127.0.0.1:{n}" for n in range(1, 101)]


@pytest.fixture
def shouting_server() -> Iterator[int]:
    """A TCP server on loopback that answers each piece it gets in capitals: bytes that went
    back to their sender unseen by it would come back as they were sent."""
    server = socket.socket(socket.AF_INET6)
    server.bind(("::1", 0))
    server.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(4096):
                    conn.sendall(data.upper())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(timeout=5)


def test_a_connect_to_an_ipv6_address_pipes_both_ways(tmp_path: Path, shouting_server: int) -> None:
    from agentos.sandbox.egress import Egress

    port = shouting_server
    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [f"[::1]:{port}"])
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(str(sock))
            conn.sendall(f"CONNECT [::1]:{port} HTTP/1.1\r\n\r\n".encode())
            got = b""
            while len(got) < len(established) and (data := conn.recv(4096)):
                got += data
            conn.sendall(b"ping")  # after the head: through the pipe, not with it
            got += conn.recv(4)
    finally:
        egress.close()
    assert got == established + b"PING"
    assert egress.denied == []


def test_a_connection_that_says_nothing_is_closed_after_the_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, echo_server: tuple[int, list[str]]
) -> None:
    """A head never finished is hung up on after CONNECT_TIMEOUT, a piped connection with
    no bytes either way after IDLE_TIMEOUT (both shortened here from 15 and 900 s)."""
    from agentos.sandbox import egress as module

    monkeypatch.setattr(module, "CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(module, "IDLE_TIMEOUT", 0.5)
    port, _ = echo_server
    sock = tmp_path / "egress.sock"
    egress = module.Egress(sock, [f"127.0.0.1:{port}"])
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    try:
        unfinished = _ask(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n".encode())
        idle = _ask(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        egress.close()
    assert unfinished == b""
    assert idle == established  # then closed: _ask reads until the proxy hangs up


def test_an_allowed_host_that_takes_no_connection_is_a_bad_gateway_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose queue of connections is full drops the next one's SYN: the proxy's
    connect waits CONNECT_TIMEOUT (shortened here from 15 s), not the kernel's minutes."""
    from agentos.sandbox import egress as module

    monkeypatch.setattr(module, "CONNECT_TIMEOUT", 0.5)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(2):  # fills its queue: never accepted
            queued = stack.enter_context(socket.socket())
            queued.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                queued.connect(("127.0.0.1", port))
        sock = tmp_path / "egress.sock"
        egress = module.Egress(sock, [f"127.0.0.1:{port}"])
        try:
            answer = _ask(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        finally:
            egress.close()
    assert answer == b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\ntimed out\n"


def test_a_client_that_leaves_before_its_answer_raises_nothing_in_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head is still read after the client closed; the 403 or 502 then has no one to
    go to, and the proxy carries on (no thread of it dies with an exception)."""
    from agentos.sandbox.egress import Egress

    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    # Threads of the process's own (an earlier test's may end meanwhile) are not counted.
    before = set(threading.enumerate())
    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [f"127.0.0.1:{port}"])

    def handled() -> bool:  # no thread of the proxy's but its server is left
        new = {t.name for t in threading.enumerate() if t not in before}
        return new == {"agentos-egress"}

    try:
        for target in ("127.0.0.1:1", f"127.0.0.1:{port}"):  # denied; allowed, refused
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(sock))
                conn.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        # Answered once the proxy accepted it: after the two above, whose threads then ran.
        answer = _ask(sock, b"CONNECT 127.0.0.1:2 HTTP/1.1\r\n\r\n")
        wait_until(handled, what="the requests handled")
    finally:
        egress.close()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert errors == []
    assert egress.denied == ["127.0.0.1:1", "127.0.0.1:2"]


def test_closing_an_egress_twice_or_after_its_socket_file_went_is_harmless(
    tmp_path: Path,
) -> None:
    from agentos.sandbox.egress import Egress

    sock = tmp_path / "egress.sock"
    egress = Egress(sock, [])
    egress.close()
    assert not sock.exists()
    egress.close()
    other = Egress(sock, [])
    sock.unlink()  # the run's files removed under it
    other.close()
    assert not sock.exists()
