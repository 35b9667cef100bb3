"""What a confined process sees of the file system: one list of mounts, made from a
:class:`~agentos.sandbox.policy.Policy`, that both backends build (bubblewrap from its
arguments, ``unshare`` from a mount script).

Deny by default. The process starts from an empty, read-only root and sees:

- the system directories (:data:`SYSTEM`), read-only, without what the system keeps from
  other users (files and directories of ``/etc`` that are not world-readable, such as
  ``/etc/shadow`` and ``/etc/ssl/private``: they read as empty);
- its own ``/dev`` (null, zero, random, a pty of its own), its own ``/proc`` (its own
  processes only), an empty ``/tmp`` and an empty home (each a tmpfs sized by the disk
  quota);
- the paths of its policy, each exactly: what it may read (its package, the git common
  directory, the interpreter's own venv, the tools on its PATH, ``sandbox.read``), what it
  may write (its worktree, its run's files);
- nothing else: no other directory of the machine (``/home``, ``/root``, ``/srv``,
  ``/var``, ``/run``, ``/sys``, ``/mnt``...), no workspace, no checkout.

A hidden path that lies inside a path shown (the workspace inside a directory listed in
``sandbox.read``, the eval suites inside AgentOS's package) is covered again by an empty,
read-only directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from agentos.sandbox.policy import Policy, inside_any

# The system's directories, shown read-only (a symlink, like /bin -> usr/bin on a merged
# /usr, is made again as the same symlink).
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Where the system keeps what other users may not read: such entries are hidden.
_GUARDED = ("/etc",)

Kind = Literal["ro", "rw", "link", "tmpfs", "hide", "null"]


@dataclass(frozen=True)
class Mount:
    """One step of the view. ``ro``/``rw``: ``path`` bound from the host; ``link``: a
    symlink to ``source``; ``tmpfs``: an empty writable directory of ``size`` bytes at
    most; ``hide``: an empty read-only directory; ``null``: a file made unreadable
    (``/dev/null`` bound over it)."""

    kind: Kind
    path: Path
    source: str = ""  # link: the symlink's target; ro/rw: where it comes from, when elsewhere
    size: int | None = None


@lru_cache(maxsize=1)
def system_mounts() -> tuple[Mount, ...]:
    found = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            found.append(Mount("link", path, os.readlink(path)))
        elif path.is_dir():
            found.append(Mount("ro", path))
    return tuple(found)


@lru_cache(maxsize=1)
def kept_from_others() -> tuple[tuple[Path, bool], ...]:
    """What the system directories hold that other users may not read (a file or a
    directory without the world's read bit), as (path, is a directory); what lies inside
    such a directory is not looked at."""
    found: list[tuple[Path, bool]] = []
    for root in _GUARDED:
        for parent, dirs, files in os.walk(root):
            for name in [*dirs, *files]:
                path = os.path.join(parent, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode) or st.st_mode & stat.S_IROTH:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    found.append((Path(path), True))
                    dirs.remove(name)
                elif stat.S_ISREG(st.st_mode):
                    found.append((Path(path), False))
    return tuple(found)


@lru_cache(maxsize=1)
def _system_roots() -> tuple[Path, ...]:
    """Where the system directories really are (``/usr`` for ``/bin`` on a merged /usr)."""
    return tuple(Path(name).resolve() for name in SYSTEM if Path(name).exists())


def plan(policy: Policy) -> list[Mount]:
    """The mounts that make ``policy``'s view, in the order they must be made (a deeper
    path after the one it lies in)."""
    steps = list(system_mounts())
    for path, is_dir in kept_from_others():
        steps.append(Mount("hide" if is_dir else "null", path))
    size = policy.limits.disk
    steps.append(Mount("tmpfs", Path("/tmp"), size=size))
    if policy.home_dir is not None:
        steps.append(Mount("rw", policy.home, source=str(policy.home_dir)))
    else:
        steps.append(Mount("tmpfs", policy.home, size=size))

    system = _system_roots()
    shown: list[tuple[Kind, Path]] = []
    for path in policy.readable:
        if not inside_any(path.resolve(), system) and path != policy.home:
            shown.append(("ro", path))
    shown += [("ro", p) for p in policy.home_reads]
    shown += [("rw", p) for p in policy.writable]
    # A path read-only inside another one read-only is there already (and a bind cannot
    # be made onto a read-only mount), unless something hidden lies between them.
    ro = [p for kind, p in shown if kind == "ro"]

    def redundant(p: Path) -> bool:
        return any(
            q != p
            and p.is_relative_to(q)
            and not any(h.is_relative_to(q) and p.is_relative_to(h) for h in policy.hidden)
            for q in ro
        )

    shown = [(kind, p) for kind, p in shown if kind == "rw" or not redundant(p)]
    # (in /tmp and the home too: there the path would be a writable directory of the
    # private tmpfs, where a write seems to work and is lost)
    bound = [p for _, p in shown] + [policy.home, Path("/tmp")]
    hides = [h for h in policy.hidden if any(h != b and h.is_relative_to(b) for b in bound)]
    later = [Mount(kind, p) for kind, p in dict.fromkeys(shown)]
    later += [Mount("hide", h) for h in dict.fromkeys(hides)]
    # Shallowest first; at one depth a bind before a hide (a hide covers what is bound).
    later.sort(key=lambda m: (len(m.path.parts), m.kind == "hide"))
    return steps + later


def listing(policy: Policy) -> list[dict[str, object]]:
    """The view as ``sandbox doctor`` prints it: each path and how it is seen."""
    words = {
        "ro": "read-only",
        "rw": "read-write",
        "link": "symlink",
        "tmpfs": "empty, private",
        "hide": "hidden (empty)",
        "null": "hidden (unreadable)",
    }
    return [
        {"path": str(m.path), "seen": words[m.kind], **({"from": m.source} if m.source else {})}
        for m in plan(policy)
    ]
