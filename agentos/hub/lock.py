"""``hub.lock``: the record of what the hub installed, as written and as validated.

One meaning of the file for :class:`agentos.hub.store.Hub`, which writes it, and for
:func:`agentos.hub.versions.hub_versions`, which reads it for routing without pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from agentos.shared.models import validate
from agentos.shared.yaml import parse_yaml

if TYPE_CHECKING:
    from agentos.hub.versions import Versions

LOCK_HEADER = "# Written by agentos; do not edit by hand. `agentos hub verify` checks it.\n"


class _LockModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LockedVersion(_LockModel):
    sha256: str  # of the package's content (every file's path and sha256)
    source: str  # where it was installed from
    installed: str  # when, UTC
    files: dict[str, str] = Field(default_factory=dict)  # each file's sha256


class LockedPackage(_LockModel):
    active: str | None = None  # the version runs use
    versions: dict[str, LockedVersion] = Field(default_factory=dict)


class LockFile(_LockModel):
    version: int = 1  # of the format
    packages: dict[str, LockedPackage] = Field(default_factory=dict)


def lock_versions(lock: LockFile) -> Versions:
    """What routing and ``hub list`` need of a lock, as plain data."""
    return {
        name: (pkg.active, {v: (e.sha256, e.source, e.installed) for v, e in pkg.versions.items()})
        for name, pkg in sorted(lock.packages.items())
    }


def parse_lock(path: Path, data: bytes) -> LockFile:
    """``hub.lock``'s bytes, validated; a problem names the file and field."""
    text = data.decode("utf-8", errors="replace")
    return validate(LockFile, parse_yaml(text, path) if text.strip() else {}, file=path)
