"""Where a workspace's chain is: its receipts folder (and the anchor beside the state),
or, where the state is PostgreSQL, the state's tables (:mod:`agentos.receipts.table`);
and the chain written out as files (``receipts export``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from agentos.errors import BadInput
from agentos.receipts.chain import ANCHOR_FILE, Chained, open_directory, receipt_id
from agentos.workspace.layout import Workspace

T = TypeVar("T")


def retried(ws: Workspace, work: Callable[[], T], *, shared: bool | None = None) -> T:
    """``work`` (one append, a transaction of its own), done again while the state's
    connection is lost, for up to its retry window (a chain on disk: once). ``shared``:
    whether the state is on a server, when the caller knows already."""
    if not (ws.state.shared if shared is None else shared):
        return work()
    from agentos.state.database import ConnectionLost, retry_window

    deadline = time.monotonic() + retry_window()
    while True:
        try:
            return work()
        except ConnectionLost:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.25)


@contextmanager
def open_chain(ws: Workspace, *, exclusive: bool, shared: bool | None = None) -> Iterator[Chained]:
    """The workspace's chain under its lock: its receipts folder and anchor file, or, where
    the state is PostgreSQL, the state's receipts table. ``shared``: as for :func:`retried`."""
    if ws.state.shared if shared is None else shared:
        from agentos.receipts.table import table_chain  # the state's tables: PostgreSQL

        with table_chain(ws, exclusive=exclusive) as chain:
            yield chain
        return
    with open_directory(
        ws.receipts_dir, exclusive=exclusive, anchor=ws.state_dir / ANCHOR_FILE
    ) as found:
        yield found


def export_receipts(ws: Workspace, directory: Path) -> int:
    """Write the chain, as files and a head (and its anchor), to ``directory``: what a
    workspace on SQLite holds, verifiable offline (``receipts verify --dir``). The folder
    must be new or empty. How many receipts it wrote. (A workspace on SQLite has its chain
    in files already: it is copied as it is.)"""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadInput("exists and is not an empty folder: export into a new one", file=directory)
    with open_chain(ws, exclusive=False) as chain:
        files = chain.files()
        head = chain.head()
        anchor = chain.anchor()
        directory.mkdir(parents=True, exist_ok=True)
        with open_directory(directory, exclusive=True, anchor=directory / ANCHOR_FILE) as out:
            for seq, name in files.items():
                out.add(receipt_id(seq), chain.read(name))
            if head is not None:
                out.set_head(receipt_id(head[0]), head[1])
            if anchor:
                out.set_anchor(anchor.decode("ascii", "replace"))
            out.sync()
    return len(files)
