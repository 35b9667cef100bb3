"""The command lines that confine a process: bubblewrap, or util-linux ``unshare`` with a
small mount script when bubblewrap is missing.

Both give the process its own mount, pid, ipc and uts namespaces (and network namespace
unless the policy allows the network: then only loopback works inside) and the same view
of the file system (:mod:`agentos.sandbox.view`: an empty root, the system read-only, the
policy's paths and nothing else). Everything the process starts lives in its pid namespace
and dies with it. Neither gets the caller's environment: the process is started with an
empty one and gets the policy's variables only
(:attr:`agentos.sandbox.policy.Policy.extra_env`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from agentos.sandbox.policy import Policy
from agentos.sandbox.view import plan


def bwrap_argv(bwrap: str, policy: Policy, argv: list[str]) -> list[str]:
    args = [
        bwrap,
        "--die-with-parent",
        # No capabilities inside, even for root: nothing can unmount what hides a path,
        # remount the view writable, or leave its control group.
        "--cap-drop",
        "ALL",
        # A user namespace of its own, in which no other can be made: the kernel's user
        # namespace surface stays closed, and keyrings (per user namespace) are not the
        # caller's.
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not policy.network:
        args.append("--unshare-net")
    # A session of its own: its terminal (a tmux pane's) is not its controlling terminal,
    # so TIOCSTI cannot type into it (CVE-2017-5226).
    args.append("--new-session")
    args += ["--dev", "/dev", "--proc", "/proc"]
    for part in ("sys", "sysrq-trigger"):  # kernel.core_pattern & co (irq and bus: bwrap's)
        if Path("/proc", part).exists():
            args += ["--ro-bind", f"/proc/{part}", f"/proc/{part}"]
    hidden: list[str] = []
    for m in plan(policy):
        where = str(m.path)
        if m.kind == "link":
            args += ["--symlink", m.source, where]
        elif m.kind in ("ro", "rw"):
            args += ["--ro-bind" if m.kind == "ro" else "--bind", m.source or where, where]
        elif m.kind == "null":
            args += ["--ro-bind", "/dev/null", where]
        else:
            if m.size is not None:
                args += ["--size", str(m.size)]
            args += ["--tmpfs", where]
            if m.kind == "hide":  # empty and read-only: a write there fails, it is not lost
                hidden.append(where)
    for where in hidden:
        args += ["--remount-ro", where]
    args += ["--remount-ro", "/", "--chdir", str(policy.cwd), "--setenv", "TMPDIR", "/tmp"]
    for key, value in policy.extra_env.items():
        args += ["--setenv", key, value]
    return [*args, "--", *argv]


_ROOT = "/mnt"  # where the new root is built: a directory of the base system, private here
# What bubblewrap's --dev gives, made the same way for unshare.
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}
# Parts of /proc that change the machine, read-only as bubblewrap makes them.
_PROC_RO = ("sys", "sysrq-trigger", "irq", "bus")
# The last step of the unshare backend, as root of a user namespace of its own (and a mount
# namespace it owns): that namespace's limit of further user namespaces set to 0 (a limit
# per user namespace, not the host's), then /proc/sys made read-only (the outer script
# leaves it writable for this write alone).
_NO_MORE_USERNS = (
    "echo 0 > /proc/sys/user/max_user_namespaces"
    " && PATH=/usr/sbin:/usr/bin:/sbin:/bin mount --bind /proc/sys /proc/sys"
    " && PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -o remount,bind,ro /proc/sys"
    ' && exec "$@"'
)


def unshare_argv(unshare: str, policy: Policy, argv: list[str]) -> list[str]:
    """``unshare`` with new mount, pid, ipc, uts (and network) namespaces, then a shell
    script that builds the view (:func:`agentos.sandbox.view.plan`) on an empty root,
    pivots into it, lets go of the host's mounts, and drops every capability."""
    q = shlex.quote
    r = _ROOT

    def at(path: Path | str) -> str:
        return q(f"{r}{path}")

    lines = [
        "set -e",
        # The system's own tools for the setup: what PATH names may not be in the view.
        'orig_path="$PATH"; PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        "mount --make-rprivate /",
        f"mount -t tmpfs -o mode=755 agentos-root {r}",
        f"mkdir {r}/dev {r}/proc",
        f"mount -t tmpfs -o mode=755,nosuid agentos-dev {r}/dev",
        *(f"touch {r}/dev/{d} && mount --bind /dev/{d} {r}/dev/{d}" for d in _DEVICES),
        f"mkdir {r}/dev/pts {r}/dev/shm",
        f"mount -t devpts -o newinstance,ptmxmode=0666,mode=620 agentos-pts {r}/dev/pts",
        f"mount -t tmpfs -o nosuid,nodev agentos-shm {r}/dev/shm",
        *(f"ln -s {target} {r}/dev/{name}" for name, target in _DEV_LINKS.items()),
        f"mount -t proc -o nosuid,nodev,noexec proc {r}/proc",
        *(
            f"[ ! -e {r}/proc/{p} ] || "
            f"{{ mount --bind {r}/proc/{p} {r}/proc/{p} && "
            f"mount -o remount,bind,ro {r}/proc/{p}; }}"
            for p in _PROC_RO
            if p != "sys"  # (made read-only at the last step, see _NO_MORE_USERNS)
        ),
    ]
    hidden: list[str] = []
    view = plan(policy)
    for m in view:
        dest = at(m.path)
        if m.kind == "link":
            lines.append(f"mkdir -p {at(m.path.parent)} && ln -s {q(m.source)} {dest}")
        elif m.kind in ("ro", "rw", "null"):
            source = "/dev/null" if m.kind == "null" else (m.source or str(m.path))
            make = (
                f"mkdir -p {dest}"
                if Path(source).is_dir()
                else f"mkdir -p {at(m.path.parent)} && touch {dest}"
            )
            lines += [f"[ -e {dest} ] || {{ {make}; }}", f"mount --rbind {q(source)} {dest}"]
            if m.kind != "rw":
                lines.append(f"mount -o remount,bind,ro {dest}")
        else:
            size = f",size={m.size}" if m.size is not None else ""
            lines += [f"mkdir -p {dest}", f"mount -t tmpfs -o mode=1777{size} agentos {dest}"]
            if m.kind == "hide":
                hidden.append(dest)
    lines += [f"mount -o remount,ro {d}" for d in hidden]
    writable = [str(m.path) for m in view if m.kind in ("rw", "tmpfs")]
    keep = " ".join(q(p) for p in writable)
    lines += [
        f"mkdir {r}/.old",
        f"mount -o remount,ro {r}",
        f"cd {r}",
        "pivot_root . .old",
        "umount -l /.old",
        # Whatever came along under a bound path (a submount) is read-only too, but what
        # the process may write.
        "for mp in $(awk '{print $2}' /proc/self/mounts); do "
        'case "$mp" in /proc|/proc/*|/dev|/dev/*) continue ;; esac; '
        f'case " {keep} " in *" $mp "*) ;; '
        '*) mount -o remount,bind,ro "$mp" 2>/dev/null || true ;; esac; done',
        "ip link set lo up 2>/dev/null || true",
        f"cd {q(str(policy.cwd))}",
        "export TMPDIR=/tmp",
        *(f"export {k}={q(v)}" for k, v in policy.extra_env.items()),
        "setpriv=$(command -v setpriv); setsid=$(command -v setsid)",
        'unshare=$(command -v unshare); PATH="$orig_path"',
        # A user namespace of its own in which no further one can be made (see
        # _NO_MORE_USERNS); then no capabilities, even for root, and a session of its own
        # (see bwrap_argv).
        f'exec "$unshare" --user --map-root-user --mount /bin/sh -c {q(_NO_MORE_USERNS)} '
        'agentos-sandbox "$setpriv" --inh-caps=-all --ambient-caps=-all '
        '--bounding-set=-all --no-new-privs -- "$setsid" "$@"',
    ]
    namespaces = ["--mount", "--pid", "--fork", "--kill-child", "--ipc", "--uts"]
    if not policy.network:
        namespaces.append("--net")
    return [unshare, *namespaces, "/bin/sh", "-c", "\n".join(lines), "agentos-sandbox", *argv]
