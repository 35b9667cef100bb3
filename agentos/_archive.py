"""Package archives: deterministic packing and safe extraction.

Extraction validates every member before a single byte is written: absolute paths,
``..``, links that leave the package, device files, FIFOs and archives over the size
limits are refused with :class:`HostileArchive`, and nothing is extracted.
"""

from __future__ import annotations

import gzip
import io
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
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


def _check_member(member: tarfile.TarInfo, names: set[str], archive: Path) -> None:
    name = member.name
    if not name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise HostileArchive(f"member {name!r} has an absolute path", file=archive)
    if ".." in name.split("/") or "\\" in name:
        raise HostileArchive(f"member {name!r} leaves the package ('..')", file=archive)
    if member.issym():
        target = member.linkname
        if target.startswith("/") or not _inside(posixpath.join(posixpath.dirname(name), target)):
            raise HostileArchive(
                f"symlink {name!r} -> {target!r} points outside the package", file=archive
            )
    elif member.islnk():
        target = member.linkname
        if target.startswith("/") or not _inside(target) or target not in names:
            raise HostileArchive(
                f"hardlink {name!r} -> {target!r} points outside the package", file=archive
            )
    elif not (member.isreg() or member.isdir()):
        raise HostileArchive(
            f"member {name!r} is a device, FIFO or other special file", file=archive
        )


def extract(archive: Path, dest: Path) -> None:
    """Validate every member of ``archive``, then extract it into ``dest`` (which must exist)."""
    try:
        size = archive.stat().st_size
    except FileNotFoundError:
        raise BadInput("archive not found", file=archive) from None
    if size > MAX_ARCHIVE_BYTES:
        raise HostileArchive(
            f"archive is {size} bytes, over the {MAX_ARCHIVE_BYTES} limit", file=archive
        )
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            members: list[tarfile.TarInfo] = []
            names: set[str] = set()
            total = 0
            for member in tar:
                members.append(member)
                if len(members) > MAX_MEMBERS:
                    raise HostileArchive(f"archive has over {MAX_MEMBERS} members", file=archive)
                total += max(member.size, 0)
                if total > MAX_CONTENT_BYTES:
                    raise HostileArchive(
                        f"archive unpacks to over {MAX_CONTENT_BYTES} bytes", file=archive
                    )
                _check_member(member, names, archive)
                names.add(posixpath.normpath(member.name))
            # Defence in depth: the stdlib's "data" filter re-checks every member.
            tar.extractall(dest, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise HostileArchive(f"unsafe member: {exc}", file=archive) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BadInput(f"not a valid .tar.gz package: {exc}", file=archive) from None
