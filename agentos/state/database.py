"""AgentOS state in SQLite (through apsw): connections and ordered, named migrations.

``state.db`` holds runs, agents and guardian interventions. Each migration runs in its
own transaction and is recorded by name in ``migrations``, so a database is brought up
to date by applying the names it has not seen, in order.

A damaged database, or one another process holds past the busy timeout, is a one-line
error naming the file (:mod:`agentos.state.errors`); an empty file is a new database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw

from agentos.state.errors import busy_timeout, guarded, locked


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str


STATE_MIGRATIONS: list[Migration] = [
    Migration(
        "001_runs",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            request TEXT NOT NULL,
            repo TEXT NOT NULL,
            target_branch TEXT,
            base_commit TEXT,
            status TEXT NOT NULL,
            decision TEXT,
            receipt TEXT,
            pid INTEGER,
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            message TEXT
        );
        CREATE INDEX runs_status ON runs(status);
        CREATE TABLE run_agents (
            run_id TEXT NOT NULL REFERENCES runs(id),
            agent TEXT NOT NULL,
            version TEXT NOT NULL,
            card TEXT,
            branch TEXT,
            worktree TEXT,
            session TEXT,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER,
            restarts INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            ended_at REAL,
            PRIMARY KEY (run_id, agent)
        );
        """,
    ),
    Migration(
        "002_interventions",
        """
        CREATE TABLE interventions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            receipt TEXT,
            at REAL NOT NULL
        );
        CREATE INDEX interventions_run ON interventions(run_id, agent);
        """,
    ),
    Migration(
        "003_runs_pid_start",
        # When the orchestrator's process started: with the pid, it tells a live
        # orchestrator from an unrelated process that reused its pid.
        "ALTER TABLE runs ADD COLUMN pid_start TEXT",
    ),
    Migration(
        "004_review_before_merge",
        # What a run needs to be reviewed and merged later (``run --no-merge``, ``runs
        # merge``): each agent's last gate result (JSON), the commit that gate judged, its
        # gate receipts (JSON list), and the run's options (JSON).
        """
        ALTER TABLE run_agents ADD COLUMN gate TEXT;
        ALTER TABLE run_agents ADD COLUMN gated_commit TEXT;
        ALTER TABLE run_agents ADD COLUMN receipts TEXT;
        ALTER TABLE runs ADD COLUMN options TEXT;
        """,
    ),
    Migration(
        "005_workflows",
        # Workflow executions and their tasks (agentos.workflows). A task's words and names
        # (its similarity features) are kept so that a new task is compared with thousands
        # of live ones through an index, not by reading them all.
        """
        CREATE TABLE executions (
            id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            definition TEXT NOT NULL,
            repo TEXT NOT NULL,
            parameters TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            created_at REAL NOT NULL,
            ended_at REAL
        );
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            execution TEXT NOT NULL REFERENCES executions(id),
            phase INTEGER NOT NULL,
            description TEXT NOT NULL,
            status TEXT NOT NULL,
            parent INTEGER,
            creator TEXT NOT NULL,
            duplicate_of INTEGER,
            related_to INTEGER,
            similarity REAL,
            run_id TEXT,
            message TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            words TEXT NOT NULL,
            names TEXT NOT NULL
        );
        CREATE INDEX tasks_by_execution ON tasks(execution, phase, status);
        CREATE TABLE task_terms (
            task INTEGER NOT NULL,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            nwords INTEGER NOT NULL,
            nnames INTEGER NOT NULL
        );
        CREATE INDEX task_terms_lookup
            ON task_terms(execution, phase, term, task, nwords, nnames);
        CREATE TABLE results (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            execution TEXT NOT NULL REFERENCES executions(id),
            task INTEGER,
            summary TEXT NOT NULL,
            validated INTEGER NOT NULL,
            detail TEXT NOT NULL,
            at REAL NOT NULL
        );
        """,
    ),
    Migration(
        "006_events",
        # One stream of what happened, for whoever watches (agentos events, a dashboard):
        # each event with its source (run, guardian, eval, evolve, synthesis, workflow),
        # its run or task, and a timestamp. ``seq`` is the event's place in its run.
        """
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            run TEXT,
            seq INTEGER,
            task INTEGER,
            agent TEXT,
            status TEXT,
            message TEXT NOT NULL
        );
        CREATE INDEX events_by_run ON events(run, id);
        """,
    ),
    Migration(
        "007_agent_usage",
        # What each agent used (JSON: tokens, cost), as it reports it: kept as its output
        # streams, so that a live run shows it too.
        "ALTER TABLE run_agents ADD COLUMN usage TEXT",
    ),
    Migration(
        "008_dedup_frequencies",
        # Deduplication weighs a term by how many live tasks of the execution and phase
        # hold it (issue 37): the counts kept up to date with task_terms, in the same
        # transactions; the row whose term is '' counts the live tasks themselves. And the
        # vectors of the tasks an Ollama model embedded (workflows.dedup.embeddings).
        """
        CREATE TABLE task_term_counts (
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            tasks INTEGER NOT NULL,
            PRIMARY KEY (execution, phase, term)
        ) WITHOUT ROWID;
        INSERT INTO task_term_counts (execution, phase, term, tasks)
            SELECT execution, phase, term, COUNT(*) FROM task_terms
            GROUP BY execution, phase, term;
        INSERT INTO task_term_counts (execution, phase, term, tasks)
            SELECT execution, phase, '', COUNT(DISTINCT task) FROM task_terms
            GROUP BY execution, phase;
        CREATE TABLE task_embeddings (
            task INTEGER PRIMARY KEY,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            model TEXT NOT NULL,
            vector BLOB NOT NULL
        );
        CREATE INDEX task_embeddings_by_scope ON task_embeddings(execution, phase, model);
        """,
    ),
]


def connect(path: Path, migrations: Sequence[Migration] = STATE_MIGRATIONS) -> apsw.Connection:
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
    applied = {row[0] for row in con.execute("SELECT name FROM migrations")}
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


class Store:
    """A connection to a workspace's state.db for one process, safe to share between
    threads (an apsw connection refuses a second thread while a call is in progress, so
    every use takes a lock). A damaged state.db, or one another process holds past the
    busy timeout, raises a one-line error naming it, on opening or on any use."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.con: apsw.Connection = connect(db)
        self._lock = threading.RLock()

    @contextmanager
    def _read(self) -> Iterator[None]:
        with self._lock, guarded(self.db):
            yield

    @contextmanager
    def _write(self) -> Iterator[None]:
        with self._read(), transaction(self.con):
            yield

    def close(self) -> None:
        with self._lock:
            self.con.close()


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
