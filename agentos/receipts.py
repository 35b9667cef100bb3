"""Receipts: one plain-text file per event, hash-chained, append-only.

A receipt is ``receipts/<id>.txt``. The id is the receipt's position in the chain,
zero-padded (``00000042``), so ids sort in chain order and a gap is visible at a glance.
The file is ``key: value`` lines a person reads with ``cat``::

    receipt: 00000042
    kind: route
    time: 2026-11-22T16:24:00.123456Z
    run: 20261122-1624-ab12                (only when the receipt belongs to a run)
    request: fix the lint errors           (or request_sha256: ... when redacted)
    decision: route
    ...the kind's own fields...
    previous: 00000041 <sha256 of receipt 00000041>
    sha256: <sha256 of every line above this one>
    mac: <HMAC-SHA256 of "00000042 <sha256>" under the workspace's key>

Writers lock ``receipts/.head`` (flock), read the chain's head from it (one line: id and
sha256 of the newest receipt), write the new receipt to a temporary name, fsync it and
hard-link it into place (which fails rather than overwrite), then rewrite the head and
fsync the directory. So concurrent writers never fork the chain and a reader never sees a
torn receipt. When a crash leaves the head behind, the next writer walks forward over the
receipts that exist before it writes; when the head is unreadable it is rebuilt from the
files.

:func:`parse_receipt` (and :func:`load_receipt`) reads a receipt back into its header, request
and fields, the same mappings, lists and scalars that were written: how fields are written
and read is :mod:`agentos._receipt_format`, the one owner of the format.

:func:`verify_chain` recomputes every receipt's hash, link and mac, and compares the
newest receipt with the head, so an edited, removed, reordered or moved receipt is
reported by id.

The chain is keyed. The key is ``.agentos/receipts.key`` (32 random bytes, mode 0600,
made with the first receipt), outside the receipts folder and hidden from every sandbox.
Each receipt's ``mac`` line signs its id and sha256, and every append also records the
newest receipt, signed, in ``.agentos/receipts.anchor``. So a receipt appended by hand
(however well chained), a tail rewritten with recomputed hashes, and receipts removed
from the end with ``.head`` rewritten to match are each detected and named: the first two
carry no valid mac, the last leaves the anchor ahead of the files. Receipts written before
a workspace had a key (before the first signed one) are accepted unsigned.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentos._receipt_format import (
    HEADER,
    parse_fields,
    render,
    render_fields,
)
from agentos.errors import BadInput, NotFound
from agentos.workspace import Workspace

ID_DIGITS = 8
SUFFIX = ".txt"
HEAD_FILE = ".head"
FIRST = "none"  # what the first receipt records as its previous
KEY_FILE = "receipts.key"  # in the state directory (.agentos/), mode 0600
ANCHOR_FILE = "receipts.anchor"  # in the state directory: the newest receipt, signed
STATE_KEY = f".agentos/{KEY_FILE}"
STATE_ANCHOR = f".agentos/{ANCHOR_FILE}"
_NAME_RE = re.compile(rf"^(\d{{{ID_DIGITS},}})\.txt$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")
_TRAILER_RE = re.compile(rb"(?:^|\n)sha256: ([0-9a-f]{64})\n(?:mac: ([0-9a-f]{64})\n)?\Z")
_PREVIOUS_RE = re.compile(rb"\nprevious: ([^\n]*)\n\Z")
_SHA_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Receipt:
    """A receipt just written. ``sha256`` is the hash the next receipt records."""

    id: str
    path: Path
    sha256: str
    kind: str
    run_id: str | None
    time: str


@dataclass(frozen=True)
class ReceiptInfo:
    id: str
    kind: str
    time: str
    run_id: str | None
    path: Path

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "time": self.time,
            "run_id": self.run_id,
            "path": str(self.path),
        }


def receipt_id(seq: int) -> str:
    return f"{seq:0{ID_DIGITS}d}"


# --- the chain's head ---------------------------------------------------------------------


def _read_regular(name: str | Path, dir_fd: int | None = None) -> bytes:
    """A receipt's bytes; one that is not a regular file (a FIFO, a directory, a link) is
    read as empty, never waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return b""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return b""
    with open(fd, "rb") as fh:
        return fh.read()


