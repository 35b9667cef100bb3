"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package (scripts/setup
installs it), a cluster made by ``initdb`` in a temporary directory and started by
``pg_ctl``, on a Unix socket only (``listen_addresses=''``), as an unprivileged user (the
``postgres`` user when the tests run as root: the server refuses root).

Local connections are trusted, but for the role ``secret``, whose password is checked
(the tests of wrong credentials). The server logs every statement of a database that asks
for it (``ALTER DATABASE ... SET log_statement``), each line with its process and
application: the test that a follower issues no query reads them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SECRET_ROLE = "secret"
SECRET_PASSWORD = "hunter2-not-this"
_TEMPLATE = "agentos_template"
_SHARED = "agentos_shared"


def bindir() -> Path | None:
    """Where the server's programs are (Debian puts them off PATH), or None."""
    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(found) / "initdb").exists():
            return Path(found)
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


_PREFIX = "agentos-pg-"
_OWNER = "owner.pid"


def remove_orphans(programs: Path) -> list[Path]:
    """Stop and remove the servers of test processes that were killed before their
    teardown (their owner's pid, written at start, is gone); the folders removed."""
    removed = []
    for root in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            owner = int((root / _OWNER).read_text())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{owner}").exists():
            continue
        server = Server.__new__(Server)
        server.programs, server.root, server.data = programs, root, root / "data"
        server.as_root, server._admin = os.geteuid() == 0, {}
        server.remove()
        removed.append(root)
    return removed


class Server:
    """One PostgreSQL cluster of the test session (or of one test that kills it)."""

    def __init__(self, programs: Path) -> None:
        self.programs = programs
        self.root = Path(tempfile.mkdtemp(prefix=_PREFIX))
        (self.root / _OWNER).write_text(str(os.getpid()))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.as_root = os.geteuid() == 0
        self.emptying: str | None = None
        self._admin: dict[str, Any] = {}
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=reject",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"local all {SECRET_ROLE} scram-sha-256\nlocal all all trust\n")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{self.root}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 200\n"
                "log_line_prefix = '%m [%p] %d %a: '\n"
            )
        self.start()
        self.sql(
            f"CREATE ROLE {SECRET_ROLE} LOGIN PASSWORD '{SECRET_PASSWORD}'",
        )
        self.template_ready = False

    def _run(self, program: str, *args: str) -> None:
        argv = [str(self.programs / program), *args]
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "start")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server: at once (``immediate``: as a crash, no goodbye to clients, and
        what was committed last may be lost, this server not waiting on the disk), or
        ``fast`` (its clients cut off, everything committed kept)."""
        for con in self._admin.values():
            con.close()
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, database: str, user: str = "postgres", password: str | None = None) -> str:
        who = user if password is None else f"{user}:{password}"
        return f"postgresql://{who}@/{database}?host={self.root}"

    def sql(
        self, statement: str, args: Sequence[Any] = (), database: str = "postgres"
    ) -> list[Any]:
        """Run ``statement`` as the superuser on ``database`` (one connection kept per
        database)."""
        import psycopg

        con = self._admin.get(database)
        if con is None or con.closed:
            con = self._admin[database] = psycopg.connect(
                self.url(database), autocommit=True, application_name="pytest"
            )
        cur = con.execute(statement, args)
        return cur.fetchall() if cur.description is not None else []

    def database(self, *, migrated: bool = True) -> str:
        """A new database: its schema already AgentOS's (copied from a template made once),
        or empty."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        if migrated:
            self._template()
            self.sql(f"CREATE DATABASE {name} TEMPLATE {_TEMPLATE}")
        else:
            self.sql(f"CREATE DATABASE {name}")
        return name

    def fresh(self) -> str:
        """The session's shared database, every AgentOS table in it emptied (and its ids
        started again): much cheaper than a database per test."""
        if self.emptying is None:
            self.sql(f"CREATE DATABASE {_SHARED}")
            from agentos.state.location import StateLocation
            from agentos.state.postgres import PostgresConnection

            PostgresConnection(StateLocation("postgresql", url=self.url(_SHARED))).close()
            tables = self.sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'migrations'",
                database=_SHARED,
            )
            sequences = self.sql(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'",
                database=_SHARED,
            )
            # Foreign keys are not checked while emptying (replica role: no triggers).
            self.emptying = "; ".join(
                [
                    "SET session_replication_role = replica",
                    *(f"DELETE FROM {t}" for (t,) in tables),
                    *(f"ALTER SEQUENCE {q} RESTART" for (q,) in sequences),
                    "SET session_replication_role = DEFAULT",
                ]
            )
        self.sql(self.emptying, database=_SHARED)
        return _SHARED

    def _template(self) -> None:
        if self.template_ready:
            return
        from agentos.state.location import StateLocation
        from agentos.state.postgres import PostgresConnection

        self.sql(f"CREATE DATABASE {_TEMPLATE}")
        PostgresConnection(StateLocation("postgresql", url=self.url(_TEMPLATE))).close()
        self.template_ready = True

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def remove(self) -> None:
        for con in self._admin.values():
            con.close()
        if self.running():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
