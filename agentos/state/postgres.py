"""The state on a PostgreSQL server (through psycopg 3): connections, their failures as
one-line errors that name the URL (password masked) and the fix, migrations under an
advisory lock, ``LISTEN`` for followers, and a pool for the long-lived processes (the
dashboard, the MCP server).

Imported only when the state is PostgreSQL (:func:`agentos.state.database.open_connection`),
so that a SQLite workspace never pays for psycopg.

The stores' SQL is written once for both backends with ``?`` placeholders; here each
becomes psycopg's ``%s`` (and a literal ``%`` is doubled), once per statement text.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg import errors as pg_errors

from agentos.errors import StateUnavailable
from agentos.state.connection import POLL, ConnectionLost, refuse_newer
from agentos.state.location import ENV, StateLocation
from agentos.state.migrations import POSTGRES_MIGRATIONS, Migration

CONNECT_TIMEOUT = 5  # seconds to reach the server before it counts as unreachable
APPLICATION = "agentos"  # application_name: how the server's views and logs name us
_MIGRATE_LOCK = 0x61676E74_6F73  # pg_advisory_lock key: one process migrates at a time
_GUIDE = "docs/state.md"

_migrated: set[str] = set()  # URLs whose schema this process brought up to date
_pools: dict[str, Any] = {}  # URL -> psycopg_pool.ConnectionPool, where pooling is on
_pools_lock = threading.Lock()
_pooling = False


# -- connecting ---------------------------------------------------------------------------


def connect(location: StateLocation) -> psycopg.Connection[Any]:
    """A new connection in autocommit mode (a transaction is asked for when it is needed);
    :class:`StateUnavailable` (or :class:`ConnectionLost`, when the server cannot be
    reached) naming the URL masked and the fix."""
    assert location.url is not None
    try:
        return psycopg.connect(
            location.url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            application_name=APPLICATION,
        )
    except psycopg.ProgrammingError as exc:  # libpq cannot read the URL
        raise StateUnavailable(
            f"libpq cannot read this URL ({_first_line(exc, location)}): write it as "
            "postgresql://USER@HOST:PORT/DB",
            file=location.masked,
        ) from None
    except psycopg.OperationalError as exc:
        raise refused(location, exc) from None


def refused(location: StateLocation, exc: psycopg.Error) -> StateUnavailable:
    """Why the server did not take a connection, and what fixes it, in one line."""
    reason = _first_line(exc, location)
    low = reason.lower()
    where = location.masked
    missing = re.search(r'database "([^"]*)" does not exist', reason)
    if missing:
        name = missing.group(1)
        return StateUnavailable(
            f"the database {name} does not exist on this server: create it, owned by the "
            f"user AgentOS connects as (createdb -O USER {name}; see {_GUIDE})",
            file=where,
        )
    if (
        "authentication failed" in low
        or "no password supplied" in low
        or ("role" in low and "does not exist" in low)
        or "password" in low
    ):
        return StateUnavailable(
            f"the server refused the credentials ({reason}): give the password in {ENV}, "
            "PGPASSWORD or ~/.pgpass (never in agentos.yaml), or create the user "
            f"(see {_GUIDE})",
            file=where,
        )
    return ConnectionLost(
        f"cannot reach the server ({reason}): start it, or correct the host and port in "
        f"{ENV} or state: in agentos.yaml",
        file=where,
    )


def _first_line(exc: BaseException, location: StateLocation) -> str:
    """libpq's reason, on one line, without what the message around it says already."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^(connection failed: |connection is bad: )+", "", text)
    if " failed: FATAL:" in text:  # the server answered: its reason is enough
        text = text.split(" failed: FATAL:", 1)[1]
    text = re.sub(r'^connection to server on socket "([^"]*)" failed: ', r"socket \1: ", text)
    if location.url:  # libpq never echoes a password; should a future one, it is masked
        for secret in _secrets(location.url):
            text = text.replace(secret, "***")
    return text.strip()


def _secrets(url: str) -> list[str]:
    """The password(s) ``url`` holds, as given and as decoded."""
    parts = urlsplit(url)
    found = [parts.password or ""]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "password"]
    raw = parts.netloc.rpartition("@")[0].partition(":")[2]
    return [s for s in {*found, raw} if s]


# -- the connection the stores use ---------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """``?`` placeholders as ``%s``, a literal ``%`` doubled (none is in a string literal
    of the stores' SQL: their values are parameters)."""
    out = []
    quoted = False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
        if ch == "%":
            out.append("%%")
        elif ch == "?" and not quoted:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