class _Chain:
    """The receipts directory, open, under the chain's lock.

    ``.head`` is both the lock (flock: exclusive to append, shared to verify) and the
    record of the newest receipt, rewritten in place, so appending costs no extra file.
    Everything goes through a directory fd: no path is looked up twice.
    """

    def __init__(self, directory: Path, *, exclusive: bool) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
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
        return _read_regular(name, self.fd)

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
            m = _NAME_RE.match(name)
            if m and receipt_id(int(m.group(1))) == m.group(1):
                out[int(m.group(1))] = name
        return out

    def head(self) -> tuple[int, str] | None:
        """What ``.head`` records: (seq, sha256) of the newest receipt; None if unreadable."""
        parts = os.pread(self.head_fd, 256, 0).decode("ascii", "replace").split()
        if len(parts) != 2 or not parts[0].isdigit() or not _SHA_RE.fullmatch(parts[1]):
            return None
        return int(parts[0]), parts[1]

    def set_head(self, rid: str, digest: str) -> None:
        data = f"{rid} {digest}\n".encode()
        os.pwrite(self.head_fd, data, 0)
        os.ftruncate(self.head_fd, len(data))

    def declared(self, name: str) -> str:
        """The sha256 a receipt declares on its last line (of its raw bytes when it has none)."""
        data = self.read(name)
        found = _TRAILER_RE.search(data)
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


