"""The knowledge store: chunking, code-aware matching, safe queries, incremental adds that
keep the index exact, context within a budget, and the ``kb`` commands."""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from conftest import CliRunner, make_repo

from agentos.cli import main as cli_main
from agentos.errors import BadInput, NotFound
from agentos.knowledge import files, ingest, tokenizer
from agentos.knowledge.chunking import MAX_LINES, chunk_text, language_of
from agentos.knowledge.fts import prior
from agentos.knowledge.store import KnowledgeStore, estimate_tokens
from agentos.workspace.layout import Workspace

# --- helpers ------------------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def assert_index_exact(store: KnowledgeStore) -> None:
    """Every indexed chunk is exactly the current text of its file at its lines, every
    indexed file exists, and the files' chunks cover all their non-blank lines."""
    files = store.con.execute("SELECT id, path FROM files WHERE binary = 0").fetchall()
    for file_id, path in files:
        assert Path(str(path)).is_file(), f"stale file in the index: {path}"
        lines = Path(str(path)).read_text().split("\n")
        covered: set[int] = set()
        for start, end, body in store.con.execute(
            "SELECT c.start_line, c.end_line, kb.body FROM chunks c JOIN kb"
            " ON kb.rowid = c.id WHERE c.file_id = ? ORDER BY c.start_line",
            (file_id,),
        ):
            assert body == "\n".join(lines[start - 1 : end]), f"stale chunk {path}:{start}"
            assert not covered & set(range(start, end + 1)), f"overlapping chunks in {path}"
            covered |= set(range(start, end + 1))
        blank = {i for i, line in enumerate(lines, 1) if not line.strip()}
        assert set(range(1, len(lines) + 1)) - blank <= covered, f"lines missing in {path}"
    (chunks,) = store.con.execute("SELECT count(*) FROM chunks").fetchall()[0]
    (rows,) = store.con.execute("SELECT count(*) FROM kb").fetchall()[0]
    assert chunks == rows


def paths_of(hits: list[Any]) -> list[str]:
    return [h.path.name for h in hits]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[KnowledgeStore]:
    with KnowledgeStore(tmp_path / "kb.db") as s:
        yield s


PY_MODULE = '''"""Scheduling of periodic jobs."""

import time


@decorated
# a comment that belongs to the function
def run_pending(jobs):
    for job in jobs:
        job()


class Scheduler:
    """Keeps jobs."""

    def every(self, seconds):
        return seconds
'''

# --- chunking -----------------------------------------------------------------------------


def test_python_chunks_follow_functions_and_classes_with_their_decorators() -> None:
    body = "".join(f"    x{j} = {j}\n" for j in range(30))
    text = (
        '"""Scheduling of periodic jobs."""\n\nimport time\n\n\n'  # lines 1-5
        "@decorated\n# belongs to the function\ndef run_pending(jobs):\n"
        + body  # 6-38
        + "\n\nclass Scheduler:\n    def every(self):\n"
        + body
    )  # 41-72
    chunks = chunk_text(text, "python")
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3), (6, 38), (41, 72)]
    assert [c.symbols for c in chunks] == [
        "Scheduling of periodic jobs.",
        "run_pending",
        "Scheduler every",
    ]
    assert chunks[1].text.startswith("@decorated\n# belongs to the function\ndef run_pending")
    lines = text.split("\n")
    assert all(c.text == "\n".join(lines[c.start_line - 1 : c.end_line]) for c in chunks)


def test_small_neighbouring_definitions_share_a_chunk() -> None:
    chunks = chunk_text(PY_MODULE, "python")
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 17)]
    assert chunks[0].symbols == "Scheduling of periodic jobs. run_pending Scheduler every"


def test_a_long_class_is_cut_at_its_methods_and_each_piece_is_named_after_the_class() -> None:
    methods = "".join(
        f"    def method_{i}(self):\n" + "        pass\n" * 20 + "\n" for i in range(10)
    )
    text = "class Big:\n    '''A big class.'''\n\n" + methods
    chunks = chunk_text(text, "python")
    assert len(chunks) > 1
    assert all(c.end_line - c.start_line + 1 <= MAX_LINES for c in chunks)
    assert all(c.symbols.startswith("Big") for c in chunks)
    for c in chunks[1:]:
        assert c.text.lstrip().startswith("def method_")


