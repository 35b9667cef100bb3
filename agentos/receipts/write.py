"""Appending a receipt: under the chain's lock, linked to the newest, signed."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentos.errors import BadInput
from agentos.receipts.chain import FIRST, SUFFIX, Chain, file_mode, open_chain, receipt_id
from agentos.receipts.format import render, render_fields
from agentos.receipts.redact import redact
from agentos.receipts.sign import make_key, read_anchor, write_anchor
from agentos.workspace import Workspace

_KIND_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")


@dataclass(frozen=True)
class Receipt:
    """A receipt just written. ``sha256`` is the hash the next receipt records."""

    id: str
    path: Path
    sha256: str
    kind: str
    run_id: str | None
    time: str


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
    with open_chain(ws.receipts_dir, exclusive=True) as chain:
        for _attempt in range(3):  # only retried when a writer ignored the lock
            receipt = _append(chain, ws.state_dir, kind, body, run_id)
            if receipt is not None:
                return receipt
    raise OSError(f"{ws.receipts_dir}: could not append a receipt: another writer ignores the lock")


def _append(
    chain: Chain, state_dir: Path, kind: str, body: str, run_id: str | None
) -> Receipt | None:
    seq, previous = chain.newest()
    key = make_key(state_dir, seq + 1, chain)
    anchor = read_anchor(state_dir, key)
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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(), dir_fd=chain.fd)
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
    write_anchor(state_dir, key, rid, digest)
    os.fsync(chain.fd)  # makes the new receipt's name durable
    return Receipt(rid, chain.directory / final, digest, kind, run_id, now)