# --- the key and the anchor ----------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    """The workspace's receipts key, and the first receipt it signed (those before it were
    written before the workspace had a key)."""

    secret: bytes
    first_signed: int

    def mac(self, *parts: str) -> str:
        return hmac.new(self.secret, " ".join(parts).encode(), hashlib.sha256).hexdigest()

    def matches(self, mac: str, *parts: str) -> bool:
        return hmac.compare_digest(mac, self.mac(*parts))


def _load_key(state_dir: Path) -> _Key | None:
    path = state_dir / KEY_FILE
    if not os.path.lexists(path):
        return None
    words = _read_regular(path).decode("ascii", "replace").split()
    if len(words) != 2 or not _SHA_RE.fullmatch(words[0]) or not words[1].isdigit():
        raise BadInput(
            "is not a receipts key: restore it from a backup (receipts signed with another "
            "key no longer verify)",
            file=path,
        )
    return _Key(bytes.fromhex(words[0]), int(words[1]))


def _make_key(state_dir: Path, first_signed: int, chain: _Chain) -> _Key:
    """The workspace's key, made now (readable by its owner alone) when there is none yet:
    never when receipts were signed already (a lost key is restored, not replaced, or the
    receipts it signed could be rewritten unsigned and blessed by a new one)."""
    key = _load_key(state_dir)
    if key is not None:
        return key
    path = state_dir / KEY_FILE
    signed = first_signed > 1 and _TRAILER_RE.search(
        chain.read(receipt_id(first_signed - 1) + SUFFIX)
    )
    if os.path.lexists(path) or (state_dir / ANCHOR_FILE).exists() or (signed and signed.group(2)):
        raise BadInput(
            "is missing or unreadable, and receipts were signed with it: restore it from a "
            "backup (a new key would make every signed receipt fail verify)",
            file=path,
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(fd, "w", encoding="ascii") as fh:
            fh.write(f"{secrets.token_hex(32)} {first_signed}\n")
            fh.flush()
            os.fsync(fh.fileno())
        with suppress(FileExistsError):  # another workspace writer made it first
            os.link(tmp, state_dir / KEY_FILE)
    finally:
        tmp.unlink(missing_ok=True)
    key = _load_key(state_dir)
    if key is None:
        raise BadInput("could not be made (is it a dangling link?)", file=path)
    return key


def _write_anchor(state_dir: Path, key: _Key, rid: str, digest: str) -> None:
    """Record the newest receipt, signed, outside the receipts folder."""
    tmp = state_dir / f".{ANCHOR_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    tmp.write_text(f"{rid} {digest} {key.mac('anchor', rid, digest)}\n", encoding="ascii")
    os.replace(tmp, state_dir / ANCHOR_FILE)


def _read_anchor(state_dir: Path, key: _Key) -> tuple[int, str] | None:
    """(seq, sha256) of the newest receipt AgentOS wrote; None when missing or forged."""
    words = _read_regular(state_dir / ANCHOR_FILE).decode("ascii", "replace").split()
    if len(words) != 3 or not words[0].isdigit() or not _SHA_RE.fullmatch(words[1]):
        return None
    if not key.matches(words[2], "anchor", words[0], words[1]):
        return None
    return int(words[0]), words[1]


@contextmanager
def _chain(directory: Path, *, exclusive: bool) -> Iterator[_Chain]:
    chain = _Chain(directory, exclusive=exclusive)
    try:
        yield chain
    finally:
        chain.close()


@functools.cache
def _mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


# --- writing ------------------------------------------------------------------------------


def write_receipt(
    ws: Workspace,
    kind: str,
    fields: Mapping[str, object],
    *,
    run_id: str | None = None,
    request: str | None = None,
    about: str | None = None,
) -> Receipt:
    """Append a receipt of ``kind`` to the workspace's chain and return it.

    ``fields`` are written in order as ``key: value`` lines. ``request`` is written as
    given, or only as its sha256 when the workspace sets ``receipts.redact``; then the
    fields are redacted too (see :func:`redact`) against ``request``, or ``about``: the
    request of the run the receipt belongs to, which it does not write.
    """
    if not _KIND_RE.match(kind):
        raise BadInput(f"{kind!r} must be lowercase letters, digits and '-'", field="kind")
    if run_id is not None and not _RUN_RE.match(run_id):
        raise BadInput(f"{run_id!r} must be one word of letters, digits and ._:@+-", field="run id")
    lines = []
    if ws.settings_data["receipts"]["redact"]:
        if request is not None:
            lines.append(f"request_sha256: {hashlib.sha256(request.encode()).hexdigest()}")
        fields = redact(fields, request if request is not None else about)
    elif request is not None:
        render("request", request, "", lines)
    lines.extend(render_fields(fields))
    body = "".join(f"{line}\n" for line in lines)
    with _chain(ws.receipts_dir, exclusive=True) as chain:
        for _attempt in range(3):  # only retried when a writer ignored the lock
            receipt = _append(chain, ws.state_dir, kind, body, run_id)
            if receipt is not None:
                return receipt
    raise OSError(f"{ws.receipts_dir}: could not append a receipt: another writer ignores the lock")


# Fields whose values are free text, where a request's words can reappear: what an agent
# or a check printed, check names and definitions derived from the request, the
# interview's reasons, questions and evidence, messages. Under them, every string is
# redacted when it holds a word of the request; output is redacted always.
_FREE_TEXT = frozenset(
    {
        "name",
        "definition",
        "message",
        "summary",
        "reasons",
        "questions",
        "proposed_checks",
        "evidence",
        "rewrite",
        "rewrite_error",
        "detail",
        "reason",
        "fired",
        "conflicts",
        "ignored_files_removed",
        "git_admin_restored",
        "paths",
        "named",
        "test_changes",
    }
)
_OUTPUT = frozenset({"output_tail", "output", "tail"})
_WORD_RE = re.compile(r"[^\s\"'`,;:!?()\[\]{}<>]+")
_MIN_WORD = 4


def redact(fields: Mapping[str, object], request: str | None) -> dict[str, object]:
    """``fields`` with what could give the request away replaced by its length
    (``receipts: {redact: true}``): output always, and under free-text fields every string
    that holds one of the request's words of four characters or more (file names, derived
    checks, an agent's echo of the request)."""
    found = _WORD_RE.findall(request or "")
    # A path's parts too: src/quixotic/module.py gives away quixotic in src/quixotic/util.py.
    words = {p.strip(".").lower() for w in found for p in (w, *re.split(r"[/\\.]", w))}
    terms = sorted(w for w in words if len(w) >= _MIN_WORD)
    return {
        key: _redacted(value, terms, key in _FREE_TEXT, key in _OUTPUT)
        for key, value in fields.items()
    }


