"""Small file-system primitives: atomic writes, safe reads and content hashes."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``path`` so that readers see the old content or the new, never a torn file."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_new(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` with a new file of ``mode`` holding ``data``, never writing through
    a link or into a file someone else left there (it is removed first)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def read_regular(path: Path, limit: int, offset: int = 0) -> bytes | None:
    """At most ``limit`` bytes of ``path`` from byte ``offset`` when it is a regular file,
    read without following a link (one an agent left could point at a file it cannot read
    itself) and without waiting on a FIFO; None when it is a link or not a regular file. A
    missing file raises :class:`FileNotFoundError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError:  # a link (ELOOP), or unreadable
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fh.seek(offset)
        return fh.read(limit)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
