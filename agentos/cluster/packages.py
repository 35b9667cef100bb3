"""Agent packages shipped to the nodes: the archive through Ray's object store, keyed by the
package's sha256; unpacked once per node into its cache; verified on the node against the
``hub.lock`` entry the driver holds, file by file, before every attempt that runs it.

A package whose cached copy on a node was changed, lost a file or gained one is refused
there, naming the file, and never run; the node's copy is not repaired behind the
operator's back (who changed it?): removing ``.agentos/cluster/packages/<sha256>`` on the
node makes the next attempt fetch it again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from agentos.errors import Tampered
from agentos.hub import archive
from agentos.hub.digests import DigestCache, drift, read_all, tree_digest
from agentos.hub.store import Hub, content_digest
from agentos.workspace.layout import Workspace

PACKAGES = "packages"  # under a node's .agentos/cluster/


@dataclass(frozen=True)
class Shipment:
    """A package as it travels to a node: what ``hub.lock`` says of it, and where its
    archive is (``archive[0]``, a Ray object reference, fetched only by a node that lacks
    it: a reference inside a list is not fetched for the task)."""

    name: str
    version: str
    sha256: str  # of its content (every file's path and sha256), as hub.lock has it
    files: dict[str, str]  # each file's sha256
    archive: list[Any] = field(default_factory=list, compare=False)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def prefix(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass
class _Locked:
    """What hub.lock records of a version (agentos.hub.digests.Recorded)."""

    sha256: str
    files: dict[str, str]


def locked(hub: Hub, name: str, version: str) -> tuple[str, dict[str, str]]:
    """The sha256 and files ``hub.lock`` records for an installed version."""
    entry = hub.read_lock().packages[name].versions[version]
    return entry.sha256, dict(entry.files)


def described(package_dir: Path) -> tuple[str, dict[str, str]]:
    """The sha256 and files of a package that is not in the hub (an evolve candidate):
    what the node checks it against, computed where it was made."""
    return content_digest(package_dir)


def pack(package_dir: Path, prefix: str) -> bytes:
    """A package folder as the hub's reproducible archive."""
    with tempfile.TemporaryDirectory(prefix="agentos-ship-") as tmp:
        out = Path(tmp) / "package.tar.gz"
        archive.pack(package_dir, prefix, out)
        return out.read_bytes()


def unpacked(ws: Workspace, shipment: Shipment, fetch: Any) -> Path:
    """The package on this node, verified against what the driver's ``hub.lock`` says of
    it: from the node's cache, or unpacked from ``fetch()`` (the archive's bytes) into it
    first. :class:`Tampered` (one line per file) when what is there is not that package."""
    root = ws.state_dir / "cluster" / PACKAGES / shipment.sha256
    where = root / shipment.prefix
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if not where.is_dir():
            _unpack(fetch(), root, shipment)
    cache = DigestCache(ws.state_dir / "cache" / "cluster-digests.json")
    files = cache.scan(where).files
    problems = drift(shipment.ref, _Locked(shipment.sha256, shipment.files), where, files)
    if problems:
        raise Tampered(problems)
    return where


def _unpack(data: bytes, root: Path, shipment: Shipment) -> None:
    """Extract the archive beside ``root``, check it against the lock, then rename it into
    place, read-only: a node never holds half a package."""
    stage = Path(tempfile.mkdtemp(prefix=".stage-", dir=root.parent))
    try:
        tarball = stage / "package.tar.gz"
        tarball.write_bytes(data)
        (stage / "tree").mkdir()
        archive.extract(tarball, stage / "tree")
        where = stage / "tree" / shipment.prefix
        files = read_all(where) if where.is_dir() else None
        if tree_digest(shipment.files) != shipment.sha256:
            raise Tampered([f"{shipment.ref}: the driver's hub.lock entry was edited"])
        problems = drift(shipment.ref, _Locked(shipment.sha256, shipment.files), where, files)
        if problems:
            raise Tampered(problems)
        os.rename(stage / "tree", root)
        _read_only(root)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _read_only(tree: Path) -> None:
    for path in [tree, *tree.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~0o222)
