"""Maintainer tool: record the bundled packages under hub/ in hub/hub.lock.

Run after editing a bundled package (and bump its version when it has shipped):
    python scripts/relock_hub.py
Entries whose content did not change keep their install time.
"""

from __future__ import annotations

from pathlib import Path

from agentos.hub.lock import LockedPackage, LockedVersion
from agentos.hub.manifest import load_manifest
from agentos.hub.store import Hub, content_digest
from agentos.shared.versions import version_key

ROOT = Path(__file__).resolve().parent.parent / "hub"
BUNDLED_TIME = "2026-11-22T00:00:00Z"


def main() -> None:
    hub = Hub(ROOT)
    old = hub.read_lock()
    with hub._locked() as lock:
        lock.packages.clear()
        for manifest_path in sorted(ROOT.glob("*/*/agent.yaml")):
            pkg_dir = manifest_path.parent
            manifest = load_manifest(pkg_dir)
            assert (pkg_dir.parent.name, pkg_dir.name) == (manifest.name, manifest.version), pkg_dir
            digest, files = content_digest(pkg_dir)
            before = old.packages.get(manifest.name, LockedPackage()).versions.get(manifest.version)
            installed = before.installed if before and before.sha256 == digest else BUNDLED_TIME
            pkg = lock.packages.setdefault(manifest.name, LockedPackage())
            pkg.versions[manifest.version] = LockedVersion(
                sha256=digest, source="bundled", installed=installed, files=files
            )
            pkg.active = max(pkg.versions, key=version_key)
            print(f"{manifest.ref}  {digest[:12]}")


if __name__ == "__main__":
    main()
