"""The workspace's receipts key, the anchor it signs, and carrying the key to another writer.

The key is ``.agentos/receipts.key``: 32 random bytes as hex, then the first receipt it
signed; mode 0600, outside the receipts folder and hidden from every sandbox. The anchor,
``.agentos/receipts.anchor``, records the newest receipt, signed, so receipts cut from the
chain's end are told.

The first key is made by the first signed write of a workspace that was never signed. Once
receipts were signed, a missing key is never replaced silently: it is restored (from a
backup, or ``agentos receipts key import``), or replaced on purpose by ``agentos receipts
rekey``, whose receipt says so. Several writers of one chain share one key
(``agentos receipts key export``, then ``import`` on the other machine).
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput
from agentos.receipts.chain import (
    ANCHOR_FILE,
    SHA_RE,
    STATE_ANCHOR,
    Chained,
    read_regular,
    receipt_id,
)
from agentos.receipts.place import open_chain
from agentos.workspace.layout import Workspace

KEY_FILE = "receipts.key"  # in the state directory (.agentos/), mode 0600
STATE_KEY = f".agentos/{KEY_FILE}"
__all__ = ["ANCHOR_FILE", "KEY_FILE", "STATE_ANCHOR", "STATE_KEY"]  # and what is defined here
_KEY_MAX = 4096  # bytes read of a file given to `key import`: a key is 80


@dataclass(frozen=True)
class Key:
    """The workspace's receipts key, and the first receipt it signed (those before it were
    written before the workspace had a key, or signed with a key it replaced)."""

    secret: bytes
    first_signed: int

    def mac(self, *parts: str) -> str:
        return hmac.digest(self.secret, " ".join(parts).encode(), "sha256").hex()

    def matches(self, mac: str, *parts: str) -> bool:
        return hmac.compare_digest(mac, self.mac(*parts))

    def text(self) -> str:
        """The key as its file holds it (and as ``key export`` writes it)."""
        return f"{self.secret.hex()} {self.first_signed}\n"


def new_key(first_signed: int) -> Key:
    return Key(os.urandom(32), first_signed)


def _parse_key(data: bytes) -> Key | None:
    words = data.decode("ascii", "replace").split()
    if len(words) != 2 or not SHA_RE.fullmatch(words[0]) or not words[1].isdigit():
        return None
    return Key(bytes.fromhex(words[0]), int(words[1]))


def load_key(state_dir: Path) -> Key | None:
    """The workspace's key; None when it has none."""
    path = state_dir / KEY_FILE
    data = read_regular(path)
    if not data and not os.path.lexists(path):  # read as empty: missing, or not a key
        return None
    key = _parse_key(data)
    if key is None:
        raise BadInput(
            "is not a receipts key: restore it from a backup or `agentos receipts key import "
            "FILE` (or start a new one with `agentos receipts rekey --reason TEXT`)",
            file=path,
        )
    return key


