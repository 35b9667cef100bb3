"""Where the chain is, and the lines that close every receipt: receipt ids and files,
``receipts/.head`` (both the lock and the record of the newest receipt) and the anchor
(``.agentos/receipts.anchor``) for a workspace whose state is SQLite (:class:`Chain`); a
table in the state under an advisory lock where the state is PostgreSQL
(:mod:`agentos.receipts.table`). :func:`agentos.receipts.place.open_chain` opens whichever
the workspace has; writing, signing, verifying and reading see the same :class:`Chained`
either way.

On disk everything goes through a directory fd: no path is looked up twice. A receipt that
is not a regular file (a FIFO, a directory, a link) is read as empty, never waited on.

A receipt ends with ``signed_from: ID`` (the receipt from which the workspace's receipts
are signed; ``off`` when its settings turn signing off; absent in receipts written before
AgentOS signed them), ``previous: ID SHA256``, ``sha256:`` of everything above, and
``mac:`` when it is signed.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput

ID_DIGITS = 8
SUFFIX = ".txt"
HEAD_FILE = ".head"
ANCHOR_FILE = "receipts.anchor"  # in the state directory: the newest receipt, signed
STATE_ANCHOR = f".agentos/{ANCHOR_FILE}"
FIRST = "none"  # what the first receipt records as its previous
NAME_RE = re.compile(rf"^(\d{{{ID_DIGITS},}})\.txt$")
TRAILER_RE = re.compile(rb"(?:^|\n)sha256: ([0-9a-f]{64})\n(?:mac: ([0-9a-f]{64})\n)?\Z")
PREVIOUS_RE = re.compile(rb"\nprevious: ([^\n]*)\n\Z")
SIGNED_FROM_RE = re.compile(rb"(?:^|\n)signed_from: ([^\n]*)\nprevious: [^\n]*\n\Z")
SHA_RE = re.compile(r"[0-9a-f]{64}")
OFF = "off"  # signed_from of a receipt written with signing turned off


def receipt_id(seq: int) -> str:
    return f"{seq:0{ID_DIGITS}d}"


def parse_id(text: str) -> int | None:
    """The position ``text`` names when it is a receipt id as written (``00000042``)."""
    if not text.isdigit() or receipt_id(int(text)) != text or int(text) == 0:
        return None
    return int(text)


@dataclass(frozen=True)
class Sealed:
    """A receipt's closing lines: the sha256 it declares over ``content`` (everything above
    that line), its mac ("" when unsigned), and its ``signed_from`` (None when it has none:
    written before AgentOS signed receipts)."""

    content: bytes
    sha256: str
    mac: str
    signed_from: str | None

    @property
    def signing_starts(self) -> int | None:
        """The receipt from which, this one says, every receipt is signed."""
        if self.signed_from is None or self.signed_from == OFF:
            return None
        return parse_id(self.signed_from)

    @property
    def claims_signed(self) -> bool:
        """Signed, or saying so (a ``signed_from`` other than ``off``)."""
        return bool(self.mac) or self.signed_from not in (None, OFF)


def sealed(data: bytes) -> Sealed | None:
    """The closing lines of a receipt's bytes; None when its sha256 line is gone."""
    found = TRAILER_RE.search(data)
    if found is None:
        return None
    content = data[: found.start() + (1 if found.group(0).startswith(b"\n") else 0)]
    marker = SIGNED_FROM_RE.search(content)
    return Sealed(
        content,
        found.group(1).decode(),
        (found.group(2) or b"").decode(),
        None if marker is None else marker.group(1).decode("utf-8", "replace"),
    )


