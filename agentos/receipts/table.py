"""The receipts chain in the state's tables, where the state is PostgreSQL: one chain that
writers on many machines append to.

Each receipt is one row of ``receipts``: its position, its kind, time and run (for
listing without parsing), and its text, byte for byte what its file would hold, so its
sha256, its link and its mac are the same as on disk. ``receipts_marks`` holds the head
(``head``: the newest receipt's id and sha256) and the anchor (``anchor``: the same, signed
with the key, which stays on the machines that write, never in the database).

A writer appends inside one transaction holding an advisory lock on the chain (every other
writer, on any machine, waits for it), so the chain never forks; a row, the head and the
anchor are committed together. A reader (``receipts verify``) reads in one snapshot
(``REPEATABLE READ``), so it judges a chain as it was at one moment, without waiting for
writers. ``receipts export DIR`` writes the same files and head as a workspace on SQLite
would hold, and the anchor, so that the chain can be verified offline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentos.errors import NotFound
from agentos.receipts.chain import (
    NAME_RE,
    SUFFIX,
    Chained,
    parse_head,
    receipt_id,
)
from agentos.state.connection import Connection
from agentos.state.database import Store
from agentos.workspace.layout import Workspace

LOCK = "agentos receipts"  # the advisory lock every writer of the chain takes
_PAGE = 500  # receipts read at once by a reader walking the chain


class TableChain(Chained):
    """The chain in the state's tables, inside one transaction (see the module)."""

    head_name = "the receipts_marks table's head"
    anchor_name = "the receipts_marks table's anchor"

    def __init__(self, con: Connection, where: str) -> None:
        self.con = con
        self.where = f"{where} (receipts)"
        self._page: dict[int, bytes] = {}

    def read(self, name: str) -> bytes:
        seq = _seq(name)
        if seq is None:
            return b""
        if seq not in self._page:
            self._page = {
                int(s): bytes(text)
                for s, text in self.con.rows(
                    "SELECT seq, text FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq",
                    (seq, seq + _PAGE),
                )
            }
        return self._page.get(seq, b"")

    def exists(self, name: str) -> bool:
        seq = _seq(name)
        return seq is not None and bool(
            self.con.rows("SELECT 1 FROM receipts WHERE seq = ?", (seq,))
        )

    def files(self) -> dict[int, str]:
        return {
            int(seq): f"{receipt_id(int(seq))}{SUFFIX}"
            for (seq,) in self.con.rows("SELECT seq FROM receipts ORDER BY seq")
        }

    def head(self) -> tuple[int, str] | None:
        return parse_head(self._mark("head"))

    def set_head(self, rid: str, digest: str) -> None:
        self._set_mark("head", f"{rid} {digest}\n")

    def add(self, rid: str, data: bytes) -> bool:
        header = header_of(data)
        self._page.clear()
        return bool(
            self.con.write(
                "INSERT INTO receipts (seq, kind, time, run, text) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (seq) DO NOTHING",
                (
                    int(rid),
                    header.get("kind", "?"),
                    header.get("time", "?"),
                    header.get("run"),
                    data,
                ),
            )
        )

    def anchor(self) -> bytes:
        return self._mark("anchor")

    def has_anchor(self) -> bool:
        return bool(self.con.rows("SELECT 1 FROM receipts_marks WHERE name = 'anchor'"))

    def set_anchor(self, text: str) -> None:
        self._set_mark("anchor", text)

    def _mark(self, name: str) -> bytes:
        rows = self.con.rows("SELECT value FROM receipts_marks WHERE name = ?", (name,))
        return str(rows[0][0]).encode() if rows else b""

    def _set_mark(self, name: str, value: str) -> None:
        self.con.write(
            "INSERT INTO receipts_marks (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )


@contextmanager
def table_chain(ws: Workspace, *, exclusive: bool) -> Iterator[TableChain]:
    """The workspace's chain in the state, in one transaction: a writer's, holding the
    chain's lock; a reader's, one snapshot."""
    store = Store(ws.state)
    try:
        with store.con.begin():
            if exclusive:
                store.con.lock(LOCK)
            else:
                store.con.write("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield TableChain(store.con, store.where)
    finally:
        store.close()


# -- reading, as agentos.receipts.read does from files -------------------------------------


def listed(ws: Workspace, run_id: str | None = None) -> list[tuple[int, str, str, str | None]]:
    """(seq, kind, time, run) of every receipt in chain order, or of one run's."""
    store = Store(ws.state)
    try:
        clause, args = ("WHERE run = ? ", [run_id]) if run_id is not None else ("", [])
        rows = store.query(f"SELECT seq, kind, time, run FROM receipts {clause}ORDER BY seq", args)
    finally:
        store.close()
    return [(int(seq), str(kind), str(time), run) for seq, kind, time, run in rows]


def text_of(ws: Workspace, seq: int) -> bytes:
    """Receipt ``seq``'s text as written; :class:`NotFound` when there is none."""
    store = Store(ws.state)
    try:
        row = store.one("SELECT text FROM receipts WHERE seq = ?", (seq,))
    finally:
        store.close()
    if row is None:
        raise NotFound(f"no receipt {receipt_id(seq)} in {store.where}", field="id")
    return bytes(row[0])


def _seq(name: str) -> int | None:
    found = NAME_RE.match(name)
    if found is None or receipt_id(int(found.group(1))) != found.group(1):
        return None
    return int(found.group(1))


def header_of(data: bytes) -> dict[str, str]:
    """A receipt's header lines (receipt, kind, time, run) from its text."""
    from agentos.receipts.format import HEADER

    out: dict[str, str] = {}
    for raw in data.split(b"\n"):
        key, sep, value = raw.decode("utf-8", "replace").partition(": ")
        if not sep or key not in HEADER or key in out:
            break
        out[key] = value
    return out
