"""The files of a package and their sha256, and a stat cache so that checking an unchanged
package costs a directory walk and one ``lstat`` per file, not reading every file.

One walk (:func:`walk`) and one digest per file (:func:`file_digest`) serve installing,
``hub verify`` and the check before a run, so the three can never disagree about which files
a package has or what each one hashes to.

The cache (:class:`DigestCache`) is a JSON file, by default ``.agentos/cache/hub-digests.json``
of the workspace. It maps each file of an installed version to its stat signature (device,
inode, mode, size, mtime, ctime) and the sha256 computed for it. A digest is reused only when
the signature is unchanged and the file was last changed well before it was hashed (git's
"racy clean" rule, the one the router's card cache uses): an edit within the file system's
timestamp granularity is never missed. ``touch -d`` can restore an mtime but not a ctime, and a
file replaced by another (or by a symlink) has another inode, so every change a user or an
agent can make without root is seen. What the cache cannot stop is someone who can write the
cache itself: they can also rewrite ``hub.lock``. A corrupt or unreadable cache is ignored and
rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentos.hub.archive import IGNORED_PARTS
from agentos.shared.fs import sha256_bytes

log = logging.getLogger(__name__)

LOCK_FILE = "hub.lock"
FORMAT = 1
RACY_NS = 2_000_000_000  # a file changed less than this before it was hashed is hashed again
UNREADABLE = "unreadable"  # the digest of a file that cannot be read: never matches a sha256

# dev, ino, mode, size, mtime_ns, ctime_ns
Signature = tuple[int, int, int, int, int, int]


def _compiled(name: str) -> bool:
    """``Path(name).suffix == ".pyc"``, without making a Path."""
    dot = name.rfind(".")
    return 0 < dot < len(name) - 1 and name[dot:] == ".pyc"


def walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every file of the package at ``root`` (posix path relative to it) with its ``lstat``,
    sorted: regular files and symlinks (never followed), without caches and VCS data, as
    :func:`agentos.hub.archive.package_files` finds them.

    A directory that cannot be listed is walked as empty, so its files show as removed.
    """
    found: list[tuple[str, os.stat_result]] = []
    pending = [(str(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in listed:
            name = entry.name
            if name in IGNORED_PARTS:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                pending.append((entry.path, f"{prefix}{name}/"))
            elif (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) and not (
                name.endswith(".pyc") and _compiled(name)
            ):
                found.append((prefix + name, st))
    found.sort(key=lambda item: item[0])
    return found


def file_digest(path: str | Path, st: os.stat_result) -> str:
    """The sha256 recorded for one file of a package (for a symlink: of its target's name).

    ``st`` is the file's ``lstat`` from :func:`walk`; a regular file is opened without
    following symlinks, so a file swapped for a link after the walk fails to open (OSError).
    """
    if stat.S_ISLNK(st.st_mode):
        return sha256_bytes(f"symlink:{os.readlink(path)}".encode())
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def tree_digest(files: dict[str, str]) -> str:
    """The sha256 of a whole package: of its sorted ``digest  rel`` listing."""
    listing = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(files.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def read_all(root: Path) -> dict[str, str]:
    """Every file's digest, read now; a file that cannot be read is :data:`UNREADABLE`."""
    files: dict[str, str] = {}
    for rel, st in walk(root):
        try:
            files[rel] = file_digest(root / rel, st)
        except OSError:
            files[rel] = UNREADABLE
    return files


class Recorded(Protocol):
    """What ``hub.lock`` records of an installed version (``hub.LockedVersion``)."""

    sha256: str
    files: dict[str, str]


def drift(ref: str, locked: Recorded, where: Path, files: dict[str, str] | None) -> list[str]:
    """How the installed version ``ref`` (NAME@VERSION) differs from its ``hub.lock`` entry,
    one line per problem: ``NAME@VERSION: REL: modified|added|removed``, an edited entry, a
    missing directory.

    The one wording of drift: ``hub verify`` prints these lines and a refused run names them.
    ``files`` is what the version's directory ``where`` holds now (None: it is missing).
    """
    if files is None:
        return [f"{ref}: directory {where} is missing"]
    problems = []
    if tree_digest(locked.files) != locked.sha256:
        problems.append(f"{ref}: {LOCK_FILE} entry was edited")
    if tree_digest(files) == locked.sha256:
        return problems
    for rel in sorted(set(files) | set(locked.files)):
        if rel not in files:
            problems.append(f"{ref}: {rel}: removed")
        elif rel not in locked.files:
            problems.append(f"{ref}: {rel}: added")
        elif files[rel] != locked.files[rel]:
            problems.append(f"{ref}: {rel}: modified")
    return problems


def signature(st: os.stat_result) -> Signature:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Scan:
    """What a package holds now: each file's sha256, and how many files had to be read."""

    files: dict[str, str]
    hashed: int


# A package's files in the cache: rel -> [dev, ino, mode, size, mtime_ns, ctime_ns, sha256,
# when it was hashed (time.time_ns())], as JSON gives it back: checked where it is used.
_Entries = dict[str, Any]


class DigestCache:
    """Per-file digests of installed versions, kept in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._memory: dict[str, _Entries] = {}

    def scan(self, root: Path) -> Scan:
        """The digests of the package at ``root``, reading only the files whose signature
        changed; the cache is rewritten when anything was read."""
        packages = self._load()
        key = base = str(root)
        known = packages.get(key)
        if not isinstance(known, dict):
            known = {}
        fresh: _Entries = {}
        files: dict[str, str] = {}
        hashed = 0
        for rel, st in walk(root):
            sig = [*signature(st)]
            old = known.get(rel)
            if (
                type(old) is list
                and len(old) == 8
                and old[:6] == sig
                and type(old[6]) is str
                and type(old[7]) is int
                and max(st.st_mtime_ns, st.st_ctime_ns) < old[7] - RACY_NS
            ):
                fresh[rel] = old
                files[rel] = old[6]
                continue
            try:
                digest = file_digest(os.path.join(base, rel), st)
            except OSError:
                files[rel] = UNREADABLE
                continue
            hashed += 1
            files[rel] = digest
            fresh[rel] = [*sig, digest, time.time_ns()]
        if hashed or fresh.keys() != known.keys():
            packages = {k: v for k, v in packages.items() if k != key and os.path.isdir(k)}
            packages[key] = fresh  # and versions removed since are forgotten
            self._save(packages)
        return Scan(files, hashed)

    # -- the file --------------------------------------------------------------------------

    def _load(self) -> dict[str, _Entries]:
        if self.path is None:
            return self._memory
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):  # missing, unreadable or corrupt: start again
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return {}
        packages = data.get("packages")
        return packages if isinstance(packages, dict) else {}

    def _save(self, packages: dict[str, _Entries]) -> None:
        if self.path is None:
            self._memory = packages
            return
        doc = {"format": FORMAT, "packages": dict(sorted(packages.items()))}
        try:  # atomic, but not fsynced: a cache lost in a crash is rebuilt
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(doc, separators=(",", ":")))
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:  # a read-only workspace still checks, just without the cache
            log.warning("cannot write the package digest cache %s: %s", self.path, exc)