def _redacted(value: object, terms: list[str], free: bool, output: bool) -> object:
    if isinstance(value, Mapping):
        return {
            k: _redacted(v, terms, free or k in _FREE_TEXT, output or k in _OUTPUT)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redacted(v, terms, free, output) for v in value]
    if isinstance(value, str) and value and (output or (free and _holds(value, terms))):
        return f"[redacted: {len(value)} characters]"  # no digest: a short one is guessed
    return value


def _holds(text: str, terms: list[str]) -> bool:
    lowered = text.lower()
    return any(term in lowered for term in terms)


def _append(
    chain: _Chain, state_dir: Path, kind: str, body: str, run_id: str | None
) -> Receipt | None:
    seq, previous = chain.newest()
    key = _make_key(state_dir, seq + 1, chain)
    anchor = _read_anchor(state_dir, key)
    if anchor is not None and anchor[0] > seq:
        # Receipts AgentOS wrote are gone from the end: never reuse their ids, so that
        # verify keeps naming them.
        seq, previous = anchor
    rid = receipt_id(seq + 1)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    header = f"receipt: {rid}\nkind: {kind}\ntime: {now}\n"
    if run_id is not None:
        header += f"run: {run_id}\n"
    link = FIRST if seq == 0 else f"{receipt_id(seq)} {previous}"
    content = f"{header}{body}previous: {link}\n".encode()
    digest = hashlib.sha256(content).hexdigest()
    data = content + f"sha256: {digest}\nmac: {key.mac(rid, digest)}\n".encode()
    final = f"{rid}{SUFFIX}"
    tmp = f".{rid}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode(), dir_fd=chain.fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        chain.link_new(tmp, final)
    except FileExistsError:
        return None
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=chain.fd)
    chain.set_head(rid, digest)
    _write_anchor(state_dir, key, rid, digest)
    os.fsync(chain.fd)  # makes the new receipt's name durable
    return Receipt(rid, chain.directory / final, digest, kind, run_id, now)


# --- reading ------------------------------------------------------------------------------


def _receipt_paths(directory: Path) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = ((m, name) for name in names if (m := _NAME_RE.match(name)))
    return sorted(
        (int(m.group(1)), directory / name)
        for m, name in found
        if receipt_id(int(m.group(1))) == m.group(1)
    )


def _header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with path.open("rb") as fh:
        for raw in fh:
            key, sep, value = raw.decode("utf-8", "replace").rstrip("\n").partition(": ")
            if not sep or key not in HEADER or key in out:
                break
            out[key] = value
    return out


def list_receipts(ws: Workspace, run_id: str | None = None) -> list[ReceiptInfo]:
    """Every receipt in chain order, or those of one run."""
    out = []
    for seq, path in _receipt_paths(ws.receipts_dir):
        head = _header(path)
        if run_id is not None and head.get("run") != run_id:
            continue
        out.append(
            ReceiptInfo(
                receipt_id(seq), head.get("kind", "?"), head.get("time", "?"), head.get("run"), path
            )
        )
    return out


def receipt_path(ws: Workspace, rid: str) -> Path:
    """The file of receipt ``rid`` (``00000042``, ``42`` or ``00000042.txt``)."""
    text = rid.strip().removesuffix(SUFFIX)
    if not text.isdigit() or int(text) == 0:
        raise NotFound(f"{rid!r} is not a receipt id (like 00000042)", field="id")
    path = ws.receipts_dir / f"{receipt_id(int(text))}{SUFFIX}"
    if not path.is_file():
        raise NotFound(f"no receipt {receipt_id(int(text))} in {ws.receipts_dir}", field="id")
    return path


