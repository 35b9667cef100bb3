"""The knowledge store: files chunked into an SQLite FTS5 index (through apsw).

It lives in ``.agentos/knowledge.db``. Files are split into line-addressed chunks
(:mod:`agentos.knowledge.chunking`); each chunk is one row of the FTS5 table ``kb`` with three
columns, weighted by bm25: ``path`` (the file's path below the directory it was added
from), ``symbols`` (the functions, classes or headings it defines) and ``body``. The
table's tokenizer (:mod:`agentos.knowledge.tokenizer`) splits ``parseDate`` and ``HTTPServer``
into their parts and stems them.

Adding is incremental: a file whose size and mtime are unchanged is not opened; a file
whose content hash is unchanged is not re-indexed; only the chunks of an edited file that
actually changed are re-indexed; files gone from an added directory are removed. Files
are written in batches, one transaction each; a large add reads and chunks files in a
worker process while this one indexes (:mod:`agentos.knowledge.ingest`).

Any text is a valid query (:mod:`agentos.knowledge.fts`); the orchestrator feeds each agent
:meth:`KnowledgeStore.context` for its request.

The index is derived from files, so a damaged database never stops a caller: it is set
aside as ``knowledge.db.broken`` and a new one started, with a warning on the log, and
what was asked is done again on the new one (a run adds its repository anyway).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import apsw

from agentos.errors import BadInput, DatabaseCorrupt, NotFound
from agentos.knowledge import files, fts, ingest, tokenizer
from agentos.knowledge.ingest import Prepared
from agentos.state.errors import guarded, inode, set_aside
from agentos.state.migrations import Migration
from agentos.state.sqlite import connect, migrate, transaction
from agentos.workspace.layout import Workspace

# bm25 weights of the columns path, symbols, body.
WEIGHTS = (10.0, 3.0, 1.0)
SNIPPET_MARKS = ("«", "»")
# Search ranks the best k + RERANK_EXTRA chunks by bm25, then weighs each by its file's
# prior (see fts.prior). A larger pool changed no known-item result on the standard
# library and costs search time (FTS5 sorts by rank under the LIMIT).
RERANK_EXTRA = 5
BATCH_FILES = 256
BATCH_BYTES = 4_000_000

KB_MIGRATIONS: list[Migration] = [
    Migration(
        "001_knowledge",
        f"""
        CREATE TABLE files (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            label TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            language TEXT NOT NULL,
            binary INTEGER NOT NULL DEFAULT 0,
            chunks INTEGER NOT NULL DEFAULT 0,
            indexed_at REAL NOT NULL
        );
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            language TEXT NOT NULL,
            sha256 TEXT NOT NULL
        );
        CREATE INDEX chunks_file ON chunks(file_id);
        CREATE VIRTUAL TABLE kb USING fts5(path, symbols, body,
            tokenize = '{tokenizer.TOKENIZE}');
        INSERT INTO kb(kb, rank) VALUES('rank', 'bm25({", ".join(map(str, WEIGHTS))})');
        """,
    ),
]


@dataclass(frozen=True)
class Hit:
    path: Path
    start_line: int
    end_line: int
    score: float  # bm25 with column weights, times the file's prior; higher is better
    snippet: str  # the matched terms are marked «like this»
    language: str

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


@dataclass(frozen=True)
class Context:
    text: str  # markdown: each chunk headed by its path and line range
    chunks: list[Hit]
    tokens: int  # estimated (see estimate_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "chunks": [h.as_dict() for h in self.chunks],
        }


@dataclass
class AddStats:
    seen: int = 0  # files found under the given paths
    read: int = 0  # files whose content was read (new, or size/mtime changed)
    added: int = 0  # new files indexed
    updated: int = 0  # changed files re-indexed
    removed: int = 0  # files gone from disk (or no longer wanted) removed from the index
    skipped: int = 0  # binary files (remembered, so an unchanged one is not read again)
    chunks: int = 0  # chunks written to the index
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # files that could not be read

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[int, int], None]
P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger(__name__)


def estimate_tokens(text: str) -> int:
    """A model-independent token estimate: one token per four characters."""
    return math.ceil(len(text) / 4)


def open_store(ws: Workspace) -> KnowledgeStore:
    """The knowledge store of workspace ``ws``."""
    return KnowledgeStore(ws.knowledge_db)


def open_connection(path: Path) -> apsw.Connection:
    """A connection to a knowledge database, with the tokenizer registered, migrated."""
    con = connect(path, [])
    try:
        with guarded(path):
            tokenizer.register(con)
            migrate(con, KB_MIGRATIONS)
    except BaseException:
        con.close()
        raise
    return con


def _healing(
    method: Callable[Concatenate[KnowledgeStore, P], R],
) -> Callable[Concatenate[KnowledgeStore, P], R]:
    """The method, done again on a new database when it finds this one damaged."""

    @functools.wraps(method)
    def healing(store: KnowledgeStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with guarded(store.path):
                return method(store, *args, **kwargs)
        except DatabaseCorrupt as exc:
            store._start_afresh(exc)
        with guarded(store.path):
            return method(store, *args, **kwargs)

    return healing


class KnowledgeStore:
    """The knowledge store in the SQLite database at ``path`` (created when missing, set
    aside and created again when damaged; see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._connect()
        except DatabaseCorrupt as exc:
            self._start_afresh(exc)

    def _connect(self) -> None:
        self._inode = inode(self.path)  # before opening: which file a failure is about
        self.con = open_connection(self.path)
        self._query_tokenizer = self.con.fts5_tokenizer("porter", [tokenizer.NAME, *tokenizer.BASE])
        # The same tokens without Python in the chain, for text with no case change.
        self._plain_tokenizer = self.con.fts5_tokenizer("porter", tokenizer.BASE)

    def _start_afresh(self, damage: DatabaseCorrupt) -> None:
        """Set the damaged database aside (unless another process did) and open a new one."""
        if hasattr(self, "con"):
            self.con.close()
        aside = set_aside(self.path, self._inode)
        if aside is not None:
            log.warning(
                "%s: damaged or not a SQLite database (%s); set aside as %s, a new "
                "knowledge store starts empty and indexes files as they are added",
                self.path,
                damage.__cause__ or damage,
                aside.name,
            )
        self._connect()

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- adding and removing ------------------------------------------------------------

    @_healing
    def add(self, paths: Sequence[Path], progress: Progress | None = None) -> AddStats:
        """Index files and directories; incremental (see the module docstring)."""
        started = time.perf_counter()
        stats = AddStats()
        found: dict[str, files.FileEntry] = {}
        known: dict[str, tuple[int, int, int, str]] = {}  # path -> id, size, mtime, sha
        gone: set[str] = set()
        for given in paths:
            path = Path(given).expanduser().resolve()
            if path.is_dir():
                for entry in files.walk(path):
                    found.setdefault(entry.path, entry)
                under = self._known_under(path)
                known.update(under)
                gone.update(under)
            elif path.is_file():
                single = files.entry_for(path)
                if single is not None:
                    found.setdefault(single.path, single)
                one = self._known_under(path)
                known.update(one)
                gone.update(one)
            else:
                vanished = self._known_under(path)
                if not vanished:
                    raise NotFound("no such file or directory", file=path)
                known.update(vanished)
                gone.update(vanished)
        gone.difference_update(found)
        stats.seen = len(found)
        todo = [
            e for p, e in found.items() if p not in known or known[p][1:3] != (e.size, e.mtime_ns)
        ]
        stats.removed = self._remove_ids([known[p][0] for p in sorted(gone) if p in known])
        total = len(todo)
        if progress:
            progress(0, total)
        # Reading and chunking are not moved to a thread: FTS5 calls the Python tokenizer,
        # and turns the tokens it returns into index entries, holding the GIL, so a
        # preparing thread mostly contends with it (measured no faster on 2 cores).
        for batch, done in self._batches(todo, known, stats):
            self._write(batch, stats)
            if progress:
                progress(done, total)
        stats.seconds = time.perf_counter() - started
        return stats

    @_healing
    def remove(self, paths: Iterable[Path]) -> int:
        """Remove the given files, and every file under the given directories; return how
        many files were removed. Paths need not exist on disk any more."""
        ids: list[int] = []
        for given in paths:
            ids.extend(v[0] for v in self._known_under(Path(given).expanduser().resolve()).values())
        return self._remove_ids(sorted(set(ids)))

    def _known_under(self, path: Path) -> dict[str, tuple[int, int, int, str]]:
        """Indexed files at ``path`` or below it: path -> (id, size, mtime_ns, sha256)."""
        base = str(path)
        lo = base.rstrip("/") + "/"
        rows = self.con.execute(
            "SELECT path, id, size, mtime_ns, sha256 FROM files"
            " WHERE path = ? OR (path >= ? AND path < ?)",
            (base, lo, lo[:-1] + "0"),
        )
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    def _batches(
        self,
        todo: list[files.FileEntry],
        known: dict[str, tuple[int, int, int, str]],
        stats: AddStats,
    ) -> Iterator[tuple[list[Prepared], int]]:
        """The files read, hashed and chunked (in a worker process when there are many),
        in batches, each with how many files are done after it."""
        batch: list[Prepared] = []
        size = 0
        work = [(e, known[e.path][3] if e.path in known else None) for e in todo]
        for done, outcome in enumerate(ingest.prepare_all(work), start=1):
            if isinstance(outcome, Prepared):
                stats.read += 1
                batch.append(outcome)
                size += outcome.entry.size
            else:
                stats.errors.append(f"{outcome.entry.path}: {outcome.reason}")
            if len(batch) >= BATCH_FILES or size >= BATCH_BYTES or done == len(todo):
                yield batch, done
                batch, size = [], 0

    def _write(self, batch: list[Prepared], stats: AddStats) -> None:
        now = time.time()
        with transaction(self.con):
            con = self.con
            next_id = int(_scalar(con, "SELECT coalesce(max(id), 0) FROM chunks"))
            chunk_rows: list[tuple[Any, ...]] = []
            fts_rows: list[tuple[Any, ...]] = []
            line_updates: list[tuple[int, int, int]] = []
            stale: list[int] = []
            for item in batch:
                e = item.entry
                row = con.execute(
                    "SELECT id, sha256 FROM files WHERE path = ?", (e.path,)
                ).fetchone()
                if item.touch_only:
                    if row is not None and row[1] == item.sha256:
                        con.execute(
                            "UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?",
                            (e.size, e.mtime_ns, row[0]),
                        )
                    continue
                chunks = item.rows or []
                values = (
                    e.label,
                    e.size,
                    e.mtime_ns,
                    item.sha256,
                    item.language,
                    int(item.rows is None),
                    len(chunks),
                    now,
                )
                if row is None:
                    file_id = _scalar(
                        con,
                        "INSERT INTO files (label, size, mtime_ns, sha256, language, binary,"
                        " chunks, indexed_at, path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                        " RETURNING id",
                        (*values, e.path),
                    )
                    if item.rows is None:
                        stats.skipped += 1
                    else:
                        stats.added += 1
                else:
                    file_id = row[0]
                    con.execute(
                        "UPDATE files SET label = ?, size = ?, mtime_ns = ?, sha256 = ?,"
                        " language = ?, binary = ?, chunks = ?, indexed_at = ? WHERE id = ?",
                        (*values, file_id),
                    )
                    if item.rows is None:
                        stats.skipped += 1
                    else:
                        stats.updated += 1
                # Keep the chunks whose content is unchanged (their lines may have moved).
                old: dict[str, list[int]] = {}
                if row is not None:
                    for cid, sha in con.execute(
                        "SELECT id, sha256 FROM chunks WHERE file_id = ?", (file_id,)
                    ):
                        old.setdefault(sha, []).append(cid)
                for c in chunks:
                    reuse = old.get(c.sha256)
                    if reuse:
                        line_updates.append((c.start_line, c.end_line, reuse.pop()))
                        continue
                    next_id += 1
                    chunk_rows.append(
                        (next_id, file_id, c.start_line, c.end_line, item.language, c.sha256)
                    )
                    fts_rows.append((next_id, e.label, c.symbols, c.text))
                stale.extend(cid for ids in old.values() for cid in ids)
            if stale:
                con.executemany("DELETE FROM kb WHERE rowid = ?", [(i,) for i in stale])
                con.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in stale])
            con.executemany(
                "UPDATE chunks SET start_line = ?, end_line = ? WHERE id = ?", line_updates
            )
            con.executemany(
                "INSERT INTO chunks (id, file_id, start_line, end_line, language,"
                " sha256) VALUES (?, ?, ?, ?, ?, ?)",
                chunk_rows,
            )
            con.executemany(
                "INSERT INTO kb (rowid, path, symbols, body) VALUES (?, ?, ?, ?)", fts_rows
            )
        stats.chunks += len(fts_rows)

    def _remove_ids(self, file_ids: list[int]) -> int:
        if not file_ids:
            return 0
        with transaction(self.con):
            for file_id in file_ids:
                self.con.execute(
                    "DELETE FROM kb WHERE rowid IN (SELECT id FROM chunks WHERE file_id = ?)",
                    (file_id,),
                )
                self.con.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
                self.con.execute("DELETE FROM files WHERE id = ?", (file_id,))
        return len(file_ids)

    # --- searching ------------------------------------------------------------------------

    def match_expression(self, query: str) -> str:
        """The FTS5 expression :meth:`search` runs for ``query`` ("" for no terms)."""
        return fts.expression(list(fts.terms(query, self._tokens)))

    def _tokens(self, text: str) -> list[str]:
        out = self._query_tokenizer(
            text.encode("utf-8"),
            apsw.FTS5_TOKENIZE_QUERY,
            None,
            include_offsets=False,
            include_colocated=False,
        )
        return [t for t in out if isinstance(t, str)]

    def _spans(self, data: bytes) -> list[tuple[int, int, str]]:
        """Tokens of ``data`` with byte offsets, as the index tokenizes it."""
        split = self._query_tokenizer if tokenizer.case_cuts(data) else self._plain_tokenizer
        return cast(
            "list[tuple[int, int, str]]",
            split(data, apsw.FTS5_TOKENIZE_AUX, None, include_colocated=False),
        )

    @_healing
    def search(self, query: str, k: int = 10, under: Path | None = None) -> list[Hit]:
        """The ``k`` best chunks for ``query``, best first; any text is a valid query.
        With ``under``, only chunks of files below that directory."""
        return [hit for _, hit in self._search(query, k, under)]

    def _search(self, query: str, k: int, under: Path | None) -> list[tuple[int, Hit]]:
        query_terms = fts.terms(query, self._tokens)
        expr = fts.expression(list(query_terms))
        if not expr or k <= 0:
            return []
        # The best few times k by bm25, re-ranked with the file's prior (tests weigh less).
        pool = k + RERANK_EXTRA
        bounds = self._outside(under)
        rows: list[tuple[Any, ...]]
        if bounds is None:
            rows = self.con.execute(
                "SELECT m.id, m.score, c.start_line, c.end_line, c.language, f.path, f.label,"
                " m.body FROM (SELECT rowid AS id, rank AS score, body"
                "       FROM kb WHERE kb MATCH ? ORDER BY rank LIMIT ?) AS m"
                " JOIN chunks c ON c.id = m.id JOIN files f ON f.id = c.file_id",
                (expr, pool),
            ).fetchall()
        else:
            rows = self.con.execute(
                "SELECT kb.rowid, kb.rank, c.start_line, c.end_line, c.language, f.path,"
                " f.label, kb.body FROM kb JOIN chunks c ON c.id = kb.rowid"
                " JOIN files f ON f.id = c.file_id"
                " WHERE kb MATCH ? AND f.path >= ? AND f.path < ? ORDER BY kb.rank LIMIT ?",
                (expr, *bounds, pool),
            ).fetchall()
        scored = sorted(
            (
                (-rank * fts.prior(label), cid, start, end, lang, path)
                for cid, rank, start, end, lang, path, label, _ in rows
            ),
            key=lambda r: (-r[0], r[1]),
        )[:k]
        snippet = fts.Snippets(query_terms, self._spans, SNIPPET_MARKS)
        bodies = {row[0]: row[7] for row in rows}
        return [
            (
                cid,
                Hit(
                    _path(path),
                    start,
                    end,
                    float(f"{score:.4g}"),
                    snippet(bodies.get(cid, "")),
                    lang,
                ),
            )
            for score, cid, start, end, lang, path in scored
        ]

    def _bodies(self, chunk_ids: list[int]) -> dict[int, str]:
        """The text of these chunks, by id, in one query."""
        if not chunk_ids:
            return {}
        marks = ", ".join("?" * len(chunk_ids))
        return {
            cid: body
            for cid, body in self.con.execute(
                f"SELECT rowid, body FROM kb WHERE rowid IN ({marks})", chunk_ids
            )
        }

    def _outside(self, under: Path | None) -> tuple[str, str] | None:
        """The path range of ``under`` when some indexed file lies outside it, else None."""
        if under is None:
            return None
        lo = str(Path(under).expanduser().resolve()).rstrip("/") + "/"
        hi = lo[:-1] + "0"
        if (
            self.con.execute(
                "SELECT 1 FROM files WHERE path < ? OR path >= ? LIMIT 1", (lo, hi)
            ).fetchone()
            is None
        ):
            return None
        return lo, hi

    @_healing
    def context(self, request: str, budget_tokens: int, under: Path | None = None) -> Context:
        """The best chunks for ``request`` that fit in ``budget_tokens`` (estimated), best
        first, no chunk twice, as markdown with each chunk's path and line range.

        A chunk that does not fit is passed over for the next ones; when not even the best
        one fits, its first lines are given (the hit's line range says which)."""
        if budget_tokens <= 0:
            raise BadInput(
                f"must be a positive number of tokens, not {budget_tokens}", field="budget"
            )
        base = Path(under).expanduser().resolve() if under is not None else None
        header = "# Context from the knowledge store\n"
        parts, used = [header], estimate_tokens(header)
        chosen: list[Hit] = []
        found = self._search(request, min(100, max(10, budget_tokens // 100)), under)
        bodies = self._bodies([cid for cid, _ in found])
        for cid, hit in found:
            lines = bodies.get(cid, "").split("\n")
            block = _block(hit, lines, base)
            if used + estimate_tokens(block) > budget_tokens:
                if chosen:
                    continue
                while lines and used + estimate_tokens(_block(hit, lines, base)) > budget_tokens:
                    lines.pop()
                if not lines:
                    continue
                hit = replace(hit, end_line=hit.start_line + len(lines) - 1)
                block = _block(hit, lines, base)
            parts.append(block)
            used += estimate_tokens(block)
            chosen.append(hit)
        if not chosen:
            return Context("", [], 0)
        text = "\n".join(parts)
        return Context(text, chosen, estimate_tokens(text))

    # --- stats ----------------------------------------------------------------------------

    @_healing
    def stats(self) -> dict[str, Any]:
        """What the store holds: files, chunks, bytes, languages, database size."""
        con = self.con
        files = _scalar(con, "SELECT count(*) FROM files WHERE binary = 0")
        size = _scalar(con, "SELECT coalesce(sum(size), 0) FROM files WHERE binary = 0")
        skipped = _scalar(con, "SELECT count(*) FROM files WHERE binary = 1")
        chunks = _scalar(con, "SELECT count(*) FROM chunks")
        languages = {
            str(lang): n
            for lang, n in con.execute(
                "SELECT language, count(*) FROM files WHERE binary = 0 GROUP BY language"
                " ORDER BY count(*) DESC, language"
            )
        }
        last = _scalar(con, "SELECT max(indexed_at) FROM files")
        db_bytes = sum(
            p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists()
        )
        return {
            "database": str(self.path),
            "files": files,
            "binary_files": skipped,
            "chunks": chunks,
            "bytes": size,
            "languages": languages,
            "last_indexed": last,
            "database_bytes": db_bytes,
        }


@lru_cache(maxsize=4096)
def _path(text: str) -> Path:
    """A stored path as a Path, shared between searches (a Path is immutable)."""
    return Path(text)


def _scalar(con: apsw.Connection, sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = con.execute(sql, args).fetchone()
    return None if row is None else row[0]


def _block(hit: Hit, lines: list[str], base: Path | None) -> str:
    """One chunk as markdown: a heading with its path and lines, then the code fenced."""
    shown = hit.path.relative_to(base) if base and hit.path.is_relative_to(base) else hit.path
    body = "\n".join(lines)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"## {shown}:{hit.start_line}-{hit.end_line}\n{fence}{hit.language}\n{body}\n{fence}\n"
