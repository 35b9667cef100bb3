"""The state database, whichever backend holds it: one API for the stores over SQLite
(:mod:`agentos.state.sqlite`, the default) and PostgreSQL (:mod:`agentos.state.postgres`,
imported only when the state is there).

A store (:class:`Store`) runs one set of queries on either: ``?`` placeholders, upserts
as ``INSERT ... ON CONFLICT``, new ids through ``RETURNING``. A statement on its own is its
own transaction; several that must hold together go through :meth:`Store.transaction`,
which takes the backend's write lock up front on SQLite and, on PostgreSQL, whatever
named lock the work takes (:meth:`Connection.lock`, an advisory lock), so that a check and
the write it decides are never split by another writer.

A PostgreSQL connection lost mid-use is opened again and the statement (or the whole
transaction) done again, for up to ``AGENTOS_STATE_RETRY`` seconds (default 30); past
that, :class:`~agentos.errors.StateUnavailable` says so, naming the URL masked.

Followers of the state (``events --follow``, the dashboard's stream, the terminal UI)
wait on a :class:`Listener`: PostgreSQL wakes it with ``NOTIFY`` as a row is written and
it issues no query in between; SQLite has no such thing, and its listener wakes after the
interval the follower polls at.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentos.errors import BadInput, StateUnavailable
from agentos.state.connection import (
    CANCELS,
    EVENTS,
    POLL,
    Connection,
    ConnectionLost,
    Listener,
    Poller,
    refuse_newer,
)
from agentos.state.location import StateLocation

__all__ = [
    "CANCELS",
    "EVENTS",
    "POLL",
    "Connection",
    "ConnectionLost",
    "Listener",
    "Store",
    "open_connection",
    "open_listener",
    "pool_connections",
    "retry_window",
]

T = TypeVar("T")

RETRY_ENV = "AGENTOS_STATE_RETRY"
DEFAULT_RETRY = 30.0


def retry_window() -> float:
    """Seconds a store retries a lost connection (``AGENTOS_STATE_RETRY``, default 30)."""
    raw = os.environ.get(RETRY_ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 3600:
        raise BadInput(f"must be seconds between 0 and 3600, not {raw!r}", field=RETRY_ENV)
    return value


def as_location(where: StateLocation | Path) -> StateLocation:
    return where if isinstance(where, StateLocation) else StateLocation("sqlite", path=where)


def open_connection(where: StateLocation | Path) -> Connection:
    """A connection to the state at ``where``, its schema brought up to date. A database
    whose schema is newer than this AgentOS is refused (:func:`unknown`)."""
    location = as_location(where)
    if location.backend == "postgresql":
        _require_psycopg(location)
        from agentos.state.postgres import PostgresConnection

        return PostgresConnection(location)
    from agentos.state.migrations import SQLITE_MIGRATIONS
    from agentos.state.sqlite import SqliteConnection

    assert location.path is not None
    con = SqliteConnection(location.path)
    try:
        refuse_newer(con, [m.name for m in SQLITE_MIGRATIONS])
    except BaseException:
        con.close()
        raise
    return con


def open_listener(where: StateLocation | Path, channel: str) -> Listener:
    location = as_location(where)
    if location.backend == "postgresql":
        _require_psycopg(location)
        from agentos.state.postgres import PostgresListener

        return PostgresListener(location, channel)
    return Poller()


def pool_connections(where: StateLocation | Path) -> None:
    """From now on, this process's stores on PostgreSQL borrow their connections from one
    pool (psycopg_pool) instead of opening their own: for the long-lived processes that open
    a store per request (the dashboard, the MCP server over HTTP). Nothing on SQLite."""
    location = as_location(where)
    if location.shared:
        _require_psycopg(location)
        from agentos.state.postgres import use_pool

        use_pool()


def _require_psycopg(location: StateLocation) -> None:
    """psycopg, imported only where the state is PostgreSQL, is there."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise StateUnavailable(
            f"the state is on PostgreSQL, and psycopg cannot be imported here ({exc}): "
            "install AgentOS with its postgres extra (pip install 'agentos-kit[postgres]')",
            file=location.masked,
        ) from None


def describe(where: StateLocation | Path) -> dict[str, Any]:
    """``agentos state show``: where the state is, its schema (the newest migration it
    records), this host, and how long ago each host sharing it last heartbeat."""
    from agentos.state.host import host_id
    from agentos.state.migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS

    location = as_location(where)
    store = Store(location)
    try:
        applied = store.con.applied()
        known = POSTGRES_MIGRATIONS if location.shared else SQLITE_MIGRATIONS
        newest = [m.name for m in known if m.name in applied]
        now = time.time()
        hosts = {
            str(h): round(max(0.0, now - float(at)), 1)
            for h, at in store.query("SELECT id, heartbeat_at FROM hosts ORDER BY id")
        }
    finally:
        store.close()
    return {
        "where": location.masked,
        "backend": location.backend,
        "source": location.source,
        "schema": newest[-1] if newest else None,
        "host": host_id(),
        "hosts": hosts,
    }


class Store:
    """The state for one process, safe to share between threads (every use takes a
    lock). ``query``, ``one`` and ``write`` run one statement; ``transaction`` runs a
    function of several, all or nothing. On SQLite a damaged or locked file is a one-line
    error naming it; on PostgreSQL a lost connection is retried (see the module)."""

    def __init__(self, where: StateLocation | Path) -> None:
        self.location = as_location(where)
        self.con: Connection = open_connection(self.location)
        self._lock = threading.RLock()
        self._gave_up = False

    @property
    def dialect(self) -> str:
        return self.con.dialect

    @property
    def where(self) -> str:
        """What messages name: the file, or the URL with its password masked."""
        return self.con.where

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._retried(lambda con: con.rows(sql, args))

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.query(sql, args)
        return rows[0] if rows else None

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One statement, its own transaction; how many rows it changed."""
        return self._retried(lambda con: con.write(sql, args))

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """``work`` in one write transaction, done again whole if the connection is lost."""

        def whole(con: Connection) -> T:
            with con.begin():
                return work(con)

        return self._retried(whole)

    def reading(self, work: Callable[[Connection], T]) -> T:
        """``work``, several reads on the connection, done again whole if it is lost."""
        return self._retried(work)

    def listen(self, channel: str) -> Listener:
        """A listener on ``channel`` of this store's database (a connection of its own)."""
        return open_listener(self.location, channel)

    def _retried(self, work: Callable[[Connection], T]) -> T:
        with self._lock:
            deadline: float | None = None
            while True:
                try:
                    result = work(self.con)
                    self._gave_up = False
                    return result
                except ConnectionLost as lost:
                    now = time.monotonic()
                    if deadline is None:  # once given up, one more try, not a whole window
                        deadline = now + (0.0 if self._gave_up else retry_window())
                    elif now >= deadline:
                        self._gave_up = True
                        raise StateUnavailable(
                            f"the connection was lost and could not be made again within "
                            f"{retry_window():g} s ({lost.message})",
                            file=self.where,
                            hint=f"is the server running? {RETRY_ENV} sets how long AgentOS "
                            "retries",
                        ) from lost
                    time.sleep(min(0.25, max(deadline - now, 0.0)))
                    try:
                        self.con.reconnect()
                    except ConnectionLost:
                        continue

    def close(self) -> None:
        with self._lock:
            self.con.close()