def _store_key(state_dir: Path, key: Key, *, replace: bool) -> None:
    """Write the key, readable by its owner alone; without ``replace``, a key another
    writer made first wins."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(fd, "w", encoding="ascii") as fh:
            fh.write(key.text())
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, state_dir / KEY_FILE)
        else:
            try:
                os.link(tmp, state_dir / KEY_FILE)
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links: the chain's lock serialises us
                if not os.path.lexists(state_dir / KEY_FILE):
                    os.rename(tmp, state_dir / KEY_FILE)
    finally:
        tmp.unlink(missing_ok=True)


def signed_evidence(chain: Chained, seq: int) -> str | None:
    """What shows that this workspace's receipts were signed (the chain's newest receipt is
    ``seq``), or None when nothing does: a workspace from before signing, or never signed."""
    if chain.has_anchor():
        return f"{chain.anchor_name} exists"
    found = chain.newest_signed(seq)
    return None if found is None else f"receipt {receipt_id(found[0])} is signed"


def signing_key(chain: Chained, state_dir: Path, seq: int) -> Key:
    """The workspace's key, made now when it never had one (its first signed receipt is
    ``seq + 1``). Never when its receipts were signed already: a lost key is restored or
    replaced on purpose (``receipts rekey``), or its receipts could be rewritten unsigned and
    blessed by a new key."""
    key = load_key(state_dir)
    if key is not None:
        return key
    path = state_dir / KEY_FILE
    evidence = signed_evidence(chain, seq)
    if evidence is not None:
        raise BadInput(
            f"is missing, and this workspace's receipts were signed ({evidence}): restore it "
            "from a backup or `agentos receipts key import FILE`; `agentos receipts rekey "
            "--reason TEXT` starts a new key (none is made silently)",
            file=path,
        )
    _store_key(state_dir, new_key(seq + 1), replace=False)
    key = load_key(state_dir)
    if key is None:
        raise BadInput("could not be made (is it a dangling link?)", file=path)
    return key


def replace_key(state_dir: Path, first_signed: int) -> Key:
    """A new key, in place of whatever the workspace held (``receipts rekey``)."""
    key = new_key(first_signed)
    _store_key(state_dir, key, replace=True)
    return key


def write_anchor(chain: Chained, key: Key, rid: str, digest: str) -> None:
    """Record the newest receipt, signed, apart from the receipts (outside their folder)."""
    chain.set_anchor(f"{rid} {digest} {key.mac('anchor', rid, digest)}\n")


def read_anchor(chain: Chained, key: Key) -> tuple[int, str] | None:
    """(seq, sha256) of the newest receipt AgentOS wrote; None when missing or forged."""
    words = chain.anchor().decode("ascii", "replace").split()
    if (
        len(words) != 3
        or not words[0].isdigit()
        or not SHA_RE.fullmatch(words[1])
        or not SHA_RE.fullmatch(words[2])  # a mac too (compare_digest raises on non-ASCII)
    ):
        return None
    if not key.matches(words[2], "anchor", words[0], words[1]):
        return None
    return int(words[0]), words[1]


# --- carrying the key to another writer ---------------------------------------------------


def export_key(ws: Workspace, out: Path | None = None) -> str:
    """The workspace's key as text (a secret: it signs receipts); written to ``out`` too,
    mode 0600, when given. ``out`` is never overwritten with another key."""
    key = load_key(ws.state_dir)
    if key is None:
        raise BadInput(
            "is missing: there is no key to export (the first signed receipt makes it)",
            file=ws.state_dir / KEY_FILE,
        )
    text = key.text()
    if out is not None:
        if os.path.lexists(out):
            if _parse_key(read_regular(out)) == key:
                return text
            raise BadInput("exists: remove it or choose another --out", file=out)
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise BadInput(f"cannot be written: {exc.strerror}", file=out) from None
        with open(fd, "w", encoding="ascii") as fh:
            fh.write(text)
    return text


@dataclass(frozen=True)
class KeyImport:
    """What ``receipts key import`` did: ``changed`` is false when the workspace held this
    very key already; ``checked`` names the receipt whose signature the key was checked
    against (None when the chain has no signed receipt to check)."""

    path: Path
    first_signed: str
    changed: bool
    checked: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "first_signed": self.first_signed,
            "changed": self.changed,
            "checked": self.checked,
        }


def import_key(ws: Workspace, source: Path, *, force: bool = False) -> KeyImport:
    """Make the key in ``source`` (as ``export_key`` writes it) the workspace's. Refused,
    unless ``force``, when the workspace holds another key or the key does not sign the
    chain's newest signed receipt. A workspace without an anchor gets one for its newest
    receipt, signed with the key, so that receipts cut from the end are told from now on."""
    try:
        with source.open("rb") as fh:
            data = fh.read(_KEY_MAX + 1)
    except OSError as exc:
        raise BadInput(f"cannot be read: {exc.strerror}", file=source) from None
    key = _parse_key(data) if len(data) <= _KEY_MAX else None
    if key is None:
        raise BadInput(
            "is not a receipts key (64 hex digits and the first receipt it signed, as "
            "`agentos receipts key export` writes it)",
            file=source,
        )
    target = ws.state_dir / KEY_FILE
    with open_chain(ws, exclusive=True) as chain:
        try:
            held = load_key(ws.state_dir)
        except BadInput:
            held = None  # unreadable: the import restores it
        if held == key:
            return KeyImport(target, receipt_id(key.first_signed), False, None)
        if held is not None and not force:
            raise BadInput(
                "holds another key: --force replaces it (receipts it signed then fail verify)",
                file=target,
            )
        seq, digest = chain.newest()
        checked = None
        found = chain.newest_signed(seq)
        if found is not None and found[1].mac and found[0] >= key.first_signed:
            checked = receipt_id(found[0])
            if not key.matches(found[1].mac, checked, found[1].sha256) and not force:
                raise BadInput(
                    f"does not sign this workspace's receipts (receipt {checked}'s signature "
                    "does not match it: another workspace's key?): --force imports it anyway",
                    file=source,
                )
        _store_key(ws.state_dir, key, replace=True)
        if seq and read_anchor(chain, key) is None:
            write_anchor(chain, key, receipt_id(seq), digest)
    return KeyImport(target, receipt_id(key.first_signed), True, checked)
