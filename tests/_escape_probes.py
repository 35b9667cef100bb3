"""Escape attempts in the style of public sandbox-breakout suites, run inside a sandbox by
tests/test_sandbox_escapes.py (and outside one, as their positive controls).

Standard library only and run by the system's ``python3 -I``, so that an unprivileged user
runs it as well as root does (AgentOS's own interpreter may live in a home others cannot
enter). x86_64 system call numbers.

    python3 -I _escape_probes.py battery CONFIG_JSON     one JSON line per probe
    python3 -I _escape_probes.py hold MARKER COUNTER      a process to reach (counts SIGUSR1)
    python3 -I _escape_probes.py launch DESC SECRET -- ARGV...
                                  ARGV in a session keyring of its own holding DESC=SECRET
    python3 -I _escape_probes.py key add|drop DESC [SECRET]   a key of the user's keyring

Each probe answers ``{"probe": name, "escaped": bool, "detail": text}``: ``escaped`` is true
when the attempt got what it was after (read the secret, wrote the file, attached...).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from typing import Any

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

SYS_PTRACE, SYS_ADD_KEY, SYS_KEYCTL, SYS_FINIT_MODULE = 101, 248, 250, 313
SYS_PERF_EVENT_OPEN, SYS_BPF = 298, 321
SYS_NAME_TO_HANDLE_AT, SYS_OPEN_BY_HANDLE_AT = 303, 304
PTRACE_SEIZE = 0x4206
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_LINK, KEYCTL_SEARCH, KEYCTL_READ = 1, 8, 10, 11
KEYCTL_INVALIDATE = 21
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REMOUNT, MS_BIND = 32, 4096
MNT_DETACH = 2

Result = tuple[bool, str]
Config = dict[str, Any]  # the battery's CONFIG_JSON


class Failed(Exception):
    pass


def check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise Failed(f"{what}: {errno.errorcode.get(err, err)}")
    return ret


def sys_call(number: int, *args: object) -> int:
    wide = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return int(libc.syscall(ctypes.c_long(number), *wide))


def read(path: str, size: int = 65536) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def write_back(path: str) -> Result:
    """Write a kernel file's own content back into it: proves the right to write it and
    changes nothing."""
    value = read(path)
    with open(path, "wb") as f:
        f.write(value if value.strip() else b"\n")
    return True, f"wrote {path} ({value.strip()[:40]!r} again)"


def in_child(body: Callable[[], Result], timeout: float = 10) -> Result:
    """``body`` in a forked child (for what changes the process: namespaces, tracing)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns: it must not go on as a second battery
        os.close(r)
        out: Result = (False, "the child died")
        try:
            out = body()
        except Failed as exc:
            out = (False, str(exc))
        except Exception as exc:  # the child's top level: what broke is its answer
            out = (False, f"{type(exc).__name__}: {exc}")
        finally:
            os.write(w, json.dumps(out).encode())
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False, "timed out"
        time.sleep(0.005)
    data = os.read(r, 65536)
    os.close(r)
    if not data:
        return False, "the child died"
    escaped, detail = json.loads(data)
    return bool(escaped), detail


def own_user_namespace(cfg: Config) -> str:
    """A new user and mount namespace, root inside (``unshare -rm``). Every capability
    comes with the new namespace, mapped or not: a map that cannot be written is said,
    and the attempt goes on."""
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(NEWUSER|NEWNS)")
    said = []
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"0 {cfg['uid']} 1"),
        ("gid_map", f"0 {cfg['gid']} 1"),
    ):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError as exc:
            said.append(f"{name}: {exc.strerror}")
    return "; ".join(["a user namespace of its own", *said]) + ": "


def mount_tmpfs(where: str) -> Result:
    check(libc.mount(b"none", where.encode(), b"tmpfs", 0, None), f"mount tmpfs on {where}")
    libc.umount2(where.encode(), MNT_DETACH)
    return True, f"mounted a tmpfs on {where}"


def read_hidden(cfg: Config) -> Result:
    data = read(cfg["hidden_file"])
    return cfg["secret"].encode() in data, f"read {cfg['hidden_file']}: {data[:40]!r}"


