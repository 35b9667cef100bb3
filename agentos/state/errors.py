"""Failures of AgentOS's SQLite databases as one-line errors that name the file.

A database that is not one (truncated, overwritten, another kind of file) raises
:class:`DatabaseCorrupt`. One that another process holds past the busy timeout raises
:class:`DatabaseLocked`, naming the process where the system tells: SQLite locks with
``fcntl``, so ``/proc/locks`` lists whoever holds a write lock on the database or on its
``-shm`` file (WAL mode), with its pid. A database that cannot be opened, read or written
at all (a directory, no permission, a full disk) raises :class:`BadInput`.

A database that only caches what can be rebuilt (the knowledge store) is not reported but
set aside (:func:`set_aside`) and started afresh.
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from agentos.errors import BadInput, DatabaseCorrupt, DatabaseLocked

# How long a connection waits for a lock another process holds. The variable overrides it
# (as AGENTOS_TMUX_SOCKET overrides the tmux socket): tests, and a workspace on a slow disk.
BUSY_TIMEOUT_ENV = "AGENTOS_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT = 10.0
_SHOWN_COMMAND = 80  # characters of a holder's command line in a message


def busy_timeout() -> float:
    """Seconds a connection waits for a lock (``AGENTOS_BUSY_TIMEOUT``, default 10)."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_BUSY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 3600:
        raise BadInput(f"must be seconds between 0 and 3600, not {raw!r}", field=BUSY_TIMEOUT_ENV)
    return value


@contextmanager
def guarded(path: Path) -> Iterator[None]:
    """Turn SQLite's errors about the database at ``path`` itself into one-line errors;
    errors in the SQL (bugs) pass through unchanged."""
    try:
        yield
    except apsw.BusyError as exc:
        raise locked(path) from exc
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise corrupt(path, exc) from exc
    except (
        apsw.CantOpenError,
        apsw.IOError,
        apsw.FullError,
        apsw.ReadOnlyError,
        apsw.PermissionsError,
    ) as exc:
        raise BadInput(f"cannot use this database ({exc})", file=path) from exc


def corrupt(path: Path, exc: apsw.Error) -> DatabaseCorrupt:
    return DatabaseCorrupt(
        f"damaged or not a SQLite database ({exc}); move it aside (to {path.name}.broken, "
        "say) and AgentOS starts a new, empty one",
        file=path,
    )


def locked(path: Path) -> DatabaseLocked:
    """The error for ``path`` held by another process, naming that process if it can."""
    named = "; ".join(_describe(pid) for pid in holders(path))
    return DatabaseLocked(
        f"locked by {f'another process ({named})' if named else 'another process'} past the "
        f"{busy_timeout():g} s busy timeout; let it finish or end it, then try again",
        file=path,
    )


def holders(path: Path) -> list[int]:
    """The processes other than this one holding a write lock on the database at ``path``
    or its ``-shm`` file, from ``/proc/locks`` (empty where there is none)."""
    files = set()
    for candidate in (path, Path(f"{path}-shm")):
        try:
            st = candidate.stat()
        except OSError:
            continue
        files.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    pids: list[int] = []
    for line in table.splitlines():
        # "1: POSIX  ADVISORY  WRITE 6353 fe:00:3252335 120 120"; "->" marks a waiter
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[3] != "WRITE":
            continue
        try:
            pid = int(fields[4])
            major, minor, ino = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
        except ValueError:
            continue
        if key in files and pid > 0 and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return pids


def _describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    # one line whatever the arguments hold (python -c with a script, say)
    command = " ".join(b" ".join(argv).decode("utf-8", "replace").split())
    if len(command) > _SHOWN_COMMAND:
        command = command[: _SHOWN_COMMAND - 1] + "…"
    return f"pid {pid}: {command}" if command else f"pid {pid}"


def inode(path: Path) -> int | None:
    """The inode of the file at ``path`` (None when there is none): taken before opening
    a database, it tells later whether the file there is still the one opened."""
    try:
        return path.stat().st_ino
    except OSError:
        return None


def set_aside(path: Path, opened: int | None) -> Path | None:
    """Move the damaged database at ``path``, with its WAL, to ``NAME.broken`` (replacing
    an older one there), so that the next connection starts a new database; where it went.

    ``opened`` is the inode of the file that was found damaged (:func:`inode`, taken
    before it was opened). When the file at ``path`` is another one by now, another process
    set it aside first, and nothing is moved: None."""
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the kernel frees it if this process dies
        if opened is None or inode(path) != opened:
            return None
        aside = path.with_name(f"{path.name}.broken")
        os.replace(path, aside)
        wal, aside_wal = Path(f"{path}-wal"), Path(f"{aside}-wal")
        if wal.exists():
            os.replace(wal, aside_wal)  # its frames belong to the damaged file
        else:
            aside_wal.unlink(missing_ok=True)
        Path(f"{path}-shm").unlink(missing_ok=True)
        return aside
    finally:
        os.close(fd)
