"""Knowledge store benchmark on the Python standard library's source tree.

    .venv/bin/python benchmarks/kb_bench.py [--root DIR] [--repeat N] [--json]

Measures, in one run and on the same machine state:

- ingest: ``KnowledgeStore.add`` of the tree into a fresh database (walk, read, hash,
  chunk, index), against a raw apsw bulk insert of the very same chunks (one
  transaction, ``executemany``) into (a) an FTS5 table declared like ours (same columns,
  same code-aware tokenizer) and (b) a plain FTS5 table with the built-in ``unicode61``
  tokenizer, which has no Python in its path;
- re-add of the unchanged tree, as a share of the first ingest;
- search: p50 and p95 of ``KnowledgeStore.search(q, k=10)`` (query building, weighted
  bm25, snippets, file metadata) against the raw FTS5 ``MATCH ... ORDER BY rank LIMIT 10``
  of the same expression on the same table.

With ``--repeat N`` each ingest figure is the best of N runs, taken in turns. CPU
seconds count this process only: a large add also reads and chunks files in a worker
process, which runs beside the indexer on a second core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import apsw

from agentos.knowledge import tokenizer
from agentos.knowledge.store import KnowledgeStore
from agentos.state.sqlite import connect

QUERIES = [
    "parse command line arguments",
    "json decoder",
    "HTTPServer",
    "parseDate",
    "read a zip archive",
    "compress data with gzip",
    "send an email with smtp",
    "temporary directory",
    "regular expression compile",
    "thread pool executor",
    "unit test assertEqual",
    "copy a file tree",
    "sqlite3 connection cursor",
    "csv reader dialect",
    "random choice shuffle",
    "date time formatting strftime",
    "url parse quote",
    "base64 encode",
    "hash sha256 hexdigest",
    "subprocess run capture output",
    "asyncio event loop",
    "logging handler formatter",
    "pickle protocol",
    "abstract base class",
    "dataclass field default factory",
    "enum auto value",
    "heap queue priority",
    "binary search insort",
    "signal handler",
    "socket bind listen",
    "xml element tree parse",
    "configparser read ini",
    "tar file extract",
    "uuid4",
    "os.path.join",
    "shutil.rmtree",
    'NEAR("x" AND OR *',
    "",
    "the of and",
]


def _fresh_db(directory: Path, name: str) -> apsw.Connection:
    con = connect(directory / name, [])
    tokenizer.register(con)
    return con


Timing = tuple[float, float]  # wall-clock seconds, CPU seconds of this process


def _raw_insert(
    directory: Path, name: str, table_sql: str, rows: list[tuple[int, str, str, str]]
) -> Timing:
    con = _fresh_db(directory, name)
    con.execute(table_sql)
    started, cpu = time.perf_counter(), time.process_time()
    with con:
        con.executemany("INSERT INTO raw (rowid, path, symbols, body) VALUES (?, ?, ?, ?)", rows)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    con.close()
    return elapsed


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--search-reps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root: Path = args.root.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="kb-bench-"))
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))

    # Ingest, then re-add the unchanged tree; raw inserts of the very same chunks.
    # The three ingests take turns, so that a change in the machine's load hits all.
    def ingest(i: int) -> Timing:
        with KnowledgeStore(tmp / f"kb{i}.db") as store:
            cpu = time.process_time()
            seconds = store.add([root]).seconds
            return seconds, time.process_time() - cpu

    same_sql = (
        "CREATE VIRTUAL TABLE raw USING fts5(path, symbols, body, "
        f"tokenize = '{tokenizer.TOKENIZE}')"
    )
    plain_sql = "CREATE VIRTUAL TABLE raw USING fts5(path, symbols, body)"
    say(f"ingesting {root} ...")
    t_ingest = [ingest(0)]
    store = KnowledgeStore(tmp / "kb0.db")
    readd = store.add([root])
    info = store.stats()
    rows: list[tuple[int, str, str, str]] = store.con.execute(
        "SELECT rowid, path, symbols, body FROM kb ORDER BY rowid"
    ).fetchall()
    body_bytes = sum(len(r[1]) + len(r[2]) + len(r[3]) for r in rows)
    t_raw_same: list[Timing] = []
    t_raw_plain: list[Timing] = []
    for i in range(args.repeat):
        say(f"raw FTS5 inserts of the same chunks ({i + 1}/{args.repeat}) ...")
        if i:
            t_ingest.append(ingest(i))
        t_raw_same.append(_raw_insert(tmp, f"same{i}.db", same_sql, rows))
        t_raw_plain.append(_raw_insert(tmp, f"plain{i}.db", plain_sql, rows))
    t_ingest_best, t_same_best, t_plain_best = (
        min(t[0] for t in ts) for ts in (t_ingest, t_raw_same, t_raw_plain)
    )
    c_ingest, c_same, c_plain = (
        min(t[1] for t in ts) for ts in (t_ingest, t_raw_same, t_raw_plain)
    )

    # Search: ours against the raw MATCH of the same expression, interleaved.
    say("searching ...")
    ours: list[float] = []
    raw: list[float] = []
    raw_sql = "SELECT rowid FROM kb WHERE kb MATCH ? ORDER BY rank LIMIT 10"
    for q in QUERIES:
        expr = store.match_expression(q)
        store.search(q, 10)
        for _ in range(args.search_reps):
            t0 = time.perf_counter()
            store.search(q, 10)
            t1 = time.perf_counter()
            if expr:
                store.con.execute(raw_sql, (expr,)).fetchall()
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            raw.append(t2 - t1)

    mb = body_bytes / 1e6
    figures = {
        "root": str(root),
        "files": info["files"],
        "binary_files": info["binary_files"],
        "chunks": info["chunks"],
        "text_mb": round(mb, 1),
        "ingest_s": round(t_ingest_best, 3),
        "ingest_mb_s": round(mb / t_ingest_best, 1),
        "raw_same_tokenizer_s": round(t_same_best, 3),
        "raw_builtin_tokenizer_s": round(t_plain_best, 3),
        "ingest_vs_raw_same_tokenizer": round(t_same_best / t_ingest_best, 2),
        "ingest_vs_raw_builtin_tokenizer": round(t_plain_best / t_ingest_best, 2),
        "ingest_cpu_s": round(c_ingest, 3),
        "raw_same_tokenizer_cpu_s": round(c_same, 3),
        "raw_builtin_tokenizer_cpu_s": round(c_plain, 3),
        "readd_s": round(readd.seconds, 3),
        "readd_files_read": readd.read,
        "readd_share_of_ingest": round(readd.seconds / t_ingest_best, 4),
        "search_queries": len(QUERIES),
        "search_samples": len(ours),
        "search_p50_ms": round(statistics.median(ours) * 1000, 3),
        "search_p95_ms": round(_percentile(ours, 95) * 1000, 3),
        "raw_match_p50_ms": round(statistics.median(raw) * 1000, 3),
        "raw_match_p95_ms": round(_percentile(raw, 95) * 1000, 3),
        "search_p50_vs_raw": round(statistics.median(ours) / max(statistics.median(raw), 1e-9), 2),
        "database_mb": round(info["database_bytes"] / 1e6, 1),
    }
    store.close()
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    print()
    print(
        f"targets: ingest >= 0.6x raw ({figures['ingest_vs_raw_same_tokenizer']}x same "
        f"tokenizer, {figures['ingest_vs_raw_builtin_tokenizer']}x built-in); re-add <= 5% "
        f"({figures['readd_share_of_ingest']:.2%}); search p50 <= 1.5x raw "
        f"({figures['search_p50_vs_raw']}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
