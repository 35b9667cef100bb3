"""The command lines that confine a process: bubblewrap, or util-linux ``unshare`` with a
small mount script when bubblewrap is missing.

Both give the process its own mount, pid, ipc and uts namespaces (and network namespace
unless the policy allows the network: then only loopback works inside), the system
read-only, the hidden paths replaced by empty directories, and the policy's paths bound
back. Everything the process starts lives in its pid namespace and dies with it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from agentos.sandbox._policy import Policy


def _binds(policy: Policy) -> list[tuple[str, Path]]:
    """The paths bound back, read-only or read-write, shallowest first so that a deeper
    bind lands on top of a shallower one."""
    hidden = [*policy.hidden, policy.home]
    reads = [
        ("ro", p)
        for p in policy.readable
        if not any(h != p and h.is_relative_to(p) for h in hidden)  # never re-expose a parent
    ]
    binds = [*reads, *(("ro", p) for p in policy.home_reads), *(("rw", p) for p in policy.writable)]
    ro = [p for mode, p in binds if mode == "ro"]
    binds = [  # a read-only path inside another one is already there (and cannot be mounted)
        (mode, p)
        for mode, p in binds
        if mode == "rw" or not any(q != p and p.is_relative_to(q) for q in ro)
    ]
    return sorted(binds, key=lambda b: len(b[1].parts))


def bwrap_argv(bwrap: str, policy: Policy, argv: list[str]) -> list[str]:
    args = [
        bwrap,
        "--die-with-parent",
        # No capabilities inside, even for root: nothing can unmount what hides the
        # workspace and the home, remount the system writable, or leave its control group.
        "--cap-drop",
        "ALL",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not policy.network:
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if not policy.network:  # the host's services listen on Unix sockets there
        args += ["--tmpfs", "/run"]
    for path in policy.hidden:
        args += ["--tmpfs", str(path)]
    if policy.home_dir is not None:
        args += ["--bind", str(policy.home_dir), str(policy.home)]
    else:
        args += ["--tmpfs", str(policy.home)]
    for mode, path in _binds(policy):
        args += ["--ro-bind" if mode == "ro" else "--bind", str(path), str(path)]
    for path in policy.hidden:  # empty and read-only: a write there fails, it is not lost
        args += ["--remount-ro", str(path)]
    args += ["--chdir", str(policy.cwd), "--setenv", "TMPDIR", "/tmp"]
    for key, value in policy.extra_env.items():
        args += ["--setenv", key, value]
    return [*args, "--", *argv]


_STAGE = "/mnt"  # an empty directory of the base system, private to the new mount namespace


def unshare_argv(unshare: str, policy: Policy, argv: list[str]) -> list[str]:
    """``unshare`` with new mount, pid, ipc, uts (and network) namespaces, then a shell
    script that stages the paths to bind back, hides, binds them back, and makes the root
    read-only. Weaker than bubblewrap in one way, said by ``sandbox doctor``: only the root
    file system is made read-only, not every other mount of the host."""
    binds = _binds(policy)
    lines = [
        "set -e",
        # The system's own tools for the setup: what PATH names may be hidden by it.
        'orig_path="$PATH"; PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        "mount --make-rprivate /",
        f"mount -t tmpfs agentos-stage {_STAGE}",
    ]
    staged: list[tuple[str, Path, str]] = []
    sources = [*binds]
    if policy.home_dir is not None:
        sources.append(("rw", policy.home_dir))
    for i, (mode, path) in enumerate(sources):
        stage = f"{_STAGE}/{i}"
        make = f"mkdir -p {stage}" if path.is_dir() else f"touch {stage}"
        lines += [make, f"mount --rbind {shlex.quote(str(path))} {stage}"]
        staged.append((mode, path, stage))
    q = shlex.quote
    lines.append("mount -t tmpfs agentos-tmp /tmp")
    if not policy.network:  # the host's services listen on Unix sockets there
        lines.append("mount -t tmpfs agentos-run /run")
    for path in policy.hidden:
        lines.append(f"mkdir -p {q(str(path))} && mount -t tmpfs agentos-hidden {q(str(path))}")
    if policy.home_dir is not None:
        home_stage = staged.pop()[2]
        lines.append(f"mkdir -p {q(str(policy.home))}")
        lines.append(f"mount --rbind {home_stage} {q(str(policy.home))}")
    else:
        lines.append(f"mkdir -p {q(str(policy.home))}")
        lines.append(f"mount -t tmpfs agentos-home {q(str(policy.home))}")
    for mode, path, stage in staged:
        target = q(str(path))
        make = (
            f"mkdir -p {target}"
            if path.is_dir()
            else f"mkdir -p {q(str(path.parent))} && touch {target}"
        )
        lines += [f"[ -e {target} ] || {{ {make}; }}", f"mount --rbind {stage} {target}"]
        if mode == "ro":
            lines.append(f"mount -o remount,bind,ro {target}")
    for path in policy.hidden:
        lines.append(f"mount -o remount,ro {q(str(path))}")
    writable = [str(p) for mode, p in binds if mode == "rw"]
    writable += ["/tmp", str(policy.home)]
    keep = " ".join(q(p) for p in writable)
    lines += [
        f"umount -l {_STAGE}",
        "mount -o remount,bind,ro /",
        # Every other mount of the host read-only too (the control groups among them), but
        # what the process may write.
        f"for mp in $(awk '{{print $2}}' /proc/self/mounts); do "
        f'case " {keep} " in *" $mp "*) ;; '
        f'*) mount -o remount,bind,ro "$mp" 2>/dev/null || true ;; esac; done',
        "ip link set lo up 2>/dev/null || true",
        f"cd {q(str(policy.cwd))}",
        "export TMPDIR=/tmp",
        *(f"export {k}={q(v)}" for k, v in policy.extra_env.items()),
        # No capabilities past this point, even for root (see bwrap_argv).
        'PATH="$orig_path"',
        "exec $(PATH=/usr/bin:/bin command -v setpriv) --inh-caps=-all --ambient-caps=-all "
        '--bounding-set=-all --no-new-privs -- "$@"',
    ]
    namespaces = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if not policy.network:
        namespaces.append("--net")
    return [unshare, *namespaces, "/bin/sh", "-c", "\n".join(lines), "agentos-sandbox", *argv]
