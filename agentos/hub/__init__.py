"""The hub: versioned agent packages, installed once and never modified.

Its parts: :mod:`~agentos.hub.store` (the :class:`Hub`: install, activate, verify, remove),
:mod:`~agentos.hub.manifest` (``agent.yaml``), :mod:`~agentos.hub.lock` (``hub.lock``, what
was installed), :mod:`~agentos.hub.versions` (which versions there are, read for routing
without pydantic), :mod:`~agentos.hub.archive` (deterministic packing, safe extraction) and
:mod:`~agentos.hub.digests` (a package's files and their sha256).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.hub.manifest import Manifest, load_manifest
    from agentos.hub.store import Hub
    from agentos.hub.versions import InstalledVersion, hub_versions, parse_ref

FACE = {
    "Hub": "agentos.hub.store",
    "InstalledVersion": "agentos.hub.versions",
    "Manifest": "agentos.hub.manifest",
    "load_manifest": "agentos.hub.manifest",
    "hub_versions": "agentos.hub.versions",
    "parse_ref": "agentos.hub.versions",
}
__all__ = [
    "Hub",
    "InstalledVersion",
    "Manifest",
    "hub_versions",
    "load_manifest",
    "parse_ref",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
