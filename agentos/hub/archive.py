"""Package archives: deterministic packing and safe extraction.

Extraction validates every member before a single byte is written: absolute paths,
``..``, links that leave the package, members written through a link or given twice (the
later one would replace what was checked), names that are not UTF-8, device files, FIFOs
and archives over the size limits are refused with :class:`HostileArchive`, and nothing is
extracted.
"""

from __future__ import annotations

import gzip
import io
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentos.errors import BadInput, HostileArchive

MAX_ARCHIVE_BYTES = 50 * 1024 * 1024  # the .tar.gz on disk
MAX_CONTENT_BYTES = 200 * 1024 * 1024  # everything it unpacks to
MAX_MEMBERS = 20_000
IGNORED_PARTS = frozenset({"__pycache__", ".git", ".DS_Store"})


def package_files(root: Path) -> Iterator[Path]:
    """Regular files of a package directory, sorted, without caches and VCS data."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if IGNORED_PARTS.intersection(rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file() or path.is_symlink():
            yield path


def pack(package_dir: Path, prefix: str, out: Path) -> None:
    """Write ``package_dir`` as a reproducible .tar.gz whose members sit under ``prefix/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in package_files(package_dir):
            rel = path.relative_to(package_dir).as_posix()
            info = tar.gettarinfo(str(path), arcname=f"{prefix}/{rel}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            if info.issym():
                tar.addfile(info)
            else:
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())
    tmp.replace(out)


def _inside(name: str) -> bool:
    norm = posixpath.normpath(name)
    return not (norm.startswith("/") or norm == ".." or norm.startswith("../"))


def shown(name: str) -> str:
    """A name as read from an archive or the file system, as text: bytes that are not UTF-8
    (carried as lone surrogates) written ``\\xNN``."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("ascii")


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Seen:
    """What the members before this one made: files, directories (given or implied by a
    member below them) and symlinks, by normalized path."""

    def __init__(self) -> None:
        self.names: set[str] = set()  # every member (hardlinks may point only at these)
        self.dirs: set[str] = set()
        self.links: set[str] = set()

    def add(self, norm: str, member: tarfile.TarInfo) -> None:
        self.names.add(norm)
        parts = norm.split("/")
        self.dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if member.isdir():
            self.dirs.add(norm)
        elif member.issym():
            self.links.add(norm)


def _check_member(member: tarfile.TarInfo, seen: _Seen, archive: Path, what: str) -> str:
    """Refuse ``member`` unless it is safe given the members before it; its normal path."""
    name = member.name
    if not is_utf8(name) or not is_utf8(member.linkname):
        what = name if not is_utf8(name) else f"{name} -> {member.linkname}"
        raise HostileArchive(f"member name '{shown(what)}' is not UTF-8", file=archive)
    if not name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise HostileArchive(f"member {name!r} has an absolute path", file=archive)
    if ".." in name.split("/") or "\\" in name:
        raise HostileArchive(f"member {name!r} leaves the {what} ('..')", file=archive)
    norm = posixpath.normpath(name)
    parts = norm.split("/")
    through = next(
        ("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in seen.links),
        None,
    )
    if through is not None:
        raise HostileArchive(
            f"member {name!r} is written through the symlink {through!r}", file=archive
        )
    earlier = "dir" if norm in seen.dirs else "member" if norm in seen.names else None
    if earlier is not None and not (earlier == "dir" and member.isdir()):
        raise HostileArchive(
            f"member {name!r} is given twice: the second would replace the first", file=archive
        )
    if member.issym():
        target = member.linkname
        if target.startswith("/") or not _inside(posixpath.join(posixpath.dirname(name), target)):
            raise HostileArchive(
                f"symlink {name!r} -> {target!r} points outside the {what}", file=archive
            )
    elif member.islnk():
        target = member.linkname
        if target.startswith("/") or not _inside(target) or target not in seen.names:
            raise HostileArchive(
                f"hardlink {name!r} -> {target!r} points outside the {what}", file=archive
            )
    elif not (member.isreg() or member.isdir()):
        raise HostileArchive(
            f"member {name!r} is a device, FIFO or other special file", file=archive
        )
    return norm


def check(archive: Path, what: str = "package") -> None:
    """Refuse ``archive`` (one line naming it) unless every member is safe to extract."""
    with _open(archive, what) as tar:
        _members(tar, archive, what)


def extract(archive: Path, dest: Path, what: str = "package") -> None:
    """Validate every member of ``archive``, then extract it into ``dest`` (which must exist)."""
    with _open(archive, what) as tar:
        members = _members(tar, archive, what)
        try:
            # Defence in depth: the stdlib's "data" filter re-checks every member.
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise HostileArchive(f"unsafe member: {exc}", file=archive) from None


@contextmanager
def _open(archive: Path, what: str) -> Iterator[tarfile.TarFile]:
    try:
        size = archive.stat().st_size
    except FileNotFoundError:
        raise BadInput("archive not found", file=archive) from None
    if size > MAX_ARCHIVE_BYTES:
        raise HostileArchive(
            f"archive is {size} bytes, over the {MAX_ARCHIVE_BYTES} limit", file=archive
        )
    try:  # what reading it finds wrong, opening or later, is one line naming it
        with tarfile.open(archive, mode="r:*") as tar:
            yield tar
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BadInput(f"not a valid .tar.gz {what}: {exc}", file=archive) from None


def _members(tar: tarfile.TarFile, archive: Path, what: str) -> list[tarfile.TarInfo]:
    """Every member, each checked against those before it (see :func:`_check_member`)."""
    members: list[tarfile.TarInfo] = []
    seen = _Seen()
    total = 0
    for member in tar:
        members.append(member)
        if len(members) > MAX_MEMBERS:
            raise HostileArchive(f"archive has over {MAX_MEMBERS} members", file=archive)
        total += max(member.size, 0)
        if total > MAX_CONTENT_BYTES:
            raise HostileArchive(f"archive unpacks to over {MAX_CONTENT_BYTES} bytes", file=archive)
        seen.add(_check_member(member, seen, archive, what), member)
    return members