def _values(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(a.value if isinstance(a, Enum) else a for a in args)


class PostgresConnection:
    """The state's connection to PostgreSQL (see :class:`agentos.state.connection.Connection`).
    A connection the server dropped raises :class:`ConnectionLost`; errors in the SQL
    (bugs) pass through as they are."""

    dialect = "postgresql"

    def __init__(
        self, location: StateLocation, migrations: Sequence[Migration] = POSTGRES_MIGRATIONS
    ) -> None:
        self.location = location
        self.where = location.masked
        self._pool = _pool(location) if _pooling else None
        self.raw = self._open()
        try:
            ensure_migrated(self, migrations)
        except BaseException:
            self.close()
            raise

    def _open(self) -> psycopg.Connection[Any]:
        if self._pool is None:
            return connect(self.location)
        try:
            conn: psycopg.Connection[Any] = self._pool.getconn(timeout=CONNECT_TIMEOUT)
        except Exception as exc:  # psycopg_pool.PoolTimeout: the pool could not connect
            connect(self.location)  # says why, as one line
            raise ConnectionLost(str(exc), file=self.where) from None
        return conn

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError as exc:
            if self.raw.closed or self.raw.broken:
                raise ConnectionLost(_first_line(exc, self.location), file=self.where) from exc
            if isinstance(exc, pg_errors.InsufficientPrivilege):
                raise self._no_privilege(exc) from None
            raise
        except pg_errors.InsufficientPrivilege as exc:
            raise self._no_privilege(exc) from None

    def _no_privilege(self, exc: psycopg.Error) -> StateUnavailable:
        return StateUnavailable(
            f"the user may not do this ({_first_line(exc, self.location)}): AgentOS's user "
            f"must own the database (ALTER DATABASE ... OWNER TO ...; see {_GUIDE})",
            file=self.where,
        )

    def applied(self) -> set[str]:
        with self._guard():
            exists = self.raw.execute("SELECT to_regclass('migrations') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return set()
            return {str(r[0]) for r in self.raw.execute("SELECT name FROM migrations")}

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard():
            cur = self.raw.execute(_pg(sql), _values(args))
            return cur.fetchall() if cur.description is not None else []

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._guard():
            cur = self.raw.execute(_pg(sql), _values(args))
            if cur.description is not None:
                cur.fetchall()
            return max(cur.rowcount, 0)

    def write_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._guard(), self.raw.cursor() as cur:
            cur.executemany(_pg(sql), [_values(r) for r in rows])

    @contextmanager
    def begin(self) -> Iterator[None]:
        with self._guard(), self.raw.transaction():
            yield

    def lock(self, name: str) -> None:
        """Inside a transaction: wait for, then hold until its end, the lock named ``name``
        (every writer that takes it, on any machine, goes one at a time)."""
        with self._guard():
            self.raw.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))

    def reconnect(self) -> None:
        self._release(broken=True)
        self.raw = self._open()

    def _release(self, *, broken: bool = False) -> None:
        if self._pool is not None:
            if broken:
                self.raw.close()
            self._pool.putconn(self.raw)
        else:
            self.raw.close()

    def close(self) -> None:
        self._release(broken=self.raw.broken)


def ensure_migrated(con: PostgresConnection, migrations: Sequence[Migration]) -> None:
    """Bring the database's schema up to date, once per process: each migration it has not
    recorded, in order, each in its own transaction, one process at a time (an advisory
    lock). A database with a migration this AgentOS does not know is refused."""
    known = [m.name for m in migrations]
    if con.location.url in _migrated:
        return
    refuse_newer(con, known)
    if set(known) <= con.applied():
        _migrated.add(str(con.location.url))
        return
    with con._guard():
        raw = con.raw
        raw.execute("SELECT pg_advisory_lock(%s)", (_MIGRATE_LOCK,))
        try:
            raw.execute(
                "CREATE TABLE IF NOT EXISTS migrations "
                "(name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            applied = con.applied()
            for migration in migrations:
                if migration.name in applied:
                    continue
                with raw.transaction():
                    raw.execute(migration.sql)
                    raw.execute(
                        "INSERT INTO migrations (name, applied_at) VALUES (%s, %s)",
                        (migration.name, time.time()),
                    )
        finally:
            if not raw.broken:
                raw.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATE_LOCK,))
    _migrated.add(str(con.location.url))


# -- listening -----------------------------------------------------------------------------


class PostgresListener:
    """A connection of its own that ``LISTEN``s on one channel; :meth:`wait` blocks on its
    socket until the server announces something, issuing no query meanwhile. A lost
    connection is opened again (and ``[POLL]`` handed back: what was announced while it was
    gone is lost, so the follower looks itself)."""

    def __init__(self, location: StateLocation, channel: str) -> None:
        assert re.fullmatch(r"[a-z_]+", channel), channel
        self.location = location
        self.channel = channel
        self.raw: psycopg.Connection[Any] | None = None
        self._listen()

    def _listen(self) -> None:
        self.raw = connect(self.location)
        self.raw.execute(f"LISTEN {self.channel}")

    def wait(self, timeout: float) -> list[str]:
        if self.raw is None or self.raw.closed:
            try:
                self._listen()
            except ConnectionLost:
                time.sleep(timeout)
                return []
            return [POLL]
        try:
            return [n.payload for n in self.raw.notifies(timeout=timeout, stop_after=1)]
        except psycopg.OperationalError:
            self.raw.close()
            return []

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()


# -- pooling -------------------------------------------------------------------------------


def use_pool() -> None:
    """From now on, this process's stores borrow their connections from one pool per URL
    (the dashboard and the MCP server open a store per request)."""
    global _pooling
    _pooling = True


def _pool(location: StateLocation) -> Any:
    from psycopg_pool import ConnectionPool

    assert location.url is not None
    with _pools_lock:
        pool = _pools.get(location.url)
        if pool is None:
            pool = ConnectionPool(
                location.url,
                min_size=1,
                max_size=16,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": CONNECT_TIMEOUT,
                    "application_name": APPLICATION,
                },
                name="agentos-state",
                open=True,
            )
            _pools[location.url] = pool
        return pool