def read_regular(name: str | Path, dir_fd: int | None = None) -> bytes:
    """A file's bytes; one that is not a regular file (a FIFO, a directory, a link) is read
    as empty, never waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        # os.read, not a file object: a key or an anchor is read on every receipt, and
        # open() would add five system calls to each read.
        chunks = [os.read(fd, st.st_size + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 16))
        return b"".join(chunks)
    finally:
        os.close(fd)


class Chained:
    """A chain, open under its lock (exclusive to append, shared to verify): the receipts,
    the head (the newest receipt's id and sha256), and the anchor (the same, signed: the
    record AgentOS keeps apart from the head). What only reads receipts is written here once;
    each place (:class:`Chain` on disk, :class:`agentos.receipts.table.TableChain`) says how
    to read and write its own."""

    directory: Path | None = None  # the receipts' folder, for a chain on disk
    where = "receipts"  # what messages name: the folder, or the state's URL, masked
    head_name = HEAD_FILE  # and the head, and the anchor
    anchor_name = STATE_ANCHOR

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        raise NotImplementedError

    def files(self) -> dict[int, str]:
        """seq -> file name of every receipt present."""
        raise NotImplementedError

    def head(self) -> tuple[int, str] | None:
        """What the head records: (seq, sha256) of the newest receipt; None if unreadable."""
        raise NotImplementedError

    def set_head(self, rid: str, digest: str) -> None:
        raise NotImplementedError

    def add(self, rid: str, data: bytes) -> bool:
        """Put receipt ``rid`` in place; False when it exists (never replaced)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Make what was added durable."""

    def anchor(self) -> bytes:
        """The anchor's text (empty when there is none)."""
        raise NotImplementedError

    def has_anchor(self) -> bool:
        raise NotImplementedError

    def set_anchor(self, text: str) -> None:
        raise NotImplementedError

    def path(self, name: str) -> Path | None:
        """Where receipt ``name`` is as a file (None: in a table)."""
        return None

    def sealed(self, seq: int) -> Sealed | None:
        return sealed(self.read(f"{receipt_id(seq)}{SUFFIX}"))

    def newest_signed(self, seq: int) -> tuple[int, Sealed] | None:
        """The newest receipt up to ``seq`` that is signed or says it is, passing over those
        written with signing off and those that cannot be read; None when a receipt written
        before signing existed (or the chain's start) comes first."""
        while seq > 0:
            found = self.sealed(seq)
            if found is not None and found.claims_signed:
                return seq, found
            if found is not None and found.signed_from is None:
                return None
            seq -= 1
        return None

    def declared(self, name: str) -> str:
        """The sha256 a receipt declares on its last line (of its raw bytes when it has none)."""
        data = self.read(name)
        found = TRAILER_RE.search(data)
        return found.group(1).decode() if found else hashlib.sha256(data).hexdigest()

    def newest(self) -> tuple[int, str]:
        """(seq, sha256) of the newest receipt; (0, FIRST) for an empty chain."""
        head = self.head()
        if head is None:  # no head yet, or lost in a crash: rebuild it from the files
            files = self.files()
            head = (max(files), self.declared(files[max(files)])) if files else (0, FIRST)
        seq, sha = head
        while True:  # a writer that crashed after linking its receipt left the head behind
            following = f"{receipt_id(seq + 1)}{SUFFIX}"
            if not self.exists(following):
                return seq, sha
            seq, sha = seq + 1, self.declared(following)