# The probes: each takes the configuration and returns (escaped, detail).


def proc_environ(cfg: Config) -> Result:
    data = read(f"/proc/{cfg['host_pid']}/environ")
    return cfg["secret"].encode() in data, f"{len(data)} bytes of environ"


def proc_cmdline(cfg: Config) -> Result:
    data = read(f"/proc/{cfg['host_pid']}/cmdline")
    return cfg["host_marker"].encode() in data, f"cmdline {data[:60]!r}"


def proc_root(cfg: Config) -> Result:
    path = f"/proc/{cfg['host_pid']}/root{cfg['hidden_file']}"
    data = read(path)
    return cfg["secret"].encode() in data, f"read {path}"


def proc_cwd(cfg: Config) -> Result:
    path = f"/proc/{cfg['host_pid']}/cwd/{os.path.basename(cfg['hidden_file'])}"
    data = read(path)
    return cfg["secret"].encode() in data, f"read {path}"


def signal_host(cfg: Config) -> Result:
    os.kill(cfg["host_pid"], signal.SIGUSR1)
    return True, f"SIGUSR1 sent to {cfg['host_pid']}"


def _ptrace(pid: int) -> Result:
    def body() -> Result:
        check(sys_call(SYS_PTRACE, PTRACE_SEIZE, pid, 0, 0), f"PTRACE_SEIZE {pid}")
        cmdline = read(f"/proc/{pid}/cmdline")
        return True, f"attached to {pid} ({cmdline[:60]!r})"

    return in_child(body)


def ptrace_host(cfg: Config) -> Result:
    return _ptrace(cfg["host_pid"])


def ptrace_agent(cfg: Config) -> Result:
    return _ptrace(cfg["agent_pid"])


def setns_host(cfg: Config) -> Result:
    def body() -> Result:
        fd = os.open(f"/proc/{cfg['host_pid']}/ns/mnt", os.O_RDONLY)
        check(libc.setns(fd, CLONE_NEWNS), "setns(host mount namespace)")
        return read_hidden(cfg)

    return in_child(body)


def release_agent(cfg: Config) -> Result:
    return write_back("/sys/fs/cgroup/memory/release_agent")


def cgroup_own_limit(cfg: Config) -> Result:
    return write_back(f"{cfg['memory_group']}/memory.limit_in_bytes")


def cgroup_leave(cfg: Config) -> Result:
    """Move a child into the group above its own (out of its memory limit). Not the
    root group: this machine's test runner keeps its own processes in groups under it."""

    def body() -> Result:
        target = f"{os.path.dirname(cfg['memory_group'])}/cgroup.procs"
        with open(target, "w") as f:
            f.write(str(os.getpid()))
        return True, f"moved itself to {target}"

    return in_child(body)


def sysfs_write(cfg: Config) -> Result:
    return write_back(f"/sys/block/{cfg['disk']}/queue/read_ahead_kb")


def core_pattern(cfg: Config) -> Result:
    return write_back("/proc/sys/kernel/core_pattern")


def kernel_module(cfg: Config) -> Result:
    """finit_module of /dev/null: past the permission check it fails on the file (ENOEXEC,
    EINVAL...); EPERM or ENOSYS means the loader was not reached."""
    fd = os.open("/dev/null", os.O_RDONLY)
    ret = sys_call(SYS_FINIT_MODULE, fd, b"", 0)
    err = ctypes.get_errno()
    name = errno.errorcode.get(err, str(err))
    if ret == 0 or err not in (errno.EPERM, errno.ENOSYS, errno.EACCES):
        return True, f"finit_module reached the loader ({name})"
    return False, f"finit_module: {name}"


def bpf_prog(cfg: Config) -> Result:
    insns = bytes.fromhex("b7000000000000009500000000000000")  # r0 = 0; exit
    code = ctypes.create_string_buffer(insns)
    lic = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "=IIQQIIQI", 1, 2, ctypes.addressof(code), ctypes.addressof(lic), 0, 0, 0, 0
    ).ljust(72, b"\0")
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = check(sys_call(SYS_BPF, 5, buf, len(attr)), "bpf(BPF_PROG_LOAD)")
    os.close(fd)
    return True, "loaded a BPF socket filter"


