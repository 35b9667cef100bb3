"""Which versions of which packages the hub has, and which is active: what routing needs
of ``hub.lock``, without pydantic or YAML on the way.

:func:`hub_versions` reads ``hub.lock`` once per change: the validated lock is kept as a
small marshal file in the workspace's cache, named by the sha256 of the lock's bytes, so
a routing decision in a new process costs one read and one hash of ``hub.lock``. The first
read of a new lock validates it as :class:`agentos.hub.store.Hub` does (one meaning of the file).
:func:`resolve` and :func:`parse_ref` are the hub's own (``Hub.resolve`` uses this one).
"""

from __future__ import annotations

import hashlib
import marshal
import re
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput, NotFound
from agentos.shared.fs import atomic_write
from agentos.shared.versions import parse_constraint, version_key

# name -> (active version or None, {version: (sha256, source, install time)})
Versions = dict[str, tuple[str | None, dict[str, tuple[str, str, str]]]]

_REF_RE = re.compile(r"^(?P<name>[^@\s]+)(?:@(?P<version>[^@\s]+))?$")
_FORMAT = 2  # of the cache file


def parse_ref(ref: str) -> tuple[str, str | None]:
    """Split ``name[@version]``."""
    match = _REF_RE.match(ref.strip())
    if not match:
        raise BadInput(f"{ref!r} is not NAME or NAME@VERSION", field="package")
    return match["name"], match["version"]


def hub_versions(lock_path: Path, cache_dir: Path) -> tuple[str, Versions]:
    """The revision of ``hub.lock`` (the sha256 of its bytes) and its versions."""
    try:
        data = lock_path.read_bytes()
    except FileNotFoundError:
        data = b""
    revision = hashlib.sha256(data).hexdigest()
    if not data:
        return revision, {}
    cached = cache_dir / f"hub-versions-{revision}-f{_FORMAT}.marshal"
    with suppress(OSError, ValueError, EOFError, TypeError):
        loaded = marshal.loads(cached.read_bytes())
        if _well_formed(loaded):
            return revision, loaded
    versions = _validated(lock_path, data)
    with suppress(OSError):  # a cache: a read-only workspace validates each time
        cache_dir.mkdir(parents=True, exist_ok=True)
        for old in cache_dir.glob("hub-versions-*.marshal"):
            old.unlink(missing_ok=True)
        atomic_write(cached, marshal.dumps(versions))
    return revision, versions


def _well_formed(loaded: object) -> bool:
    """A kept file of the shape written (a damaged or foreign one is made again)."""
    return isinstance(loaded, dict) and all(
        isinstance(name, str)
        and isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[1], dict)
        and all(isinstance(v, tuple) and len(v) == 3 for v in entry[1].values())
        for name, entry in loaded.items()
    )


def _validated(lock_path: Path, data: bytes) -> Versions:
    from agentos.hub.lock import lock_versions, parse_lock

    return lock_versions(parse_lock(lock_path, data))


@dataclass(frozen=True)
class InstalledVersion:
    """One installed version of a package, as ``hub list`` shows it."""

    name: str
    version: str
    active: bool
    sha256: str
    source: str
    installed: str
    path: Path

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "version": self.version,
            "active": self.active,
            "sha256": self.sha256,
            "source": self.source,
            "installed": self.installed,
            "path": str(self.path),
        }


def installed_versions(hub_dir: Path, versions: Versions) -> list[InstalledVersion]:
    """Every installed version, by name then version."""
    out = []
    for name, (active, known) in sorted(versions.items()):
        for version in sorted(known, key=version_key):
            sha256, source, installed = known[version]
            out.append(
                InstalledVersion(
                    name,
                    version,
                    version == active,
                    sha256,
                    source,
                    installed,
                    hub_dir / name / version,
                )
            )
    return out


def resolve(versions: Versions, name: str, constraint: str | None) -> str:
    """The version of ``name`` a card asks for: the active one, or the highest that fits.

    Raises :class:`NotFound` naming why nothing fits.
    """
    active, installed = versions.get(name, (None, ()))
    if not installed:
        raise NotFound(f"agent {name!r} is not installed in the hub")
    if not constraint:
        if active is None:
            raise NotFound(f"agent {name!r} has no active version")
        return active
    spec = parse_constraint(constraint)
    if active and spec.contains(active, prereleases=True):
        return active
    fitting = [v for v in installed if spec.contains(v, prereleases=True)]
    if not fitting:
        known = ", ".join(sorted(installed, key=version_key))
        raise NotFound(
            f"no installed version of {name} satisfies {constraint!r} (installed: {known})"
        )
    return max(fitting, key=version_key)