class Chain(Chained):
    """The receipts directory, open, under the chain's lock.

    ``.head`` is both the lock (flock: exclusive to append, shared to verify) and the
    record of the newest receipt, rewritten in place, so appending costs no extra file.
    The anchor is a file outside the folder (``.agentos/receipts.anchor``).
    """

    directory: Path

    def __init__(self, directory: Path, *, exclusive: bool, anchor: Path | None = None) -> None:
        self.directory = directory
        self.where = str(directory)
        self.anchor_file = anchor or directory / ANCHOR_FILE
        try:
            self.fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # the first receipt
            directory.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.head_fd = os.open(HEAD_FILE, os.O_RDWR | os.O_CREAT, 0o666, dir_fd=self.fd)
        except IsADirectoryError:
            os.close(self.fd)
            raise BadInput(
                "is a directory: it must be the chain's head file (remove it; the next "
                "receipt rebuilds it)",
                file=directory / HEAD_FILE,
            ) from None
        except BaseException:
            os.close(self.fd)
            raise
        fcntl.flock(self.head_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def close(self) -> None:
        os.close(self.head_fd)  # releases the lock
        os.close(self.fd)

    def read(self, name: str) -> bytes:
        return read_regular(name, self.fd)

    def path(self, name: str) -> Path:
        return self.directory / name

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def files(self) -> dict[int, str]:
        """seq -> file name of every receipt present."""
        out = {}
        for name in os.listdir(self.fd):
            m = NAME_RE.match(name)
            if m and receipt_id(int(m.group(1))) == m.group(1):
                out[int(m.group(1))] = name
        return out

    def head(self) -> tuple[int, str] | None:
        """What ``.head`` records: (seq, sha256) of the newest receipt; None if unreadable."""
        return parse_head(os.pread(self.head_fd, 256, 0))

    def set_head(self, rid: str, digest: str) -> None:
        data = f"{rid} {digest}\n".encode()
        os.pwrite(self.head_fd, data, 0)
        os.ftruncate(self.head_fd, len(data))

    def add(self, rid: str, data: bytes) -> bool:
        """Write the receipt as a file without a name (``O_TMPFILE``), fsync it and link it
        into place (which fails rather than overwrite): the folder changes once, and a
        crash leaves no temporary file. Where the file system or a missing ``/proc`` does
        not allow that, a temporary name beside it (:meth:`_add_named`)."""
        final = f"{rid}{SUFFIX}"
        try:
            fd = os.open(".", os.O_WRONLY | os.O_TMPFILE, file_mode(), dir_fd=self.fd)
        except OSError:
            return self._add_named(final, data)
        try:
            _write_all(fd, data)
            os.fsync(fd)
            try:
                os.link(f"/proc/self/fd/{fd}", final, dst_dir_fd=self.fd)
            except FileExistsError:
                return False
            except OSError:  # no /proc, or no hard links here
                return self._add_named(final, data)
            if not _same_file(os.fstat(fd), os.stat(final, dir_fd=self.fd, follow_symlinks=False)):
                # A /proc that is not the kernel's linked another file: that name goes.
                os.unlink(final, dir_fd=self.fd)
                return self._add_named(final, data)
        finally:
            os.close(fd)
        return True

    def _add_named(self, final: str, data: bytes) -> bool:
        """As :meth:`add`, through a temporary name, hard-linked to ``final``."""
        tmp = f".{final.removesuffix(SUFFIX)}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(), dir_fd=self.fd)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self.link_new(tmp, final)
        except FileExistsError:
            return False
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
        return True

    def sync(self) -> None:
        os.fsync(self.fd)  # makes the new receipt's name durable

    def anchor(self) -> bytes:
        return read_regular(self.anchor_file)

    def has_anchor(self) -> bool:
        return os.path.lexists(self.anchor_file)

    def set_anchor(self, text: str) -> None:
        """Rewritten in place, as the head is (under the chain's lock, which every reader
        of the anchor holds too): a line of fixed length, one write, no new file per
        receipt. The first one, and whatever is there that is not a regular file of its
        own, is written whole beside it and renamed into place (a crash never leaves an
        empty anchor)."""
        data = text.encode("ascii")
        path = self.anchor_file
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    os.pwrite(fd, data, 0)
                    if st.st_size > len(data):
                        os.ftruncate(fd, len(data))
                    return
            finally:
                os.close(fd)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def link_new(self, tmp: str, final: str) -> None:
        """Put ``tmp`` at ``final``; never replaces an existing receipt."""
        try:
            os.link(tmp, final, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the lock still serialises us
            if self.exists(final):
                raise FileExistsError(final) from None
            os.rename(tmp, final, src_dir_fd=self.fd, dst_dir_fd=self.fd)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def file_of(rid: str, file: Path | None) -> Path:
    """The file of receipt ``rid``; :class:`~agentos.errors.NotFound` when it is a row of
    the state's table (PostgreSQL), not a file."""
    if file is None:
        from agentos.errors import NotFound

        raise NotFound(
            f"receipt {rid} is a row of the state's receipts table, not a file: read it with "
            "`agentos receipts show`, or `agentos receipts export DIR` for files",
            field="id",
        )
    return file


def parse_head(data: bytes) -> tuple[int, str] | None:
    """(seq, sha256) a head records ("00000042 SHA256"); None when it is not one."""
    parts = data.decode("ascii", "replace").split()
    if len(parts) != 2 or not parts[0].isdigit() or not SHA_RE.fullmatch(parts[1]):
        return None
    return int(parts[0]), parts[1]


@contextmanager
def open_directory(
    directory: Path, *, exclusive: bool, anchor: Path | None = None
) -> Iterator[Chain]:
    """A folder of receipts as a chain (the workspace's, or one ``receipts export`` wrote,
    whose anchor is in it)."""
    chain = Chain(directory, exclusive=exclusive, anchor=anchor)
    try:
        yield chain
    finally:
        chain.close()


@functools.cache
def file_mode() -> int:
    """The mode a new receipt gets: readable like any file the user makes (the umask's)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask
