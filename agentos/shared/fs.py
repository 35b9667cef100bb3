"""Small file-system primitives: atomic writes, safe reads, content hashes (the address of a
Unix socket at any path is :mod:`agentos.shared.sockets`'s)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write ``path`` so that readers see the old content or the new, never a torn file;
    on disk before it returns (file and directory fsync'd) unless ``durable`` is false:
    for a scratch file that a crash makes worthless anyway (an agent's context in its
    worktree), where two fsyncs are most of the write's time."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    # tempfile.mkstemp's file (mode 0600, O_EXCL, a random name beside the target), without
    # importing tempfile and random on every command's path.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
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


def append_regular(path: Path, data: bytes, limit: int) -> str | None:
    """Append ``data`` to ``path``, a regular file of one link or none yet, never through a
    link (an agent that owns the directory could leave one pointing anywhere its writer can
    write), never to a FIFO, and never past ``limit`` bytes; None when done, else why not."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644
        )
    except OSError as exc:  # a link (ELOOP), a FIFO with no reader (ENXIO), ...
        return f"it cannot be opened ({exc.strerror})"
    with os.fdopen(fd, "ab") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return "it is not a regular file of its own"
        if st.st_size + len(data) > limit:
            return f"it is full ({limit:,} bytes)"
        fh.write(data)
    return None


def remove_tree(path: Path) -> None:
    """Remove what is at ``path``, whatever an agent made of it: a link is removed, never
    followed; a directory with everything in it (links inside are not followed either)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        import shutil  # not on the path of the commands that never remove a tree

        try:
            shutil.rmtree(path)
        except PermissionError:  # a directory it made unreadable: made ours again first
            _own_directories(path)
            shutil.rmtree(path)


def _own_directories(top: Path) -> None:
    """Every directory under ``top`` readable and writable by us (links never followed)."""
    top.chmod(0o700)
    for root, dirs, _ in os.walk(top):  # top-down: a directory is opened after its chmod
        for name in dirs:
            child = Path(root, name)
            if not child.is_symlink():
                child.chmod(0o700)


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
