"""The workspace's receipts key and the anchor it signs.

The key is ``.agentos/receipts.key`` (32 random bytes as hex, then the first receipt it
signed; mode 0600), outside the receipts folder and hidden from every sandbox. The anchor,
``.agentos/receipts.anchor``, records the newest receipt, signed, so receipts cut from the
chain's end are told.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput
from agentos.receipts.chain import SHA_RE, SUFFIX, TRAILER_RE, Chain, read_regular, receipt_id

KEY_FILE = "receipts.key"  # in the state directory (.agentos/), mode 0600
ANCHOR_FILE = "receipts.anchor"  # in the state directory: the newest receipt, signed
STATE_KEY = f".agentos/{KEY_FILE}"
STATE_ANCHOR = f".agentos/{ANCHOR_FILE}"


@dataclass(frozen=True)
class Key:
    """The workspace's receipts key, and the first receipt it signed (those before it were
    written before the workspace had a key)."""

    secret: bytes
    first_signed: int

    def mac(self, *parts: str) -> str:
        return hmac.new(self.secret, " ".join(parts).encode(), hashlib.sha256).hexdigest()

    def matches(self, mac: str, *parts: str) -> bool:
        return hmac.compare_digest(mac, self.mac(*parts))


def load_key(state_dir: Path) -> Key | None:
    path = state_dir / KEY_FILE
    if not os.path.lexists(path):
        return None
    words = read_regular(path).decode("ascii", "replace").split()
    if len(words) != 2 or not SHA_RE.fullmatch(words[0]) or not words[1].isdigit():
        raise BadInput(
            "is not a receipts key: restore it from a backup (receipts signed with another "
            "key no longer verify)",
            file=path,
        )
    return Key(bytes.fromhex(words[0]), int(words[1]))


def make_key(state_dir: Path, first_signed: int, chain: Chain) -> Key:
    """The workspace's key, made now (readable by its owner alone) when there is none yet:
    never when receipts were signed already (a lost key is restored, not replaced, or the
    receipts it signed could be rewritten unsigned and blessed by a new one)."""
    key = load_key(state_dir)
    if key is not None:
        return key
    path = state_dir / KEY_FILE
    signed = first_signed > 1 and TRAILER_RE.search(
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
    key = load_key(state_dir)
    if key is None:
        raise BadInput("could not be made (is it a dangling link?)", file=path)
    return key


def write_anchor(state_dir: Path, key: Key, rid: str, digest: str) -> None:
    """Record the newest receipt, signed, outside the receipts folder."""
    tmp = state_dir / f".{ANCHOR_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    tmp.write_text(f"{rid} {digest} {key.mac('anchor', rid, digest)}\n", encoding="ascii")
    os.replace(tmp, state_dir / ANCHOR_FILE)


def read_anchor(state_dir: Path, key: Key) -> tuple[int, str] | None:
    """(seq, sha256) of the newest receipt AgentOS wrote; None when missing or forged."""
    words = read_regular(state_dir / ANCHOR_FILE).decode("ascii", "replace").split()
    if len(words) != 3 or not words[0].isdigit() or not SHA_RE.fullmatch(words[1]):
        return None
    if not key.matches(words[2], "anchor", words[0], words[1]):
        return None
    return int(words[0]), words[1]
