"""Copying a workspace's SQLite state into an empty PostgreSQL database
(``agentos state migrate --to URL``, with :mod:`agentos.receipts.transfer` for the
receipts).

Everything is copied in one transaction on the target: a copy that fails, or whose counts
or checks do not come out right, leaves the target as it was (empty). A target that
already holds AgentOS state is refused. Records from before hosts were recorded get this
machine's host id (their pids and paths are this machine's). The guardian's memory and the
hosts' heartbeats are not copied: they describe the moment, and the next cycle and
heartbeat write them afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos.errors import BadInput, OperationFailed
from agentos.state.connection import Connection
from agentos.state.host import host_id
from agentos.state.location import StateLocation

# The tables copied, parents before children; those whose ids a sequence makes after them.
TABLES = (
    "runs",
    "run_agents",
    "interventions",
    "executions",
    "tasks",
    "task_terms",
    "task_term_counts",
    "task_embeddings",
    "results",
    "events",
)
IDENTITIES = ("interventions", "tasks", "results", "events")
_HOSTED = ("runs", "run_agents")  # a host id is given to their records that have none
_BATCH = 1000


@dataclass(frozen=True)
class Rows:
    """Rows of a table the caller adds to the copy (the receipts), by column name."""

    table: str
    columns: tuple[str, ...]
    rows: Sequence[Sequence[Any]]


@dataclass
class Copied:
    """What was copied: rows per table (each counted again in the target), and what the
    caller's check of the target found."""

    target: str
    counts: dict[str, int] = field(default_factory=dict)
    checked: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "counts": self.counts, **self.checked}


def copy_state(
    source: Path,
    target: StateLocation,
    extra: Sequence[Rows] = (),
    check: Callable[[Connection], dict[str, Any]] | None = None,
) -> Copied:
    """Copy the SQLite state at ``source`` (and the ``extra`` rows) into the empty
    PostgreSQL database at ``target``, count every table again there, and run ``check`` on
    the target before anything is committed (it raises to undo the copy)."""
    from agentos.state.database import open_connection
    from agentos.state.sqlite import connect

    if target.backend != "postgresql":
        raise BadInput(f"{target.masked} is not a PostgreSQL URL", field="--to")
    tables = {}
    if source.exists():
        sqlite = connect(source)  # brought up to date first: every column is there
        try:
            tables = {name: _read(sqlite, name) for name in TABLES}
        finally:
            sqlite.close()
    con = open_connection(target)
    copied = Copied(target.masked)
    try:
        with con.begin():
            con.lock("agentos state migrate")
            held = {
                name: int(con.rows(f"SELECT COUNT(*) FROM {name}")[0][0])
                for name in (*TABLES, *(r.table for r in extra))
            }
            if any(held.values()):
                found = ", ".join(f"{name} {n}" for name, n in held.items() if n)
                raise BadInput(
                    f"already holds AgentOS state ({found}): migrate into an empty database "
                    "(a new one: createdb -O USER DB)",
                    file=target.masked,
                )
            me = host_id()
            for name in TABLES:
                columns, rows = tables.get(name, ((), []))
                if name in _HOSTED and "host" in columns:
                    at = columns.index("host")
                    rows = [(*r[:at], r[at] or me, *r[at + 1 :]) for r in rows]
                _insert(con, name, columns, rows)
                copied.counts[name] = len(rows)
            for more in extra:
                _insert(con, more.table, more.columns, more.rows)
                copied.counts[more.table] = len(more.rows)
            for name in IDENTITIES:
                con.rows(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                    f"COALESCE((SELECT MAX(id) FROM {name}), 0) + 1, false)"
                )
            for name, expected in copied.counts.items():
                there = int(con.rows(f"SELECT COUNT(*) FROM {name}")[0][0])
                if there != expected:
                    raise OperationFailed(
                        f"{name}: {expected} rows copied, {there} found in the target; "
                        "nothing was migrated",
                        file=target.masked,
                    )
            if check is not None:
                copied.checked = check(con)
    finally:
        con.close()
    return copied


def _read(con: Any, table: str) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """A SQLite table's columns, by name, and its rows."""
    columns = tuple(str(row[1]) for row in con.execute(f"PRAGMA table_info({table})"))
    return columns, con.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()


def _insert(con: Connection, table: str, columns: tuple[str, ...], rows: Iterable[Any]) -> None:
    rows = list(rows)
    if not rows:
        return
    marks = ", ".join("?" for _ in columns)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
    for start in range(0, len(rows), _BATCH):
        con.write_many(sql, rows[start : start + _BATCH])