def test_markdown_chunks_follow_headings_but_not_inside_code_fences() -> None:
    text = (
        "# Title\n\nintro\n\n## Install\n\n```sh\n# not a heading\npip install x\n```\n\n"
        + "body line\n" * 30
        + "\n## Usage\n\n"
        + "use it\n" * 30
    )
    chunks = chunk_text(text, "markdown")
    assert [c.symbols for c in chunks] == ["Title", "Title Install", "Title Usage"]
    assert [c.start_line for c in chunks] == [1, 5, 43]
    assert chunks[2].text.startswith("## Usage")


def test_other_text_is_cut_into_windows_covering_every_line() -> None:
    lines = [f"line {i}" if i % 7 else "" for i in range(1, 301)]
    chunks = chunk_text("\n".join(lines), "text")
    assert all(c.end_line - c.start_line + 1 <= MAX_LINES for c in chunks)
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    assert {i for i, line in enumerate(lines, 1) if line} <= covered


@pytest.mark.parametrize(
    ("name", "language"),
    [
        ("a.py", "python"),
        ("README.md", "markdown"),
        ("x.ts", "typescript"),
        ("Makefile", "make"),
        ("notes", "text"),
    ],
    ids=lambda v: str(v),
)
def test_language_comes_from_the_file_name(name: str, language: str) -> None:
    assert language_of(Path(name)) == language


# --- the tokenizer ------------------------------------------------------------------------


def _tokenizer() -> apsw.FTS5Tokenizer:
    con = apsw.Connection(":memory:")
    tokenizer.register(con)
    return con.fts5_tokenizer("porter", [tokenizer.NAME, *tokenizer.BASE])


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("parse_date", ["pars", "date"]),
        ("parseDate", ["pars", "date"]),
        ("HTTPServer", ["http", "server"]),
        ("getHTTPResponseCode", ["get", "http", "respons", "code"]),
        ("utf8Decode", ["utf8", "decod"]),
        ("Ünïcödé façade", ["unicod", "facad"]),
    ],
    ids=["snake", "camel", "acronym", "mixed", "digits", "diacritics"],
)
def test_identifiers_are_split_into_their_stemmed_parts(text: str, tokens: list[str]) -> None:
    out = _tokenizer()(
        text.encode(),
        apsw.FTS5_TOKENIZE_DOCUMENT,
        None,
        include_offsets=False,
        include_colocated=False,
    )
    assert out == tokens


def test_indexing_and_snippet_tokenization_give_the_same_tokens() -> None:
    tok = _tokenizer()
    plain = tok.connection.fts5_tokenizer("porter", tokenizer.BASE)
    rnd = random.Random(4)
    alphabet = "aAbBzZ09_ .-éÉß中🎉\n"
    for _ in range(2000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30))).encode()
        fast = tok(
            text, apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False, include_colocated=False
        )
        spans = tok(text, apsw.FTS5_TOKENIZE_AUX, None, include_colocated=False)
        assert fast == [span[-1] for span in spans], text  # (start, end, token)
        if not tokenizer.case_cuts(text):  # snippets then skip the Python tokenizer
            assert spans == plain(text, apsw.FTS5_TOKENIZE_AUX, None, include_colocated=False), text


# --- searching ----------------------------------------------------------------------------


