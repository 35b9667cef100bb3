"""The knowledge store on the Python standard library's source tree (about 2,000 files):
known-item search quality against a naive FTS5 baseline, and incremental re-adds.

One ingest is shared by the whole module (it takes a few seconds on 2 cores).
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from agentos.knowledge.store import KnowledgeStore

pytestmark = pytest.mark.slow

STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()

# (query, files that count as the answer, relative to the standard library's root)
KNOWN_ITEMS: list[tuple[str, list[str]]] = [
    ("parse command line arguments", ["argparse.py"]),
    ("json decoder", ["json/decoder.py"]),
    ("read and write zip archives", ["zipfile.py", "zipfile/__init__.py"]),
    ("gzip compression file", ["gzip.py"]),
    ("send mail with an smtp client", ["smtplib.py"]),
    ("create temporary files and directories", ["tempfile.py"]),
    ("copy a directory tree recursively", ["shutil.py"]),
    ("csv reader writer dialect", ["csv.py"]),
    ("pseudo random number generator shuffle", ["random.py"]),
    ("parse a time string with strptime", ["_strptime.py"]),
    ("split a url into components and parse the query string", ["urllib/parse.py"]),
    ("base64 encoding and decoding", ["base64.py"]),
    ("secure hash algorithms sha256 md5", ["hashlib.py"]),
    ("spawn a subprocess and connect to its pipes", ["subprocess.py"]),
    ("abstract base classes", ["abc.py", "_py_abc.py"]),
    ("dataclass field default factory", ["dataclasses.py"]),
    ("enumeration members with auto values", ["enum.py"]),
    ("heap queue algorithm", ["heapq.py"]),
    ("bisection algorithm insort", ["bisect.py"]),
    ("xml element tree", ["xml/etree/ElementTree.py"]),
    ("configuration file parser with ini sections", ["configparser.py"]),
    ("read a tar archive", ["tarfile.py"]),
    ("universally unique identifiers uuid4", ["uuid.py"]),
    ("pretty printer for data structures", ["pprint.py"]),
    ("wrap and fill text paragraphs", ["textwrap.py"]),
    ("unified diff and sequence matcher", ["difflib.py"]),
    ("lexical analyzer for shell-like syntax", ["shlex.py"]),
    ("pathname pattern expansion glob", ["glob.py"]),
    ("filename matching with shell patterns", ["fnmatch.py"]),
    ("http server request handler", ["http/server.py"]),
    ("http client connection", ["http/client.py"]),
    ("email message parser", ["email/parser.py", "email/feedparser.py"]),
    ("object-oriented filesystem paths", ["pathlib.py", "pathlib/__init__.py"]),
    ("serialize python objects with pickle", ["pickle.py"]),
    ("rotating file handler for logging", ["logging/handlers.py"]),
    ("thread pool executor", ["concurrent/futures/thread.py"]),
    ("asyncio queues", ["asyncio/queues.py"]),
    ("rational numbers fractions", ["fractions.py"]),
    ("decimal fixed point and floating point arithmetic", ["decimal.py", "_pydecimal.py"]),
    ("print a calendar month", ["calendar.py"]),
    ("mean median and standard deviation statistics", ["statistics.py"]),
    ("measure execution time of small code snippets", ["timeit.py"]),
    ("get the signature of a callable with inspect", ["inspect.py"]),
    ("weak references", ["weakref.py"]),
    ("ipv4 and ipv6 address and network manipulation", ["ipaddress.py"]),
    ("guess the mime type of a file", ["mimetypes.py"]),
    ("string template substitution", ["string.py"]),
    ("tokenize python source code", ["tokenize.py"]),
    ("abstract syntax trees", ["ast.py"]),
    ("HTTPServer", ["http/server.py"]),
    ("parseaddr", ["email/utils.py", "email/_parseaddr.py"]),
]


@pytest.fixture(scope="module")
def stdlib_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeStore]:
    store = KnowledgeStore(tmp_path_factory.mktemp("kb") / "stdlib.db")
    stats = store.add([STDLIB])
    assert stats.added > 1500 and not stats.errors
    yield store
    store.close()


def reciprocal_rank(paths: list[str], expected: list[str]) -> float:
    for rank, path in enumerate(paths[:10], start=1):
        if Path(path).is_relative_to(STDLIB) and str(Path(path).relative_to(STDLIB)) in expected:
            return 1 / rank
    return 0.0


def naive_baseline(store: KnowledgeStore, directory: Path) -> apsw.Connection:
    """The same chunks in a plain FTS5 table: default tokenizer, unweighted bm25."""
    con = apsw.Connection(str(directory / "naive.db"))
    con.execute("CREATE VIRTUAL TABLE naive USING fts5(path, symbols, body, file UNINDEXED)")
    rows = store.con.execute(
        "SELECT kb.path, kb.symbols, kb.body, f.path FROM kb"
        " JOIN chunks c ON c.id = kb.rowid JOIN files f ON f.id = c.file_id"
    )
    with con:
        con.executemany(
            "INSERT INTO naive (path, symbols, body, file) VALUES (?, ?, ?, ?)", rows.fetchall()
        )
    return con


def naive_search(con: apsw.Connection, query: str) -> list[str]:
    expr = " OR ".join(f'"{w}"' for w in re.findall(r"\w+", query))
    return [
        file
        for (file,) in con.execute(
            "SELECT file FROM naive WHERE naive MATCH ? ORDER BY bm25(naive) LIMIT 10", (expr,)
        )
    ]


def test_parse_command_line_arguments_finds_argparse_first(stdlib_store: KnowledgeStore) -> None:
    hits = stdlib_store.search("parse command line arguments")
    assert hits[0].path == STDLIB / "argparse.py"


def test_known_item_queries_beat_the_naive_fts5_baseline(
    stdlib_store: KnowledgeStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(KNOWN_ITEMS) >= 30
    naive = naive_baseline(stdlib_store, tmp_path)
    ours = [
        reciprocal_rank([str(h.path) for h in stdlib_store.search(q, k=10)], expected)
        for q, expected in KNOWN_ITEMS
    ]
    base = [reciprocal_rank(naive_search(naive, q), expected) for q, expected in KNOWN_ITEMS]
    mrr, naive_mrr = sum(ours) / len(ours), sum(base) / len(base)
    with capsys.disabled():
        print(
            f"\nMRR@10 over {len(KNOWN_ITEMS)} known-item queries on {STDLIB}: "
            f"knowledge store {mrr:.3f}, naive FTS5 baseline {naive_mrr:.3f}"
        )
    assert mrr > naive_mrr + 0.1
    assert mrr >= 0.8


def test_readding_the_unchanged_standard_library_reads_no_file(
    stdlib_store: KnowledgeStore,
) -> None:
    stats = stdlib_store.add([STDLIB])
    assert stats.seen > 1500
    assert (stats.read, stats.added, stats.updated, stats.removed, stats.chunks) == (0, 0, 0, 0, 0)


def test_search_and_context_stay_within_their_limits_on_a_large_index(
    stdlib_store: KnowledgeStore,
) -> None:
    hits = stdlib_store.search("asyncio event loop", k=25)
    assert len(hits) == 25
    assert len({(h.path, h.start_line) for h in hits}) == 25
    ctx = stdlib_store.context(
        "how does the asyncio event loop schedule callbacks", 3000, under=STDLIB / "asyncio"
    )
    assert 0 < ctx.tokens <= 3000
    assert all(h.path.is_relative_to(STDLIB / "asyncio") for h in ctx.chunks)