def read_receipt(ws: Workspace, id: str) -> str:
    """The text of a receipt, exactly as written."""
    return receipt_path(ws, id).read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class ParsedReceipt:
    """A receipt read back: its header, its request, its fields as they were written (the
    same mappings, lists and scalars, see :mod:`agentos._receipt_format`), its chain link,
    and its text. ``problem`` names the first line that could not be read (a receipt edited
    by hand); the fields before it are kept."""

    id: str
    kind: str
    time: str
    run_id: str | None
    request: str | None
    request_sha256: str | None
    fields: dict[str, object]
    previous: str | None
    sha256: str | None
    problem: str | None
    text: str
    path: Path | None = None
    mac: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "path": None if self.path is None else str(self.path),
            "kind": self.kind,
            "time": self.time,
            "run": self.run_id,
            "request": self.request,
            "request_sha256": self.request_sha256,
            "fields": self.fields,
            "previous": self.previous,
            "sha256": self.sha256,
            "mac": self.mac,
            "problem": self.problem,
            "text": self.text,
        }


def parse_receipt(text: str, path: Path | None = None) -> ParsedReceipt:
    """Read a receipt's text back into its parts; never raises (see ``problem``)."""
    lines = text.split("\n")  # only \n: a quoted value may hold other line separators
    if lines[-1] == "":
        lines.pop()
    head: dict[str, str] = {}
    start = 0
    for line in lines:
        key, sep, value = line.partition(": ")
        if not sep or key not in HEADER or key in head:
            break
        head[key] = value
        start += 1
    end = len(lines)
    trailer: dict[str, str] = {}
    for key in ("mac", "sha256", "previous"):
        if end > start and lines[end - 1].startswith(f"{key}: "):
            trailer[key] = lines[end - 1][len(key) + 2 :]
            end -= 1
    fields, problem = parse_fields(lines[start:end], first=start + 1)
    missing = [key for key in ("receipt", "kind", "time") if key not in head]
    if missing:
        problem = f"line {start + 1}: the header has no {', '.join(missing)}"
    request = fields.pop("request", None)
    request_sha256 = fields.pop("request_sha256", None)
    return ParsedReceipt(
        id=head.get("receipt") or (path.stem if path is not None else "?"),
        kind=head.get("kind", "?"),
        time=head.get("time", "?"),
        run_id=head.get("run"),
        request=None if request is None else str(request),
        request_sha256=None if request_sha256 is None else str(request_sha256),
        fields=fields,
        previous=trailer.get("previous"),
        sha256=trailer.get("sha256"),
        problem=problem,
        text=text,
        path=path,
        mac=trailer.get("mac"),
    )


def load_receipt(ws: Workspace, id: str) -> ParsedReceipt:
    """Receipt ``id`` (``00000042``, ``42`` or ``00000042.txt``), read and parsed."""
    path = receipt_path(ws, id)
    return parse_receipt(path.read_text(encoding="utf-8", errors="replace"), path)


# --- verifying ----------------------------------------------------------------------------


def _check_one(
    rid: str, data: bytes, expected_previous: str | None
) -> tuple[str | None, str | None, list[str]]:
    """The sha256 the receipt declares (None when it has lost it); its mac, when its own
    content is intact ("" when it has none; None when its content no longer matches its
    sha256 or id, which says more than a signature could); and its problems."""
    problems = []
    trailer = _TRAILER_RE.search(data)
    if trailer is None:
        return (
            None,
            None,
            [f"{rid}: changed after it was written (its closing sha256 line is gone)"],
        )
    declared = trailer.group(1).decode()
    content = data[: trailer.start() + (1 if trailer.group(0).startswith(b"\n") else 0)]
    if hashlib.sha256(content).hexdigest() != declared:
        problems.append(f"{rid}: changed after it was written (content does not match its sha256)")
    if not content.startswith(f"receipt: {rid}\n".encode()):
        holds = content.split(b"\n", 1)[0].decode("utf-8", "replace").removeprefix("receipt: ")
        problems.append(
            f"{rid}: the file holds receipt {holds!r}: receipts were moved or reordered"
        )
    previous = _PREVIOUS_RE.search(content)
    if previous is None:
        problems.append(f"{rid}: changed after it was written (its previous line is gone)")
    mac = None if problems else (trailer.group(2) or b"").decode()
    if previous is not None and expected_previous not in (None, previous.group(1).decode()):
        before = expected_previous.split()[0] if expected_previous != FIRST else "the start"
        problems.append(
            f"{rid}: does not follow {before}: one of them was changed, or receipts were reordered"
        )
    return declared, mac, problems