def test_identifiers_match_their_parts_in_both_directions(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    write(
        tmp_path / "src",
        {
            "a.py": "def parse_date(text):\n    return text\n",
            "b.js": "function parseDate(text) {\n  return text;\n}\n",
            "c.py": "class HTTPServer:\n    pass\n",
            "d.txt": "nothing to see here\n",
        },
    )
    store.add([tmp_path / "src"])
    for query in ("parse date", "parseDate", "parse_date", "parsing dates"):
        assert sorted(paths_of(store.search(query))) == ["a.py", "b.js"], query
    assert paths_of(store.search("http server")) == ["c.py"]
    assert paths_of(store.search("HTTPServer")) == ["c.py"]


def test_path_and_symbol_names_weigh_more_than_body_text(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    filler = "".join(f"value_{i} = {i}\n" for i in range(10))
    write(
        tmp_path / "src",
        {
            "scheduler.py": filler,
            "mentions.py": filler + "# the scheduler is elsewhere\n",
            "jobs.py": filler + "def scheduler():\n    pass\n",
            "other.py": filler + "# the scheduler, the scheduler\n",
        },
    )
    store.add([tmp_path / "src"])
    names = paths_of(store.search("scheduler"))
    assert names[:2] == ["scheduler.py", "jobs.py"]


def test_tests_rank_below_the_code_they_test(store: KnowledgeStore, tmp_path: Path) -> None:
    write(
        tmp_path / "src",
        {
            "pkg/tokens.py": "def tokenize(text):\n    '''Tokenize text.'''\n",
            "tests/test_tokens.py": "def test_tokenize():\n    assert tokenize('text tokenize')\n",
        },
    )
    store.add([tmp_path / "src"])
    assert paths_of(store.search("tokenize text")) == ["tokens.py", "test_tokens.py"]
    assert prior("tests/test_tokens.py") < prior("pkg/tokens.py") == 1.0


def test_hits_carry_path_lines_score_language_and_a_marked_snippet(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    write(tmp_path, {"mod.py": PY_MODULE})
    store.add([tmp_path / "mod.py"])
    hit = store.search("run pending jobs", k=1)[0]
    assert hit.as_dict() == {
        "path": str((tmp_path / "mod.py").resolve()),
        "start_line": 1,
        "end_line": 17,
        "score": hit.score,
        "snippet": "def «run_pending»(«jobs»):",
        "language": "python",
    }
    assert hit.score > 0


def test_search_under_a_directory_returns_only_files_below_it(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    write(
        tmp_path,
        {"one/a.py": "token = 1\n", "two/b.py": "token = 2\n", "one-more/c.py": "token = 3\n"},
    )
    store.add([tmp_path])
    assert sorted(paths_of(store.search("token"))) == ["a.py", "b.py", "c.py"]
    assert paths_of(store.search("token", under=tmp_path / "one")) == ["a.py"]
    assert sorted(paths_of(store.search("token", under=tmp_path))) == ["a.py", "b.py", "c.py"]


HOSTILE_FIXED = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    '"',
    '""',
    '"""',
    '"unterminated',
    "'",
    "''",
    "*",
    "**",
    "a*",
    "*a",
    "a**b",
    "AND",
    "OR",
    "NOT",
    "AND OR NOT",
    "a AND",
    "OR b",
    "NOT x",
    "a NOT",
    "a AND AND b",
    "NEAR",
    "NEAR(",
    "NEAR(a b",
    "NEAR(a b, 5)",
    "NEAR(a, -1)",
    "NEAR(a b, 99999999999999999999)",
    "NEAR()",
    "(",
    ")",
    "((a)",
    "a)",
    "()",
    "(((((",
    ")))))",
    "body:",
    "body:x",
    "path:x",
    "symbols:parse",
    "{body path}: x",
    "{body}:",
    "-body:x",
    "-x",
    "- -",
    "--",
    "^",
    "^start",
    "a^",
    "^^",
    "+",
    "x + y",
    ":",
    "::",
    "col:*",
    ".",
    "..",
    "...",
    "/",
    "\\",
    "\\\\",
    "%",
    "_",
    "__",
    "a_",
    "_a_",
    "a.b.c",
    "'; DROP TABLE files; --",
    "\x00",
    "a\x00b",
    "\x1b[31m",
    "\u200b",
    "\ufeff",
    "🎉",
    "👍🏽",
    "🏳️‍🌈",
    "中文",
    "日本語 テスト",
    "Ünïcödé",
    "ﬁ",
    "ß",
    "İstanbul",
    "العربية",
    "עברית",
    "ＡＮＤ",
    "\udcff",
    "abc\udcffdef",
    "x" * 10_000,
    "a " * 5000,
    "(" * 5000,
    '"' * 10_000,
    "NEAR(" * 2000,
    "a OR b " * 1500,
    "🎉" * 3000,
    "*" * 10_000,
    "rowid:1",
    "kb:x",
    "rank:bm25",
    "MATCH",
    "kb MATCH 'x'",
    "x' OR '1'='1",
    "%s %d",
    "{}",
    "[]",
    "[a-z]+",
    "$(rm -rf /)",
    "`id`",
    "a\tb\nc",
    "NOT NOT NOT",
    "OR OR",
    '"a" AND "b"',
    '"a" NEAR "b"',
    "a NEAR/3 b",
    "tokenize = porter",
    "0",
    "-1",
    "1e308",
]


def hostile_queries() -> list[str]:
    """200 query strings full of FTS5 syntax, odd unicode and sheer size."""
    rnd = random.Random(200)
    pieces = [
        '"',
        "*",
        "AND",
        "OR",
        "NOT",
        "NEAR(",
        "(",
        ")",
        "body:",
        "^",
        "-",
        ":",
        "{",
        "}",
        ",",
        "🎉",
        "é",
        "中",
        "\x00",
        "\\",
        "'",
        "parse",
        "date",
        "x",
    ]
    queries = list(HOSTILE_FIXED)
    while len(queries) < 200:
        queries.append(
            "".join(rnd.choice(pieces) + rnd.choice(["", " "]) for _ in range(rnd.randint(1, 12)))
        )
    return queries


def test_two_hundred_hostile_queries_never_raise(store: KnowledgeStore, tmp_path: Path) -> None:
    write(
        tmp_path / "src",
        {
            "a.py": "def parse_date(x):\n    return x  # AND NEAR body\n",
            "b.md": "# Body\n\nA x and a date.\n",
        },
    )
    store.add([tmp_path / "src"])
    queries = hostile_queries()
    assert len(queries) == 200
    for query in queries:
        hits = store.search(query)
        assert isinstance(hits, list)
        store.context(query, 200)
    assert store.search("") == [] and store.search("   ") == []


def test_hostile_queries_exit_zero_from_the_cli(
    ws: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "src", {"a.py": "def parse_date(x):\n    return x\n"})
    assert cli_main(["--workspace", str(ws.root), "kb", "add", str(tmp_path / "src")]) == 0
    for query in hostile_queries():
        capsys.readouterr()
        assert (
            cli_main(["--workspace", str(ws.root), "kb", "search", "--json", "--", query]) == 0
        ), query
        assert isinstance(json.loads(capsys.readouterr().out)["hits"], list)
    # Without "--", text that is not an option of the command is still just text.
    for query in ("-x", "-body:x", "--", "- -", "AND -k", "NEAR( -1"):
        assert cli_main(["--workspace", str(ws.root), "kb", "search", query]) == 0, query


# --- incremental adds ---------------------------------------------------------------------


def test_readding_an_unchanged_tree_reads_no_file(store: KnowledgeStore, tmp_path: Path) -> None:
    write(tmp_path / "src", {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(20)})
    first = store.add([tmp_path / "src"])
    assert (first.seen, first.read, first.added, first.chunks) == (20, 20, 20, 20)
    again = store.add([tmp_path / "src"])
    assert (again.seen, again.read, again.added, again.updated, again.chunks) == (20, 0, 0, 0, 0)


def test_progress_counts_the_files_to_read_and_a_large_add_stays_exact(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    src = write(
        tmp_path / "src",
        {f"pkg{i % 4}/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(90)},
    )
    calls: list[tuple[int, int]] = []
    store.add([src], progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 90) and calls[-1] == (90, 90)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert_index_exact(store)
    assert store.stats()["files"] == 90


def test_a_large_add_prepared_by_a_worker_process_is_exact(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    body = "".join(
        f"def function_{j}(value):\n    return value + {j}\n\n\n" for j in range(400)
    )  # about 20 KB
    n = max(ingest.PARALLEL_FILES, ingest.PARALLEL_BYTES // len(body) + 1)
    src = write(tmp_path / "src", {f"pkg/mod_{i}.py": f"# module {i}\n" + body for i in range(n)})
    assert sum(p.stat().st_size for p in src.rglob("*.py")) >= ingest.PARALLEL_BYTES
    stats = store.add([src])
    assert (stats.seen, stats.read, stats.added, stats.errors) == (n, n, n, [])
    assert_index_exact(store)
    assert {h.path.name for h in store.search("module 7", k=50)} >= {"mod_7.py"}


def test_two_processes_adding_at_once_leave_one_exact_index(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write(
        tmp_path / "src", {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(120)}
    )
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "kb", "add", str(src)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with KnowledgeStore(ws.knowledge_db) as store:
        assert store.stats()["files"] == 120
        assert_index_exact(store)


def test_a_file_with_unchanged_size_and_mtime_is_not_opened(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    path = write(tmp_path, {"a.py": "alpha = 1\n"}) / "a.py"
    store.add([path])
    st = path.stat()
    path.write_text("omega = 1\n")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.add([path]).read == 0
    assert paths_of(store.search("alpha")) == ["a.py"]  # the content was not looked at


def test_a_touched_but_identical_file_is_read_and_not_reindexed(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    path = write(tmp_path, {"a.py": "alpha = 1\n"}) / "a.py"
    store.add([path])
    os.utime(path, ns=(1, 1))
    stats = store.add([path])
    assert (stats.read, stats.updated, stats.chunks) == (1, 0, 0)
    assert store.add([path]).read == 0


def test_edits_deletions_and_renames_keep_the_index_exact(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    src = write(
        tmp_path / "src",
        {
            "keep.py": PY_MODULE,
            "edit.py": "".join(f"def func_{i}():\n    return 'old_{i}'\n\n\n" for i in range(40)),
            "gone.py": "def vanishing_function():\n    pass\n",
            "old_name.md": "# Renamed document\n\nsome unique words: quixotic zephyr\n",
            "sub/deep.txt": "deep text\n",
        },
    )
    store.add([src])
    assert_index_exact(store)

    # Edit: insert lines at the top and change one function; later chunks shift.
    edit = src / "edit.py"
    edit.write_text("# new header\n# more\n" + edit.read_text().replace("old_7", "new_7"))
    (src / "gone.py").unlink()
    (src / "old_name.md").rename(src / "new_name.md")
    (src / "sub" / "deep.txt").unlink()
    (src / "sub").rmdir()
    stats = store.add([src])
    assert (stats.updated, stats.added, stats.removed) == (1, 1, 3)
    assert stats.chunks < 10  # only the changed chunks of edit.py were re-indexed
    assert_index_exact(store)

    assert store.search("vanishing") == []
    assert paths_of(store.search("quixotic zephyr")) == ["new_name.md"]
    assert store.search("old_7") == [] and paths_of(store.search("new_7")) == ["edit.py"]
    hit = store.search("func_39", k=1)[0]
    lines = edit.read_text().split("\n")
    assert "def func_39" in "\n".join(lines[hit.start_line - 1 : hit.end_line])


def test_a_deleted_file_given_by_name_is_removed_and_a_missing_unknown_path_is_an_error(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    path = write(tmp_path, {"a.py": "alpha = 1\n"}) / "a.py"
    store.add([path])
    path.unlink()
    assert store.add([path]).removed == 1
    assert store.search("alpha") == []
    with pytest.raises(NotFound, match="no such file or directory"):
        store.add([tmp_path / "never-there"])


def test_vcs_tool_and_virtualenv_directories_binary_and_huge_files_are_skipped(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    src = write(
        tmp_path / "src",
        {
            "main.py": "needle = 1\n",
            ".git/config": "needle\n",
            ".agentos/x.txt": "needle\n",
            "node_modules/pkg/index.js": "needle\n",
            "env/pyvenv.cfg": "home = /usr\n",
            "env/lib/site.py": "needle\n",
            "__pycache__/x.txt": "needle\n",
            "image.png": "needle\n",
        },
    )
    (src / "blob.dat2").write_bytes(b"needle\x00\x01\x02")
    (src / "huge.txt").write_text("needle\n" * (files.MAX_FILE_BYTES // 7 + 1))
    stats = store.add([src])
    assert paths_of(store.search("needle")) == ["main.py"]
    assert (stats.added, stats.skipped) == (1, 1)  # blob.dat2 was read, found binary
    assert store.add([src]).read == 0  # and remembered as binary


def test_remove_takes_files_and_directories_out_of_the_store(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    src = write(
        tmp_path / "src",
        {"a/x.py": "needle = 1\n", "a/y.py": "needle = 2\n", "b.py": "needle = 3\n"},
    )
    store.add([src])
    assert store.remove([src / "a"]) == 2
    assert paths_of(store.search("needle")) == ["b.py"]
    assert store.remove([src / "nothing-here"]) == 0
    assert store.stats()["files"] == 1


def test_stats_count_files_chunks_and_languages(store: KnowledgeStore, tmp_path: Path) -> None:
    write(tmp_path / "src", {"a.py": PY_MODULE, "b.md": "# Hi\n\ntext\n"})
    store.add([tmp_path / "src"])
    info = store.stats()
    assert (info["files"], info["binary_files"], info["languages"]) == (
        2,
        0,
        {"markdown": 1, "python": 1},
    )
    assert [(info["chunks"],)] == store.con.execute("SELECT count(*) FROM kb").fetchall()


def test_the_database_is_plain_sqlite_with_named_migrations(tmp_path: Path) -> None:
    KnowledgeStore(tmp_path / "kb.db").close()
    con = sqlite3.connect(tmp_path / "kb.db")
    assert con.execute("SELECT name FROM migrations").fetchall() == [("001_knowledge",)]


# --- context ------------------------------------------------------------------------------


def test_context_gives_the_best_chunks_within_the_budget_with_paths_and_lines(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    repo = write(
        tmp_path / "repo",
        {
            f"pkg/mod{i}.py": "".join(
                f"def retry_{i}_{j}(attempts):\n    '''Retry the request.'''\n"
                f"    return attempts\n\n\n"
                for j in range(8)
            )
            for i in range(6)
        },
    )
    store.add([repo])
    ctx = store.context("retry the request", budget_tokens=400, under=repo)
    assert 0 < ctx.tokens <= 400 and ctx.tokens == estimate_tokens(ctx.text)
    assert len(ctx.chunks) == len({(h.path, h.start_line) for h in ctx.chunks}) > 1
    for hit in ctx.chunks:
        rel = hit.path.relative_to(repo.resolve())
        assert f"## {rel}:{hit.start_line}-{hit.end_line}\n```python\n" in ctx.text
    scores = [h.score for h in ctx.chunks]
    assert scores == sorted(scores, reverse=True)
    bigger = store.context("retry the request", budget_tokens=4000, under=repo)
    assert len(bigger.chunks) > len(ctx.chunks)


def test_a_budget_smaller_than_the_best_chunk_gives_its_first_lines(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    path = write(tmp_path, {"a.py": "def needle():\n" + "    x = 1\n" * 60})
    store.add([path])
    ctx = store.context("needle", budget_tokens=60)
    assert ctx.tokens <= 60 and len(ctx.chunks) == 1
    hit = ctx.chunks[0]
    assert hit.start_line == 1 and 1 <= hit.end_line < 61
    assert ctx.text.count("\n    x = 1") == hit.end_line - 1


def test_context_under_a_repository_never_comes_from_another_even_one_that_ranks_higher(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    # A run's context: the orchestrator adds the run's repository to a store that already
    # holds others, then asks for context under it. Neighbours whose names extend the
    # repository's (app2, app0, app-old, app.bak sort on both sides of "app/") and another
    # repository all say more about the request, so they outrank the repository's own chunk.
    many = "".join(
        f'def retry_request_{i}(attempts):\n    """Retry the request with backoff."""\n'
        "    return attempts\n\n\n"
        for i in range(30)
    )
    app = write(tmp_path / "x/app", {"client.py": 'def send():\n    """Retry the request."""\n'})
    others = [
        write(tmp_path / "x" / name, {"client.py": many})
        for name in ("app2", "app0", "app-old", "app.bak")
    ]
    others.append(write(tmp_path / "y/other", {"client.py": many, "notes.md": "Retry the request"}))
    store.add([*others, app])
    query = "retry the request"
    best = store.search(query, len(others))
    assert len(best) == len(others) and app.resolve() not in {h.path.parent for h in best}
    for budget in (30, 200, 4000):
        ctx = store.context(query, budget, under=app)
        assert [h.path for h in ctx.chunks] == [(app / "client.py").resolve()], budget
        assert "## client.py:1-2\n" in ctx.text
        for other in others:
            assert str(other.resolve()) not in ctx.text
    hits = store.search(query, 50, under=app)
    assert [h.path for h in hits] == [(app / "client.py").resolve()]
    link = tmp_path / "link-to-app"
    link.symlink_to(app, target_is_directory=True)
    assert store.context(query, 4000, under=link) == store.context(query, 4000, under=app)


def test_context_with_no_match_is_empty_and_a_bad_budget_is_bad_input(
    store: KnowledgeStore,
) -> None:
    ctx = store.context("nothing indexed", 100)
    assert (ctx.text, ctx.chunks, ctx.tokens) == ("", [], 0)
    with pytest.raises(BadInput, match="budget: must be a positive number of tokens"):
        store.context("x", 0)


# --- the CLI ------------------------------------------------------------------------------


def _blank(doc: object) -> object:
    if isinstance(doc, dict):
        return {
            k: ("*" if k in {"score", "seconds", "last_indexed", "database_bytes"} else _blank(v))
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_blank(v) for v in doc]
    return doc


def test_kb_commands_print_whole_json_documents(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write(tmp_path / "src", {"mod.py": PY_MODULE, "notes.md": "# Notes\n\nrun often\n"})
    out = cli("kb", "add", str(src), "--json")
    assert out.returncode == 0 and out.stderr == ""
    assert _blank(json.loads(out.stdout)) == {
        "seen": 2,
        "read": 2,
        "added": 2,
        "updated": 0,
        "removed": 0,
        "skipped": 0,
        "chunks": 2,
        "seconds": "*",
        "errors": [],
    }
    out = cli("kb", "search", "run pending jobs", "-k", "1", "--json")
    assert _blank(json.loads(out.stdout)) == {
        "query": "run pending jobs",
        "hits": [
            {
                "path": str(src.resolve() / "mod.py"),
                "start_line": 1,
                "end_line": 17,
                "score": "*",
                "snippet": "def «run_pending»(«jobs»):",
                "language": "python",
            }
        ],
    }
    out = cli("kb", "stats", "--json")
    assert _blank(json.loads(out.stdout)) == {
        "database": str(ws.knowledge_db),
        "files": 2,
        "binary_files": 0,
        "chunks": 2,
        "bytes": len(PY_MODULE) + len("# Notes\n\nrun often\n"),
        "languages": {"markdown": 1, "python": 1},
        "last_indexed": "*",
        "database_bytes": "*",
    }
    out = cli("kb", "context", "run often", "--budget", "40", "--under", str(src), "--json")
    doc = json.loads(out.stdout)
    assert doc["text"] == (
        "# Context from the knowledge store\n\n## notes.md:1-3\n```markdown"
        "\n# Notes\n\nrun often\n```\n"
    )
    assert doc["tokens"] == estimate_tokens(doc["text"]) and len(doc["chunks"]) == 1
    out = cli("kb", "remove", str(src / "notes.md"), "--json")
    assert json.loads(out.stdout) == {"removed": 1}
    assert json.loads(cli("kb", "search", "", "--json").stdout) == {"query": "", "hits": []}


def test_kb_search_prints_ranked_hits_with_marked_snippets(cli: CliRunner, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"mod.py": PY_MODULE})
    cli("kb", "add", str(src))
    out = cli("kb", "search", "scheduler", "every", cwd=src)
    assert out.returncode == 0
    assert re.fullmatch(
        r" 1\. mod\.py:1-17  \d+\.\d\d python\n"
        r'    """«Scheduling» of periodic jobs\."""\n',
        out.stdout,
    ), out.stdout
    assert cli("kb", "search", 'NEAR("').stdout == "no results\n"


def test_kb_add_of_a_missing_path_is_a_one_line_error(cli: CliRunner, tmp_path: Path) -> None:
    out = cli("kb", "add", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert out.stderr == f"error: {tmp_path / 'missing'}: no such file or directory\n"


# --- the docs-indexer agent ---------------------------------------------------------------


def test_docs_indexer_feeds_the_target_repository_into_the_workspace_store(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = write(
        tmp_path / "repo",
        {
            "app.py": "def unique_marker_function():\n    pass\n",
            "docs/guide.md": "# Guide\n\nmarker text\n",
        },
    )
    package = ws.hub_dir / "docs-indexer" / "1.0.0"
    # The python runtime's own entry runner, in the agent's worktree, as a run starts it.
    env = {
        **os.environ,
        "AGENTOS_WORKSPACE": str(ws.root),
        "AGENTOS_REPO": str(repo),
        "AGENTOS_RUN_ID": "run-1",
        "AGENTOS_AGENT": "docs-indexer",
        "AGENTOS_REQUEST": "index the docs",
    }
    argv = [
        sys.executable,
        "-m",
        "agentos.runtimes.entry",
        str(package),
        "indexer:main",
        str(tmp_path / "no-context.md"),
    ]
    for expected in ("2 files seen, 2 read, 2 added", "2 files seen, 0 read, 0 added"):
        out = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout
    with KnowledgeStore(ws.knowledge_db) as store:
        assert paths_of(store.search("unique_marker_function")) == ["app.py"]
        assert store.stats()["files"] == 2
    assert sorted(p.name for p in repo.rglob("*")) == ["app.py", "docs", "guide.md"]


def test_the_bundled_hub_lock_records_the_docs_indexer(cli: CliRunner) -> None:
    out = cli("hub", "verify", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ok"], out.stdout
    out = cli("hub", "show", "docs-indexer", "--json")
    assert json.loads(out.stdout)["manifest"]["entry"] == "indexer:main"


@pytest.mark.parametrize(
    ("request_text", "routed"),
    [
        ("index the docs into the knowledge store", True),
        ("reindex the repository docs", True),
        ("update the docs for the parser", False),
        ("fix the bug in the index page", False),
    ],
    ids=["index-docs", "reindex", "docs-edit", "fix"],
)
def test_the_index_docs_card_routes_indexing_requests_only(
    ws: Workspace, request_text: str, routed: bool
) -> None:
    from agentos.routing.router import decide

    decision = decide(ws, request_text)
    chosen = {s.card: s.agent for s in decision.selected}
    assert (chosen.get("index-docs") == "docs-indexer") is routed


def test_what_gitignore_excludes_is_not_indexed(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {".gitignore": "build/\n*.log\n", "src/app.py": "def parse_widget():\n    return 1\n"},
    )
    (repo / "build").mkdir()
    (repo / "build" / "app.py").write_text("def parse_widget():\n    return 'stale copy'\n")
    (repo / "debug.log").write_text("parse_widget failed\n")
    (repo / "src" / "notes.md").write_text("# parse_widget\n\nUntracked but not ignored.\n")

    with KnowledgeStore(tmp_path / "k.db") as store:
        store.add([repo])
        found = {Path(h.path).relative_to(repo).as_posix() for h in store.search("parse_widget")}

    assert found == {"src/app.py", "src/notes.md"}
