"""SQLite through apsw: connections in WAL mode with a busy timeout, ordered named
migrations, write transactions taken up front; the state's SQLite backend
(:class:`SqliteConnection`), and what the knowledge store opens too.

A damaged database, or one another process holds past the busy timeout, is a one-line
error naming the file (:mod:`agentos.state.errors`); an empty file is a new database.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from agentos.state.errors import busy_timeout, guarded, locked
from agentos.state.migrations import SQLITE_MIGRATIONS, Migration


def connect(path: Path, migrations: Sequence[Migration] = SQLITE_MIGRATIONS) -> apsw.Connection:
    """Open (creating if needed) a database in WAL mode with a busy timeout, migrated.

    Raises :class:`~agentos.errors.DatabaseCorrupt` or
    :class:`~agentos.errors.DatabaseLocked` naming ``path``; its later queries do the
    same inside :func:`agentos.state.errors.guarded`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    timeout = busy_timeout()
    with guarded(path):
        con = apsw.Connection(str(path))
        try:
            con.set_busy_timeout(round(timeout * 1000))
            _wal(con, path, timeout)
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("PRAGMA foreign_keys=ON")
            migrate(con, migrations)
        except BaseException:
            con.close()
            raise
    return con


def _wal(con: apsw.Connection, path: Path, timeout: float) -> None:
    """Switch to WAL. A database another process is creating or switching at the same
    moment answers SQLITE_BUSY at once (the busy timeout does not cover a journal-mode
    change), so this waits and retries up to the busy timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise locked(path) from None
            time.sleep(0.01)


def migrate(con: apsw.Connection, migrations: Sequence[Migration]) -> list[str]:
    """Apply the migrations this database has not seen, in order; return their names."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    applied = applied_migrations(con)
    done = []
    for migration in migrations:
        if migration.name in applied:
            continue
        with transaction(con):
            # Another process may have applied it while we waited for the write lock.
            if con.execute("SELECT 1 FROM migrations WHERE name = ?", (migration.name,)).fetchone():
                continue
            con.execute(migration.sql)
            con.execute(
                "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, time.time()),
            )
        done.append(migration.name)
    return done


def applied_migrations(con: apsw.Connection) -> set[str]:
    return {str(row[0]) for row in con.execute("SELECT name FROM migrations")}


@contextmanager
def transaction(con: apsw.Connection) -> Iterator[apsw.Connection]:
    """A write transaction taken up front (BEGIN IMMEDIATE), committed or rolled back."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        # SQLite may have rolled back already (after SQLITE_FULL, IOERR, BUSY, CORRUPT).
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


class SqliteConnection:
    """The state's connection to its SQLite file (see
    :class:`agentos.state.connection.Connection`): every failure of the file itself is a
    one-line error naming it. A write transaction takes SQLite's one write lock up front,
    so writers never interleave and :meth:`lock` has nothing to add."""

    dialect = "sqlite"

    def __init__(self, path: Path, migrations: Sequence[Migration] = SQLITE_MIGRATIONS) -> None:
        self.path = path
        self.where = str(path)
        self.raw = connect(path, migrations)

    def applied(self) -> set[str]:
        with guarded(self.path):
            return applied_migrations(self.raw)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with guarded(self.path):
            return self.raw.execute(sql, tuple(args)).fetchall()

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        with guarded(self.path):
            self.raw.execute(sql, tuple(args)).fetchall()
            return int(self.raw.changes())

    def write_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with guarded(self.path):
            self.raw.executemany(sql, [tuple(r) for r in rows])

    @contextmanager
    def begin(self) -> Iterator[None]:
        with guarded(self.path), transaction(self.raw):
            yield

    def lock(self, name: str) -> None:
        """Writers are one at a time already (BEGIN IMMEDIATE)."""

    def reconnect(self) -> None:
        """A file does not go away as a server does: nothing to do."""

    def close(self) -> None:
        self.raw.close()
