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
    signed_from: 00000001                  (from which receipt on receipts here are signed)
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
and read is :mod:`agentos.receipts.format`, the one owner of the format.

The chain is keyed. The key is ``.agentos/receipts.key`` (32 random bytes and the first
receipt it signed, mode 0600, made with the first signed receipt), outside the receipts
folder and hidden from every sandbox. Each receipt's ``mac`` line signs its id and sha256,
and every append also records the newest receipt, signed, in ``.agentos/receipts.anchor``.
Each receipt says, in its hashed body, from which receipt on the workspace's receipts are
signed (``signed_from``; ``off`` when ``receipts: {sign: false}`` turns signing off), so a
receipt whose mac was stripped is told even with the key and the anchor deleted. Once
receipts were signed, a lost key is an error, never silently replaced: restore it, import
it (:func:`import_key`, from :func:`export_key` on another writer) or start a new one with
:func:`rekey`, whose receipt says so.

:func:`verify_receipts` (and :func:`verify_chain`, its problems alone) recomputes every
receipt's hash, link and mac, checks ``signed_from``, and compares the newest receipt with
the head and the anchor, so an edited, removed, reordered, moved, forged or stripped
receipt is reported by id, and a missing key or anchor by name (see
:mod:`agentos.receipts.verify` for what each finding means, and what no check on disk can
tell). Receipts written before AgentOS signed them (no ``signed_from``, no mac) verify as
they did.

Its parts: :mod:`~agentos.receipts.chain` (ids, files, the head and its lock),
:mod:`~agentos.receipts.sign` (the key and the anchor), :mod:`~agentos.receipts.write`,
:mod:`~agentos.receipts.redact`, :mod:`~agentos.receipts.read`,
:mod:`~agentos.receipts.format` and :mod:`~agentos.receipts.verify`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# redact is also its module's name: imported now, so that the name is the function.
from agentos.receipts.redact import redact
from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.receipts.chain import FIRST, HEAD_FILE, ID_DIGITS, SUFFIX, receipt_id
    from agentos.receipts.place import export_receipts
    from agentos.receipts.read import (
        ParsedReceipt,
        ReceiptInfo,
        list_receipts,
        load_receipt,
        parse_receipt,
        read_receipt,
        receipt_path,
    )
    from agentos.receipts.sign import (
        ANCHOR_FILE,
        KEY_FILE,
        STATE_ANCHOR,
        STATE_KEY,
        KeyImport,
        export_key,
        import_key,
    )
    from agentos.receipts.verify import (
        ChainReport,
        verify_chain,
        verify_directory,
        verify_receipts,
    )
    from agentos.receipts.write import Receipt, Rekeyed, rekey, write_receipt

# Imported when first used: `agentos route` writes a receipt and reads none.
FACE = {
    "FIRST": "agentos.receipts.chain",
    "HEAD_FILE": "agentos.receipts.chain",
    "ID_DIGITS": "agentos.receipts.chain",
    "SUFFIX": "agentos.receipts.chain",
    "receipt_id": "agentos.receipts.chain",
    "ParsedReceipt": "agentos.receipts.read",
    "ReceiptInfo": "agentos.receipts.read",
    "list_receipts": "agentos.receipts.read",
    "load_receipt": "agentos.receipts.read",
    "parse_receipt": "agentos.receipts.read",
    "read_receipt": "agentos.receipts.read",
    "receipt_path": "agentos.receipts.read",
    "ANCHOR_FILE": "agentos.receipts.sign",
    "KEY_FILE": "agentos.receipts.sign",
    "STATE_ANCHOR": "agentos.receipts.sign",
    "STATE_KEY": "agentos.receipts.sign",
    "KeyImport": "agentos.receipts.sign",
    "export_key": "agentos.receipts.sign",
    "import_key": "agentos.receipts.sign",
    "ChainReport": "agentos.receipts.verify",
    "verify_chain": "agentos.receipts.verify",
    "verify_receipts": "agentos.receipts.verify",
    "verify_directory": "agentos.receipts.verify",
    "export_receipts": "agentos.receipts.place",
    "Receipt": "agentos.receipts.write",
    "Rekeyed": "agentos.receipts.write",
    "rekey": "agentos.receipts.write",
    "write_receipt": "agentos.receipts.write",
}

__all__ = [
    "ANCHOR_FILE",
    "FIRST",
    "HEAD_FILE",
    "ID_DIGITS",
    "KEY_FILE",
    "STATE_ANCHOR",
    "STATE_KEY",
    "SUFFIX",
    "ChainReport",
    "KeyImport",
    "ParsedReceipt",
    "Receipt",
    "ReceiptInfo",
    "Rekeyed",
    "export_key",
    "export_receipts",
    "import_key",
    "list_receipts",
    "load_receipt",
    "parse_receipt",
    "read_receipt",
    "receipt_id",
    "receipt_path",
    "redact",
    "rekey",
    "verify_chain",
    "verify_directory",
    "verify_receipts",
    "write_receipt",
]

if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
