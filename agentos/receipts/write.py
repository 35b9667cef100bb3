"""Appending a receipt: under the chain's lock, linked to the newest, signed (unless the
workspace's settings turn signing off); and ``rekey``, the one write that starts a new key."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput
from agentos.receipts.chain import (
    FIRST,
    OFF,
    SUFFIX,
    Chained,
    file_of,
    receipt_id,
)
from agentos.receipts.format import render, render_fields
from agentos.receipts.place import open_chain, retried
from agentos.receipts.redact import redact
from agentos.receipts.sign import (
    KEY_FILE,
    Key,
    load_key,
    read_anchor,
    replace_key,
    signing_key,
    write_anchor,
)
from agentos.workspace.layout import Workspace

_KIND_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")


@dataclass(frozen=True)
class Receipt:
    """A receipt just written. ``sha256`` is the hash the next receipt records."""

    id: str
    file: Path | None  # its file (None: in the state's table, on PostgreSQL)
    sha256: str
    kind: str
    run_id: str | None
    time: str

    @property
    def path(self) -> Path:
        """Its file; a receipt in the state's table (PostgreSQL) has none."""
        return file_of(self.id, self.file)


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

    The receipt is signed with the workspace's key, made now when the workspace never had
    one, unless its settings say ``receipts: {sign: false}``; a workspace whose receipts
    were signed and whose key is gone gets no receipt (:class:`BadInput` naming the key
    file) until the key is restored or replaced with :func:`rekey`.
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
    sign = bool(ws.settings_data["receipts"]["sign"])
    shared = ws.state.shared

    def append() -> Receipt:
        with open_chain(ws, exclusive=True, shared=shared) as chain:
            for _attempt in range(3):  # only retried when a writer ignored the lock
                receipt = _append(chain, ws.state_dir, kind, body, run_id, sign=sign)
                if receipt is not None:
                    return receipt
        raise OSError(f"{chain.where}: could not append a receipt: another writer ignores it")

    # in the state's table: done again if the connection broke
    return retried(ws, append, shared=shared)


def utc_now() -> str:
    """The time a receipt records: UTC, to the microsecond (``2026-11-27T09:41:07.123456Z``)."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + (
        f".{ns // 1000 % 1_000_000:06d}Z"
    )


def _append(
    chain: Chained,
    state_dir: Path,
    kind: str,
    body: str,
    run_id: str | None,
    *,
    sign: bool,
    key: Key | None = None,
) -> Receipt | None:
    """Write the next receipt; None when another writer took its id. Signed with ``key``,
    or the workspace's (:func:`signing_key`), unless ``sign`` is false."""
    seq, previous = chain.newest()
    if sign:
        key = key or signing_key(chain, state_dir, seq)
        anchor = read_anchor(chain, key)
        if anchor is not None and anchor[0] > seq:
            # Receipts AgentOS wrote are gone from the end: never reuse their ids, so that
            # verify keeps naming them.
            seq, previous = anchor
        signed_from = receipt_id(key.first_signed)
    else:
        key, signed_from = None, OFF
    rid = receipt_id(seq + 1)
    now = utc_now()
    header = f"receipt: {rid}\nkind: {kind}\ntime: {now}\n"
    if run_id is not None:
        header += f"run: {run_id}\n"
    link = FIRST if seq == 0 else f"{receipt_id(seq)} {previous}"
    content = f"{header}{body}signed_from: {signed_from}\nprevious: {link}\n".encode()
    digest = hashlib.sha256(content).hexdigest()
    seal = (
        f"sha256: {digest}\n" if key is None else f"sha256: {digest}\nmac: {key.mac(rid, digest)}\n"
    )
    data = content + seal.encode()
    if not chain.add(rid, data):
        return None
    chain.set_head(rid, digest)
    if key is not None:
        write_anchor(chain, key, rid, digest)
    chain.sync()
    return Receipt(rid, chain.path(f"{rid}{SUFFIX}"), digest, kind, run_id, now)


# --- a new key, on purpose ----------------------------------------------------------------


@dataclass(frozen=True)
class Rekeyed:
    """What ``receipts rekey`` did. ``receipt`` is the rekey receipt, the new key's first;
    ``previous_key`` says what became of the old one (``lost``, ``unreadable``,
    ``replaced``); ``previously_signed`` the receipts it signed (they verify by hash and link
    only from now on); ``problems`` what verifying found just before (without the key when
    it was lost), written in the receipt."""

    receipt: Receipt
    previous_key: str
    previously_signed: str | None
    problems: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "receipt": self.receipt.id,
            "signed_from": self.receipt.id,
            "previous_key": self.previous_key,
            "previously_signed": self.previously_signed,
            "problems": list(self.problems),
        }


def rekey(ws: Workspace, reason: str, *, force: bool = False) -> Rekeyed:
    """Start a new receipts key, and write the ``rekey`` receipt that says so (the first
    the new key signs): why, what became of the previous key, which receipts it signed, and
    what verifying found before. For a key that is lost or unreadable; a key that is there
    and valid (one that leaked) is replaced only with ``force``."""
    reason = reason.strip()
    if not reason:
        raise BadInput("must say why the key is replaced", field="reason")
    if not ws.settings_data["receipts"]["sign"]:
        raise BadInput(
            "is false: receipts are not signed here, so there is no key to replace",
            file=ws.settings_file,
            field="receipts.sign",
        )
    from agentos.receipts.verify import check, snapshot

    path = ws.state_dir / KEY_FILE
    with open_chain(ws, exclusive=True) as chain:
        try:
            old = load_key(ws.state_dir)
            how = "lost" if old is None else "replaced"
        except BadInput:
            old, how = None, "unreadable"
        if old is not None and not force:
            raise BadInput(
                "holds a valid key: `receipts rekey` starts a new one when it is lost or "
                "unreadable; --force replaces it (receipts it signed then verify by hash "
                "and link only)",
                file=path,
            )
        found = check(
            snapshot(chain, ws.state_dir, hashes_only=old is None),
            signing=True,
        )
        seq, _ = chain.newest()
        new = replace_key(ws.state_dir, seq + 1)
        span = None
        if found.signed is not None:
            first, last = (receipt_id(s) for s in found.signed)
            span = first if first == last else f"{first}-{last}"
        fields = {
            "reason": reason,
            "previous_key": how,
            "previously_signed": span,
            "problems": list(found.problems),
        }
        body = "".join(f"{line}\n" for line in render_fields(fields))
        receipt = _append(chain, ws.state_dir, "rekey", body, None, sign=True, key=new)
    if receipt is None or receipt.id != receipt_id(new.first_signed):
        raise OSError(f"{chain.where}: no rekey receipt: a writer ignores the lock")
    return Rekeyed(receipt, how, span, found.problems)