def _check_mac(rid: str, seq: int, declared: str, mac: str, key: _Key | None) -> str | None:
    """What is wrong with an intact receipt's signature (``mac``, "" for none), if anything."""
    if key is None:
        return (
            f"{rid}: signed, but the workspace's key ({STATE_KEY}) is missing: "
            "its receipts cannot be authenticated"
            if mac
            else None
        )
    if not mac:
        if seq < key.first_signed:
            return None  # written before the workspace had a key
        return f"{rid}: carries no signature of the workspace's key: written outside AgentOS"
    if not key.matches(mac, rid, declared):
        return (
            f"{rid}: its signature does not match the workspace's key: forged, or "
            "rewritten with recomputed hashes"
        )
    return None


def verify_chain(ws: Workspace) -> list[str]:
    """Walk the chain; return every problem, each naming a receipt id (empty: intact)."""
    directory = ws.receipts_dir
    if not directory.is_dir():
        key = _load_key(ws.state_dir)
        anchor = None if key is None else _read_anchor(ws.state_dir, key)
        if anchor is None:
            return []
        return [f"{directory}: missing, but AgentOS wrote {anchor[0]} receipts there"]
    with _chain(directory, exclusive=False) as chain:  # a consistent listing, head, anchor
        files = chain.files()
        head = chain.head()
        key = _load_key(ws.state_dir)
        anchor = None if key is None else _read_anchor(ws.state_dir, key)
    problems: list[str] = []
    if head is None and files:
        problems.append(
            f"{receipt_id(max(files))}: the chain's head ({HEAD_FILE}) is missing "
            "or unreadable, so the newest receipts cannot be checked"
        )
    if key is not None and anchor is None:
        problems.append(
            f"AgentOS's record of the newest receipt ({STATE_ANCHOR}) is missing or forged: "
            "receipts removed from the chain's end cannot be told"
        )
    newest_file = max(files, default=0)
    top = max(newest_file, anchor[0] if anchor else 0)
    if head is not None and head[0] > top:
        problems.append(
            f"{receipt_id(head[0])}: the chain's head ({HEAD_FILE}) names a receipt beyond "
            f"the newest there is ({receipt_id(top) if top else 'none'})"
        )
    previous: str | None = FIRST
    missing_key_told = False
    for seq in range(1, top + 1):
        rid = receipt_id(seq)
        name = files.get(seq)
        if name is None:
            if anchor is not None and newest_file < seq <= anchor[0]:
                problems.append(
                    f"{rid}: missing: removed from the chain's end "
                    f"(AgentOS last wrote {receipt_id(anchor[0])})"
                )
            else:
                problems.append(f"{rid}: missing (deleted or renamed)")
            previous = None
            continue
        declared, mac, found = _check_one(rid, _read_regular(directory / name), previous)
        problems.extend(found)
        if declared is not None and mac is not None:
            wrong = _check_mac(rid, seq, declared, mac, key)
            if wrong is not None and not (key is None and missing_key_told):
                problems.append(wrong)
                missing_key_told = key is None
        if head is not None and seq == head[0] and declared != head[1]:
            problems.append(
                f"{rid}: changed after it was written (the chain's head records another sha256)"
            )
        if anchor is not None and seq == anchor[0] and declared != anchor[1]:
            problems.append(
                f"{rid}: changed after it was written (AgentOS's record of the newest "
                "receipt holds another sha256)"
            )
        previous = None if declared is None else f"{rid} {declared}"
    return problems
