"""``agentos state migrate --to URL``: a workspace's SQLite state and receipt files, copied
into an empty PostgreSQL database in one transaction (:mod:`agentos.state.transfer`).

The receipts go in as they are, byte for byte, with the head and the anchor; before the
copy is committed its counts are checked and the copied chain is verified where it now is
(with this machine's key, when it holds one: the key never goes into the database), so a
chain that does not verify there is not migrated. The chain's lock is held meanwhile, so no
receipt is written here while it is copied.
"""

from __future__ import annotations

from typing import Any

from agentos.errors import BadInput, OperationFailed
from agentos.receipts.chain import ANCHOR_FILE, open_directory, receipt_id
from agentos.receipts.sign import KEY_FILE
from agentos.receipts.table import TableChain, header_of
from agentos.receipts.verify import check, snapshot
from agentos.state.connection import Connection
from agentos.state.location import parse_url
from agentos.state.transfer import Copied, Rows, copy_state
from agentos.workspace.layout import Workspace


def migrate_state(ws: Workspace, url: str) -> Copied:
    """Copy the workspace's state and receipts into the empty database at ``url``."""
    target = parse_url(url, source="--to")
    if ws.state.shared:
        raise BadInput(
            f"this workspace's state is on PostgreSQL already ({ws.state.masked}, from "
            f"{ws.state.source}): migrate copies a workspace whose state is SQLite",
            field="--to",
        )
    signing = bool(ws.settings_data["receipts"]["sign"])
    hashes_only = not (ws.state_dir / KEY_FILE).exists()
    with open_directory(
        ws.receipts_dir, exclusive=True, anchor=ws.state_dir / ANCHOR_FILE
    ) as chain:
        receipts = []
        for seq, name in sorted(chain.files().items()):
            text = chain.read(name)
            fields = header_of(text)
            kind, time, run = fields.get("kind", "?"), fields.get("time", "?"), fields.get("run")
            receipts.append((seq, kind, time, run, text))
        marks = []
        head = chain.head()
        if head is not None:
            marks.append(("head", f"{receipt_id(head[0])} {head[1]}\n"))
        anchor = chain.anchor()
        if anchor:
            marks.append(("anchor", anchor.decode("ascii", "replace")))

        def verified(con: Connection) -> dict[str, Any]:
            copied = TableChain(con, target.masked)
            report = check(snapshot(copied, ws.state_dir, hashes_only=hashes_only), signing=signing)
            if not report.ok:
                raise OperationFailed(
                    "the receipts do not verify where they were copied, so nothing was "
                    "migrated (`agentos receipts verify` here says what is wrong): "
                    + "; ".join(report.problems[:5]),
                    file=target.masked,
                )
            return {"receipts_verified": report.receipts, "macs_checked": report.macs_checked}

        return copy_state(
            ws.state_db,
            target,
            [
                Rows("receipts", ("seq", "kind", "time", "run", "text"), receipts),
                Rows("receipts_marks", ("name", "value"), marks),
            ],
            verified,
        )