def perf_cpu(cfg: Config) -> Result:
    attr = struct.pack("=IIQ", 1, 64, 0).ljust(64, b"\0")  # software cpu-clock
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = check(sys_call(SYS_PERF_EVENT_OPEN, buf, -1, 0, -1, 0), "perf_event_open(cpu 0)")
    os.close(fd)
    return True, "opened a CPU-wide perf counter"


def _key(ring: int, desc: str, secret: str) -> Result:
    key = check(
        sys_call(SYS_KEYCTL, KEYCTL_SEARCH, ring, b"user", desc.encode(), 0), "keyctl search"
    )
    buf = ctypes.create_string_buffer(256)
    n = check(sys_call(SYS_KEYCTL, KEYCTL_READ, key, buf, 256), "keyctl read")
    return secret.encode() in buf.raw[:n], f"read key {key}: {buf.raw[:n][:40]!r}"


def user_keyring(cfg: Config) -> Result:
    return _key(KEY_SPEC_USER_KEYRING, cfg["user_key"], cfg["secret"])


def session_keyring(cfg: Config) -> Result:
    return _key(KEY_SPEC_SESSION_KEYRING, cfg["session_key"], cfg["secret"])


def abstract_socket(cfg: Config) -> Result:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect("\0" + cfg["abstract"])
    return True, f"connected to @{cfg['abstract']}"


