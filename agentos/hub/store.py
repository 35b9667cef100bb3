"""The hub: versioned agent packages, installed once and never modified.

Layout: ``hub/<name>/<version>/`` holds a package; ``hub/hub.lock`` (YAML) records, for
every installed version, its source, the sha256 of its content (and of each file, so drift
can be named), its install time and which version of each package is active.

Every change takes a file lock (``hub/.lock``) and rewrites ``hub.lock`` atomically, so
concurrent installs leave a consistent lock. Installs stage the package in a temporary
directory inside the hub, validate it, then move it into place with one rename.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock

from agentos.errors import (
    AgentOSError,
    BadInput,
    Conflict,
    HostileArchive,
    NotFound,
    Tampered,
    ValidationFailed,
)
from agentos.hub import archive
from agentos.hub.digests import (
    LOCK_FILE,
    DigestCache,
    drift,
    file_digest,
    read_all,
    tree_digest,
    walk,
)
from agentos.hub.lock import (
    LOCK_HEADER,
    LockedPackage,
    LockedVersion,
    LockFile,
    lock_versions,
    parse_lock,
)
from agentos.hub.manifest import MANIFEST, Manifest, load_manifest
from agentos.hub.versions import InstalledVersion as InstalledVersion
from agentos.hub.versions import Versions, hub_versions, installed_versions
from agentos.hub.versions import parse_ref as parse_ref
from agentos.hub.versions import resolve as resolve_version
from agentos.shared.fs import atomic_write, sha256_bytes
from agentos.shared.models import validate
from agentos.shared.versions import version_key
from agentos.workspace.layout import STATE_DIR

DIGEST_CACHE = "hub-digests.json"  # in the workspace's .agentos/cache/
_STAGING = ".staging"


# --- what the hub returns -----------------------------------------------------------------


@dataclass(frozen=True)
class IntactCheck:
    """An installed version found exactly as installed: ``files`` files, ``hashed`` of them
    read (the others' signatures had not changed since they were last hashed)."""

    name: str
    version: str
    files: int
    hashed: int


@dataclass(frozen=True)
class InstallResult:
    name: str
    version: str
    sha256: str
    source: str
    changed: bool  # False when the same content was already installed


def content_digest(package_dir: Path) -> tuple[str, dict[str, str]]:
    """The sha256 of a package's content and of each of its files (paths are posix)."""
    files = {rel: file_digest(package_dir / rel, st) for rel, st in walk(package_dir)}
    return tree_digest(files), files


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_GIT_URL = re.compile(r"^(?P<head>[a-z][a-z0-9+.-]*://[^/]*|[\w.-]+@[\w.-]+:)(?P<tail>.+)$")


def split_git_source(source: str) -> tuple[str, str | None] | None:
    """``(url, ref)`` when ``source`` is a git URL, optionally ending in ``@ref``; else None."""
    match = _GIT_URL.match(source.removeprefix("git+"))
    if not match:
        return None
    tail, ref = match["tail"], None
    if "@" in tail:
        tail, _, ref = tail.rpartition("@")
    return match["head"] + tail, ref or None


class Hub:
    """The hub at ``root``.

    ``cache`` is where :meth:`check_intact` keeps per-file digests between processes; by
    default ``.agentos/cache/hub-digests.json`` of the workspace holding the hub (when the hub
    is a workspace's ``hub/``), else only in memory, for this object.
    """

    def __init__(self, root: Path, *, cache: Path | None = None) -> None:
        self.root = root
        self.lock_path = root / LOCK_FILE
        self._filelock = FileLock(str(root / ".lock"))
        # A workspace's hub keeps hub.lock's validated versions in the workspace's cache (by
        # the lock's sha256: agentos.hub.versions), as routing does: a run reads the lock
        # without YAML or pydantic (~10 ms of every run).
        self._versions_cache: Path | None = None
        if (root.parent / STATE_DIR).is_dir():
            self._versions_cache = root.parent / STATE_DIR / "cache"
            if cache is None:
                cache = self._versions_cache / DIGEST_CACHE
        self._digests = DigestCache(cache)

    # -- reading ---------------------------------------------------------------------------

    def read_lock(self) -> LockFile:
        try:
            data = self.lock_path.read_bytes()
        except FileNotFoundError:
            return LockFile()
        return parse_lock(self.lock_path, data)

    def revision(self) -> str:
        """sha256 of hub.lock: what receipts record as the hub's revision."""
        try:
            return sha256_bytes(self.lock_path.read_bytes())
        except FileNotFoundError:
            return sha256_bytes(b"")

    def locked_versions(self) -> Versions:
        """What hub.lock says of each package: its active version and its versions (sha256,
        source, install time); validated as :meth:`read_lock` validates it."""
        if self._versions_cache is not None:
            return hub_versions(self.lock_path, self._versions_cache)[1]
        return lock_versions(self.read_lock())

    def versions(self) -> list[InstalledVersion]:
        """Every installed version, by name then version."""
        return installed_versions(self.root, self.locked_versions())

    def active(self) -> list[tuple[InstalledVersion, Manifest]]:
        """The active version of every package with its manifest, by name (the lock read
        once); one whose manifest does not load is left out (`hub verify` names it)."""
        out = []
        for info in self.versions():
            if info.active:
                try:
                    out.append((info, load_manifest(info.path)))
                except BadInput:
                    continue
        return out

    def get(self, ref: str) -> tuple[InstalledVersion, Manifest]:
        """The installed package ``name[@version]`` (the active version by default)."""
        name, version = parse_ref(ref)
        active, known = self.locked_versions().get(name, (None, {}))
        if not known:
            raise NotFound(f"no package {name!r} in the hub", field="package")
        version = version or active
        if version is None or version not in known:
            listed = ", ".join(sorted(known, key=version_key))
            raise NotFound(
                f"{name}@{version} is not installed (installed: {listed})", field="package"
            )
        sha256, source, installed = known[version]
        path = self.root / name / version
        info = InstalledVersion(name, version, version == active, sha256, source, installed, path)
        return info, load_manifest(path)

    def resolve(self, name: str, constraint: str | None) -> str:
        """The version of ``name`` a card asks for: the active one, or the highest that fits.

        Raises :class:`NotFound` naming why nothing fits.
        """
        return resolve_version(self.locked_versions(), name, constraint)

    # -- changing --------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[LockFile]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._filelock:
            lock = self.read_lock()
            yield lock
            self._write_lock(lock)

    def _write_lock(self, lock: LockFile) -> None:
        data = lock.model_dump(mode="json")
        for pkg in data["packages"].values():
            pkg["versions"] = dict(
                sorted(pkg["versions"].items(), key=lambda kv: version_key(kv[0]))
            )
        data["packages"] = dict(sorted(data["packages"].items()))
        text = LOCK_HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        atomic_write(self.lock_path, text)

    def install(self, source: str) -> InstallResult:
        """Install a package from a directory, a .tar.gz made by ``pack`` or a git URL."""
        git = split_git_source(source)
        path = Path(source).expanduser()
        if git is not None and not path.exists():
            return self._install_git(*git)
        if path.is_dir():
            return self._install_staged(
                lambda stage: _copy_package(path, stage), f"dir:{path.resolve()}"
            )
        if path.is_file():
            if not path.name.endswith((".tar.gz", ".tgz")):
                raise BadInput("expected a package directory, a .tar.gz or a git URL", file=path)
            # Validate every member before anything is written to the hub.
            with tempfile.TemporaryDirectory() as probe:
                archive.extract(path, Path(probe))
                _package_root(Path(probe), path)
            return self._install_staged(
                lambda stage: archive.extract(path, stage), f"archive:{path.resolve()}"
            )
        raise NotFound("no such package directory, archive or git URL", file=source)

    def _install_git(self, url: str, ref: str | None) -> InstallResult:
        import git  # gitpython; imported here because only git installs need it

        with tempfile.TemporaryDirectory() as tmp:
            try:
                repo = git.Repo.clone_from(url, tmp, no_checkout=ref is not None)
                if ref:
                    repo.git.checkout(ref)
            except git.GitCommandError as exc:
                detail = (exc.stderr or str(exc)).strip().splitlines()
                raise BadInput(
                    f"git: {detail[-1] if detail else exc}", file=f"{url}@{ref}" if ref else url
                ) from None
            commit = repo.head.commit.hexsha
            checkout = Path(tmp)
            return self._install_staged(
                lambda stage: _copy_package(checkout, stage), f"git+{url}@{commit}"
            )

    def _install_staged(self, fill: Callable[[Path], None], source: str) -> InstallResult:
        staging_root = self.root / _STAGING
        stage = _stage_in(staging_root)
        try:
            with _named_after_source(stage, source):
                fill(stage)
                pkg_dir = _package_root(stage, Path(_origin(source)))
                _refuse_links_out(pkg_dir, source)
                manifest = load_manifest(pkg_dir)
                digest, files = content_digest(pkg_dir)
            with self._locked() as lock:
                pkg = lock.packages.setdefault(manifest.name, LockedPackage())
                existing = pkg.versions.get(manifest.version)
                if existing is not None:
                    if existing.sha256 != digest:
                        raise Conflict(
                            f"{manifest.ref} is already installed with different content "
                            f"(sha256 {existing.sha256[:12]}, new {digest[:12]}); "
                            "bump the version to publish a change",
                            field="version",
                        )
                    return InstallResult(
                        manifest.name, manifest.version, digest, existing.source, changed=False
                    )
                target = self.root / manifest.name / manifest.version
                if target.exists():
                    raise Conflict(
                        f"{target} exists but is not in {LOCK_FILE}; remove it "
                        "or run `agentos hub verify`",
                        field="version",
                    )
                target.parent.mkdir(parents=True, exist_ok=True)
                _make_read_only(pkg_dir)
                pkg_dir.rename(target)
                pkg.versions[manifest.version] = LockedVersion(
                    sha256=digest, source=source, installed=_now(), files=files
                )
                pkg.active = manifest.version
            return InstallResult(manifest.name, manifest.version, digest, source, changed=True)
        finally:
            if stage.exists():
                shutil.rmtree(stage)
            _remove_if_empty(staging_root)

    def use(self, ref: str) -> InstalledVersion:
        """Make ``name@version`` the active version (this is rollback)."""
        name, version = parse_ref(ref)
        if version is None:
            raise BadInput(f"{ref!r}: give the version to use, as NAME@VERSION", field="package")
        with self._locked() as lock:
            pkg = lock.packages.get(name)
            if pkg is None or version not in pkg.versions:
                raise NotFound(f"{name}@{version} is not installed", field="package")
            pkg.active = version
        return self.get(f"{name}@{version}")[0]

    def remove(self, ref: str) -> str | None:
        """Remove ``name@version``; returns the version now active (if any remains)."""
        name, version = parse_ref(ref)
        if version is None:
            raise BadInput(f"{ref!r}: give the version to remove, as NAME@VERSION", field="package")
        with self._locked() as lock:
            pkg = lock.packages.get(name)
            if pkg is None or version not in pkg.versions:
                raise NotFound(f"{name}@{version} is not installed", field="package")
            del pkg.versions[version]
            if pkg.active == version:
                pkg.active = max(pkg.versions, key=version_key) if pkg.versions else None
            if not pkg.versions:
                del lock.packages[name]
            target = self.root / name / version
            if target.exists():
                shutil.rmtree(target)
            _remove_if_empty(self.root / name)
            return pkg.active

    def pack(self, package_dir: Path, out: Path | None) -> tuple[Path, Manifest]:
        manifest = load_manifest(package_dir)
        out = out or Path(f"{manifest.name}-{manifest.version}.tar.gz")
        archive.pack(package_dir, f"{manifest.name}-{manifest.version}", out)
        return out, manifest

    def verify(self) -> list[str]:
        """Recompute every installed version's hashes; return the drift found, one line each.

        Reads every file (no cache): this is the check that trusts nothing on disk but
        ``hub.lock``.
        """
        problems: list[str] = []
        lock = self.read_lock()
        for name, pkg in sorted(lock.packages.items()):
            if pkg.active is not None and pkg.active not in pkg.versions:
                problems.append(f"{name}: active version {pkg.active} is not installed")
            for version, locked in sorted(pkg.versions.items()):
                where = self.root / name / version
                files = read_all(where) if where.is_dir() else None
                problems.extend(drift(f"{name}@{version}", locked, where, files))
        for pkg_dir in sorted(p for p in self.root.glob("*/*") if p.is_dir()):
            name, version = pkg_dir.parent.name, pkg_dir.name
            if name.startswith(".") or (pkg_dir / MANIFEST).exists() is False:
                continue
            if version not in lock.packages.get(name, LockedPackage()).versions:
                problems.append(f"{name}@{version}: installed but not in {LOCK_FILE}")
        return problems

    def check_intact(self, name: str, version: str) -> IntactCheck:
        """Refuse (:class:`Tampered`) unless ``name@version`` is exactly what was installed.

        The check a run makes for each of its packages before any agent starts: the same
        comparison as :meth:`verify`, for one version, with the same one-line problems; but
        a file whose stat signature is unchanged since it was last hashed is not read again
        (see :mod:`agentos.hub.digests`), so an unchanged package costs a directory walk.
        """
        lock = self._lock_snapshot()
        pkg = lock.packages.get(name)
        locked = pkg.versions.get(version) if pkg is not None else None
        if locked is None:
            raise NotFound(f"{name}@{version} is not installed", field="package")
        where = self.root / name / version
        scan = self._digests.scan(where) if where.is_dir() else None
        problems = drift(f"{name}@{version}", locked, where, None if scan is None else scan.files)
        if problems:
            raise Tampered(problems)
        assert scan is not None
        return IntactCheck(name, version, len(scan.files), scan.hashed)

    def _lock_snapshot(self) -> LockFile:
        """``hub.lock`` as it is now, parsed once per content (shared: never change it)."""
        try:
            data = self.lock_path.read_bytes()
        except FileNotFoundError:
            return LockFile()
        digest = sha256_bytes(data)
        known = _PARSED_LOCKS.get(self.lock_path)
        if known is not None and known[0] == digest:
            return known[1]
        try:
            raw = yaml.load(data, Loader=_YAML_LOADER)
        except yaml.YAMLError:
            return self.read_lock()  # the one-line error naming the line
        lock = validate(LockFile, raw, file=self.lock_path)
        _PARSED_LOCKS[self.lock_path] = (digest, lock)
        return lock


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PARSED_LOCKS: dict[Path, tuple[str, LockFile]] = {}


def _origin(source: str) -> str:
    """The path or URL a person gave, from a lock ``source`` (``dir:``/``archive:`` path)."""
    return source.split(":", 1)[1] if source.startswith(("dir:", "archive:")) else source


@contextmanager
def _named_after_source(stage: Path, source: str) -> Iterator[None]:
    """Errors about the staged copy name the file where the person wrote it (the source
    directory, or the archive or git URL and the path inside it), never the staging copy."""
    origin = _origin(source)

    def where(path: str) -> str:
        inside = Path(path).relative_to(stage)
        if source.startswith("dir:"):
            return str(Path(origin) / inside)
        return f"{origin}: {archive.shown(str(inside))}"

    try:
        yield
    except AgentOSError as exc:
        if exc.file is None or not Path(exc.file).is_relative_to(stage):
            raise
        raise exc.with_context(file=where(exc.file)) from None
    except shutil.Error as exc:  # copying a directory: (source, copy, why) for each file
        problems = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
        why = str(problems[0][2]) if problems else str(exc)
        raise BadInput(f"cannot copy the package: {why}", file=origin) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop, before 3.13
        name = getattr(exc, "filename", None)
        detail = getattr(exc, "strerror", None) or exc.__class__.__name__
        if name and Path(str(name)).is_relative_to(stage):
            raise BadInput(detail, file=where(str(name))) from None
        raise BadInput(f"cannot install: {detail}", file=origin) from None


def _copy_package(src: Path, dest: Path) -> None:
    shutil.copytree(
        src,
        dest,
        dirs_exist_ok=True,
        symlinks=True,
        ignore=shutil.ignore_patterns(*archive.IGNORED_PARTS, "*.pyc"),
    )


def _package_root(extracted: Path, source: Path) -> Path:
    """The directory holding agent.yaml: the root, or its single top-level directory."""
    if (extracted / MANIFEST).is_file():
        return extracted
    entries = [p for p in extracted.iterdir()]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / MANIFEST).is_file():
        return entries[0]
    raise ValidationFailed(f"no {MANIFEST} at the package root", file=source, field=MANIFEST)


