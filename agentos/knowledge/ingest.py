"""Reading files into chunks for the knowledge store, in a second process when it pays.

Indexing runs FTS5 and its Python tokenizer in the process that holds the database, and
that process is busy for as long as FTS5 is. Reading, hashing and chunking the next files
is independent work: for a large add it runs in a worker process, ``python -m
agentos.knowledge.ingest``, which reads the list of files on stdin and writes the prepared
files back on stdout, group by group, in order, a bounded number of groups ahead of the
indexer. On two cores the two overlap, and memory stays bounded. Small adds, and machines
with one core, prepare inline; so does the rest of an add whose worker died. (A plain
subprocess rather than ``multiprocessing``: it never re-imports the caller's main module,
and it is safe to start from a threaded caller.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import PurePath
from queue import Queue
from typing import IO, NamedTuple

from agentos.knowledge.chunking import chunk_text, language_of
from agentos.knowledge.files import FileEntry, decode

log = logging.getLogger(__name__)

PARALLEL_FILES = 200  # a worker process is used from this many files to read
PARALLEL_BYTES = 4_000_000  # ... holding at least this many bytes
GROUP_FILES = 32  # files per message from the worker
AHEAD_GROUPS = 64  # messages the worker may be ahead of the indexer (bounds memory)


class Row(NamedTuple):
    """One chunk, ready to index (a tuple: cheap to send between processes)."""

    start_line: int
    end_line: int
    sha256: str  # of the text the index holds for it: path label, symbols, body
    symbols: str
    text: str


class Prepared(NamedTuple):
    entry: FileEntry
    sha256: str  # of the whole file
    rows: list[Row] | None  # None: binary, nothing to index
    touch_only: bool  # content unchanged: record the new size and mtime only
    language: str


class Unreadable(NamedTuple):
    entry: FileEntry
    reason: str


Outcome = Prepared | Unreadable


def prepare(entry: FileEntry, old_sha256: str | None) -> Outcome:
    """Read, hash and chunk one file; unchanged content is only noted."""
    try:
        with open(entry.path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return Unreadable(entry, exc.strerror or str(exc))
    digest = hashlib.sha256(data).hexdigest()
    if digest == old_sha256:
        return Prepared(entry, digest, None, True, "")
    text = decode(data)
    if text is None:
        return Prepared(entry, digest, None, False, "binary")
    language = language_of(PurePath(entry.path))
    rows = [
        Row(
            c.start_line,
            c.end_line,
            hashlib.sha256(f"{entry.label}\0{c.symbols}\0{c.text}".encode()).hexdigest(),
            c.symbols,
            c.text,
        )
        for c in chunk_text(text, language)
    ]
    return Prepared(entry, digest, rows, False, language)


Work = Sequence[tuple[FileEntry, "str | None"]]  # files, with the hash they had


def prepare_all(todo: Work) -> Iterator[Outcome]:
    """``prepare`` for every (file, previous hash), in order."""
    big = (
        len(todo) >= PARALLEL_FILES
        and bool(sys.executable)
        and _cores() > 1
        and sum(e.size for e, _ in todo) >= PARALLEL_BYTES
    )
    done = 0
    if big:
        for outcome in _in_worker(todo):
            done += 1
            yield outcome
    for entry, old in todo[done:]:
        yield prepare(entry, old)


def _in_worker(todo: Work) -> Iterator[Outcome]:
    """Outcomes from a worker process, in order, until it finishes or fails.

    A thread drains the worker's pipe into a bounded queue, so that the worker keeps
    going while the caller indexes (a pipe alone would hold it one group ahead)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdout = proc.stdout
    groups: Queue[list[Outcome] | None] = Queue(maxsize=AHEAD_GROUPS)

    def drain() -> None:
        try:
            while True:
                groups.put(pickle.load(stdout))
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            pass  # finished, killed or broken: the caller prepares whatever is left
        finally:
            groups.put(None)

    reader = threading.Thread(target=drain, name="kb-ingest-reader", daemon=True)
    try:
        # The worker reads all of its input before it writes: no deadlock.
        pickle.dump(list(todo), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        proc.stdin.close()
        reader.start()
        while (group := groups.get()) is not None:
            yield from group
    except OSError as exc:
        log.warning("knowledge store worker failed, preparing files here: %s", exc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if reader.is_alive():
            while groups.get() is not None:  # let a reader blocked on a full queue finish
                pass
        proc.wait()
        stdout.close()


def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The worker: read the work, write the outcomes group by group."""
    todo: list[tuple[FileEntry, str | None]] = pickle.load(stdin)
    for i in range(0, len(todo), GROUP_FILES):
        group = [prepare(entry, old) for entry, old in todo[i : i + GROUP_FILES]]
        pickle.dump(group, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


if __name__ == "__main__":
    # Run the module under its own name, so that what it pickles names agentos.knowledge.ingest.
    from agentos.knowledge import ingest

    ingest._serve(sys.stdin.buffer, sys.stdout.buffer)