def hidden_socket(cfg: Config) -> Result:
    """A Unix socket in a hidden directory, as the workspace's fork server of MCP servers
    listens in the workspace: reached by its path, whatever the network namespace."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(cfg["hidden_socket"])
    return True, f"connected to {cfg['hidden_socket']}"


def tmux_connect(cfg: Config) -> Result:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(cfg["tmux_socket"])
    return True, f"connected to {cfg['tmux_socket']}"


def tmux_send_keys(cfg: Config) -> Result:
    argv = ["/usr/bin/tmux", "-S", cfg["tmux_socket"], "send-keys", "-t", "escape", "-l"]
    out = subprocess.run(
        [*argv, cfg["tmux_keys"]],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return out.returncode == 0, f"tmux send-keys: exit {out.returncode} {out.stderr.strip()}"


def tiocsti(cfg: Config) -> Result:
    for ch in cfg["tiocsti_keys"].encode():
        fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))
    return True, "typed into its terminal with TIOCSTI"


def _disk_magic(path: str) -> Result:
    data = read(path, 2048)
    ext4 = data[1080:1082] == b"\x53\xef"
    return ext4, f"read {len(data)} bytes of {path} (ext4 superblock: {ext4})"


def raw_disk(cfg: Config) -> Result:
    return _disk_magic(f"/dev/{cfg['disk']}")


def dev_mem(cfg: Config) -> Result:
    data = read("/dev/mem", 4096)
    return len(data) > 0, f"read {len(data)} bytes of /dev/mem"


def kmsg_read(cfg: Config) -> Result:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = os.read(fd, 8192)
    finally:
        os.close(fd)
    return len(data) > 0, f"read the kernel log: {data[:40]!r}"


def kmsg_write(cfg: Config) -> Result:
    """One line into the kernel log (it names this test, for whoever reads the log)."""
    fd = os.open("/dev/kmsg", os.O_WRONLY)  # never O_CREAT: a file of that name is no kmsg
    try:
        os.write(fd, cfg["kmsg_line"].encode())
    finally:
        os.close(fd)
    return True, "wrote a line into the kernel log"


def mknod_disk(cfg: Config) -> Result:
    """Make a device node of the disk (what reading the disk through it needs)."""
    path = os.path.join(cfg["work"], "disk-node")
    try:
        os.mknod(path, 0o600 | 0o060000, os.makedev(*cfg["disk_devno"]))
        try:
            _, then = _disk_magic(path)
        except OSError as exc:
            then = f"opening it: {exc.strerror}"
        return True, f"made a node of the disk; {then}"
    finally:
        if os.path.lexists(path):
            os.unlink(path)


def mount_direct(cfg: Config) -> Result:
    return in_child(lambda: mount_tmpfs(cfg["mountpoint"]))


def umount_hidden(cfg: Config) -> Result:
    """Unmount what hides a directory, and read it."""

    def body() -> Result:
        gone = libc.umount2(cfg["hidden_dir"].encode(), MNT_DETACH) == 0
        escaped, detail = read_hidden(cfg)
        return escaped, f"umount {'done' if gone else 'refused'}; {detail}"

    return in_child(body)


def unshare_mount(cfg: Config) -> Result:
    def body() -> Result:
        check(libc.unshare(CLONE_NEWNS), "unshare(NEWNS)")
        return mount_tmpfs(cfg["mountpoint"])

    return in_child(body)


def userns_mount(cfg: Config) -> Result:
    def body() -> Result:
        got = own_user_namespace(cfg)
        escaped, detail = mount_tmpfs(cfg["mountpoint"])
        return escaped, got + detail

    return in_child(body)


def userns_unhide(cfg: Config) -> Result:
    """In a user namespace of its own, unmount what hides a directory and read it."""

    def body() -> Result:
        got = own_user_namespace(cfg)
        gone = libc.umount2(cfg["hidden_dir"].encode(), MNT_DETACH) == 0
        try:
            escaped, detail = read_hidden(cfg)
        except OSError as exc:
            escaped, detail = False, f"{type(exc).__name__}: {exc}"
        return escaped, f"{got}umount {'done' if gone else 'refused'}; {detail}"

    return in_child(body)


def remount_rw() -> None:
    """Remount the system read-write where it may (in a mount namespace of its own: the
    host's mounts are never touched)."""
    for mountpoint in (b"/", b"/usr"):
        libc.mount(None, mountpoint, None, MS_REMOUNT | MS_BIND, None)


def remount_system_rw(cfg: Config) -> Result:
    def body() -> Result:
        check(libc.unshare(CLONE_NEWNS), "unshare(NEWNS)")
        remount_rw()
        return system_write(cfg)

    return in_child(body)


def userns_system_write(cfg: Config) -> Result:
    """In a user namespace of its own, remount the system read-write and write to it."""

    def body() -> Result:
        got = own_user_namespace(cfg)
        remount_rw()
        try:
            escaped, detail = system_write(cfg)
        except OSError as exc:
            escaped, detail = False, f"{type(exc).__name__}: {exc}"
        return escaped, got + detail

    return in_child(body)


def system_write(cfg: Config) -> Result:
    path = cfg["system_file"]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.unlink(path)
    return True, f"created {path}"


def _status(text: str) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    euid = int(fields["Uid"].split()[1])
    return euid, int(fields["CapEff"].strip(), 16)


def setuid_binary(cfg: Config) -> Result:
    out = subprocess.run(
        [cfg["setuid_cat"], "/proc/self/status"], capture_output=True, text=True, timeout=10
    )
    euid, caps = _status(out.stdout)
    return euid == 0 and caps != 0, f"a setuid-root cat ran with euid {euid}, CapEff {caps:x}"


def su_root(cfg: Config) -> Result:
    out = subprocess.run(
        ["/usr/bin/su", "root", "-c", "cat /proc/self/status"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=10,
    )
    if out.returncode != 0:
        return False, f"su: exit {out.returncode} {out.stderr.strip()[:80]}"
    euid, caps = _status(out.stdout)
    return euid == 0 and caps != 0, f"su ran a shell with euid {euid}, CapEff {caps:x}"


def etc_shadow(cfg: Config) -> Result:
    data = read("/etc/shadow")
    return b"root:" in data, f"read {len(data)} bytes of /etc/shadow"


def open_by_handle(cfg: Config) -> Result:
    """The "shocker" attack: open a file by its file handle, past every mount."""
    handle_type, handle_hex = cfg["handle"]
    raw = bytes.fromhex(handle_hex)
    fh = ctypes.create_string_buffer(struct.pack("=Ii", len(raw), handle_type) + raw)
    mount_fd = os.open("/usr", os.O_RDONLY | os.O_DIRECTORY)  # the same file system
    fd = check(sys_call(SYS_OPEN_BY_HANDLE_AT, mount_fd, fh, os.O_RDONLY), "open_by_handle_at")
    data = os.read(fd, 4096)
    return cfg["secret"].encode() in data, f"opened the hidden file by handle: {data[:30]!r}"


PROBES: dict[str, Callable[[Config], Result]] = {
    "proc-environ": proc_environ,
    "proc-cmdline": proc_cmdline,
    "proc-root": proc_root,
    "proc-cwd": proc_cwd,
    "signal-host": signal_host,
    "ptrace-host": ptrace_host,
    "ptrace-agent": ptrace_agent,
    "setns-host": setns_host,
    "cgroup-release-agent": release_agent,
    "cgroup-own-limit": cgroup_own_limit,
    "cgroup-leave": cgroup_leave,
    "sysfs-write": sysfs_write,
    "proc-sys-core-pattern": core_pattern,
    "kernel-module": kernel_module,
    "bpf": bpf_prog,
    "perf-event-cpu": perf_cpu,
    "keyring-user": user_keyring,
    "keyring-session": session_keyring,
    "abstract-socket": abstract_socket,
    "hidden-socket": hidden_socket,
    "tmux-connect": tmux_connect,
    "tmux-send-keys": tmux_send_keys,
    "tiocsti": tiocsti,
    "raw-disk": raw_disk,
    "dev-mem": dev_mem,
    "kmsg-read": kmsg_read,
    "kmsg-write": kmsg_write,
    "mknod-disk": mknod_disk,
    "mount-tmpfs": mount_direct,
    "umount-hidden": umount_hidden,
    "unshare-mount": unshare_mount,
    "userns-mount": userns_mount,
    "userns-unhide": userns_unhide,
    "userns-system-write": userns_system_write,
    "system-write": system_write,
    "remount-system-rw": remount_system_rw,
    "setuid-binary": setuid_binary,
    "su-root": su_root,
    "etc-shadow": etc_shadow,
    "open-by-handle": open_by_handle,
}


def battery(cfg: Config) -> None:
    print(json.dumps({"probe": "where", "pidns": os.readlink("/proc/self/ns/pid")}), flush=True)
    for name, probe in PROBES.items():
        try:
            escaped, detail = probe(cfg)
        except Failed as exc:
            escaped, detail = False, str(exc)
        except (OSError, subprocess.SubprocessError, KeyError, ValueError) as exc:
            escaped, detail = False, f"{type(exc).__name__}: {exc}"
        print(json.dumps({"probe": name, "escaped": escaped, "detail": detail}), flush=True)


def hold(counter: str) -> None:
    def count(*_: object) -> None:
        with open(counter, "a") as f:
            f.write("x")

    signal.signal(signal.SIGUSR1, count)
    print("ready", flush=True)
    while True:
        signal.pause()


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "battery":
        battery(json.loads(argv[1]))
    elif command == "hold":
        hold(argv[2])
    elif command == "launch":
        desc, secret, sep, *rest = argv[1:]
        assert sep == "--"
        # A session keyring of its own, the user's keyring linked in, as pam_keyinit
        # makes a login's.
        check(sys_call(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, desc.encode()), "join")
        ring = KEY_SPEC_SESSION_KEYRING
        check(sys_call(SYS_KEYCTL, KEYCTL_LINK, KEY_SPEC_USER_KEYRING, ring), "link")
        value = secret.encode()
        check(
            sys_call(
                SYS_ADD_KEY, b"user", desc.encode(), value, len(value), KEY_SPEC_SESSION_KEYRING
            ),
            "add_key",
        )
        os.execvp(rest[0], rest)
    elif command == "key":
        action, desc, *secrets = argv[1:]
        if action == "add":
            value = secrets[0].encode()
            check(
                sys_call(
                    SYS_ADD_KEY, b"user", desc.encode(), value, len(value), KEY_SPEC_USER_KEYRING
                ),
                "add_key",
            )
        else:
            key = sys_call(
                SYS_KEYCTL, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, b"user", desc.encode(), 0
            )
            if key > 0:
                sys_call(SYS_KEYCTL, KEYCTL_INVALIDATE, key)


if __name__ == "__main__":
    main(sys.argv[1:])