def _refuse_links_out(pkg_dir: Path, source: str) -> None:
    """No link in a package may point outside it, or be a loop. A package whose file
    names are not UTF-8 is refused too: ``hub.lock`` records every file by name."""
    root = pkg_dir.resolve()
    origin = _origin(source)
    for path in pkg_dir.rglob("*"):
        rel = path.relative_to(pkg_dir)
        if not archive.is_utf8(str(rel)):
            raise BadInput(f"file name '{archive.shown(str(rel))}' is not UTF-8", file=origin)
        if not path.is_symlink():
            continue
        try:
            target = path.resolve()
        except (RuntimeError, OSError):  # RuntimeError until 3.13, OSError (ELOOP) after
            raise HostileArchive(
                f"symlink {rel} -> {os.readlink(path)} is a loop", file=origin
            ) from None
        if not target.is_relative_to(root):
            raise HostileArchive(
                f"symlink {rel} -> {os.readlink(path)} points outside the package", file=origin
            )


def _make_read_only(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _remove_if_empty(path: Path) -> None:
    with suppress(OSError):
        path.rmdir()


def _stage_in(staging_root: Path) -> Path:
    """A new staging directory in ``staging_root``, made if needed. Another install removes
    ``staging_root`` once empty: made again when it went between the two steps."""
    for _ in range(20):
        try:
            staging_root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(dir=staging_root))
        except (FileExistsError, FileNotFoundError):  # (removed meanwhile by another)
            continue
    staging_root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=staging_root))
