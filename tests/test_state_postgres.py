"""The state on PostgreSQL (issue 35), against a real server the suite starts
(tests/_postgres.py): what cannot be used is one line naming the URL (password masked) and
the fix; psycopg is imported only when the state is there; followers wait on the server's
announcements and ask nothing in between; the receipts chain lives in a table; a workspace
migrates into an empty database; many machines share one state."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Lines, add_agent, make_repo, needs_tmux, tree_listing, wait_until

from agentos.receipts import write_receipt
from agentos.run.orchestrator import start_run
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace


def _blank(text: str, server: Any) -> str:
    return text.replace(str(server.root), "SERVER")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {"env": "postgresql://agentos@/agentos?host=/nonexistent-socket-dir"},
            "error: postgresql://agentos@/agentos?host=/nonexistent-socket-dir: cannot reach the "
            "server (socket /nonexistent-socket-dir/.s.PGSQL.5432: No such file or directory): "
            "start it, or correct the host and port in AGENTOS_STATE_URL or state: in "
            "agentos.yaml",
        ),
        (
            {"env": "postgresql://secret:not-the-password@/agentos_shared?host=SERVER"},
            "error: postgresql://secret:***@/agentos_shared?host=SERVER: the server refused the "
            'credentials (password authentication failed for user "secret"): give the password '
            "in AGENTOS_STATE_URL, PGPASSWORD or ~/.pgpass (never in agentos.yaml), or create "
            "the user (see docs/state.md)",
        ),
        (
            {"env": "postgresql://postgres@/no_such_db?host=SERVER&password=pw"},
            "error: postgresql://postgres@/no_such_db?host=SERVER&password=***: the database "
            "no_such_db does not exist on this server: create it, owned by the user AgentOS "
            "connects as (createdb -O USER no_such_db; see docs/state.md)",
        ),
        (
            {"env": "mysql://root:hunter2@db.example/agentos"},
            "error: AGENTOS_STATE_URL: mysql://root:***@db.example/agentos is not a PostgreSQL "
            "URL: it must look like postgresql://USER@HOST:PORT/DB (or be unset: the state is "
            "then SQLite, the default)",
        ),
        (
            {"yaml": "state: postgresql://agentos:hunter2@db.example:5432/agentos\n"},
            "error: WS/agentos.yaml: state: postgresql://agentos:***@db.example:5432/agentos "
            "holds a password: agentos.yaml is no place for it; give it in AGENTOS_STATE_URL, "
            "PGPASSWORD or ~/.pgpass and write the URL here without it",
        ),
        (
            {"yaml": "state: sqlite:///tmp/state.db\n"},
            "error: WS/agentos.yaml: state: sqlite:///tmp/state.db is not a PostgreSQL URL: it "
            "must look like postgresql://USER@HOST:PORT/DB (or be unset: the state is then "
            "SQLite, the default)",
        ),
    ],
    ids=[
        "unreachable",
        "wrong-credentials",
        "missing-database",
        "not-postgresql",
        "password-in-agentos-yaml",
        "not-a-postgresql-url-in-agentos-yaml",
    ],
)
def test_a_state_that_cannot_be_used_is_one_line_naming_the_url_masked_and_the_fix(
    cli: Any, ws: Workspace, pg_server: Any, given: dict[str, str], expected: str
) -> None:
    env = {}
    if "env" in given:
        env = {"AGENTOS_STATE_URL": given["env"].replace("SERVER", str(pg_server.root))}
    else:
        ws.settings_file.write_text("run: {guardian: false}\n" + given["yaml"])

    def written() -> list[str]:  # but the cache (compiled cards, settings): safe to delete
        return [p for p in tree_listing(ws.root) if not p.startswith(".agentos/cache")]

    before = written()
    for command in (("runs", "list"), ("run", "fix-task", "--force"), ("state", "show")):
        out = cli(*command, env=env)
        shown = _blank(out.stderr, pg_server).replace(str(ws.root), "WS")
        assert (out.returncode, out.stdout, shown) == (2, "", expected + "\n"), command
    assert written() == before  # nothing half-written: no run, no receipt, no log
    secrets = [p for p in ws.root.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
    assert secrets == ([ws.settings_file] if "hunter2" in given.get("yaml", "") else [])


def test_a_database_whose_schema_is_newer_than_this_agentos_is_refused_in_one_line(
    cli: Any, pg_server: Any
) -> None:
    database = pg_server.database()
    pg_server.sql("INSERT INTO migrations VALUES ('002_from_the_future', 0)", database=database)
    url = pg_server.url(database)

    out = cli("runs", "list", env={"AGENTOS_STATE_URL": url})

    assert (out.returncode, out.stdout, _blank(out.stderr, pg_server)) == (
        2,
        "",
        f"error: postgresql://postgres@/{database}?host=SERVER: its schema is newer than this "
        "AgentOS (it has migration 002_from_the_future, which this version does not know): "
        "upgrade AgentOS on this machine to use it\n",
    )


def test_doctor_checks_the_states_connection_and_schema(
    cli: Any, ws: Workspace, pg_server: Any, pg_url: str
) -> None:
    from agentos.state.host import host_id

    good = json.loads(cli("doctor", "--json").stdout)
    bad = cli("doctor", env={"AGENTOS_STATE_URL": pg_server.url("no_such_db")})

    state = next(c for c in good["checks"] if c["name"] == "state")
    assert (state["ready"], _blank(state["detail"], pg_server)) == (
        True,
        f"postgresql://postgres@/agentos_shared?host=SERVER (postgresql): schema 001_state; "
        f"this host {host_id()}",
    )
    assert bad.returncode == 1
    assert [_blank(line, pg_server) for line in bad.stdout.splitlines()[-2:]] == [
        "state: postgresql://postgres@/no_such_db?host=SERVER: the database no_such_db does "
        "not exist on this server: create it, owned by the user AgentOS connects as "
        "(createdb -O USER no_such_db; see docs/state.md)",
        "not ready: the state cannot be used (fix what the `state:` line says)",
    ]


def _modules_after(args: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """The exit code of ``agentos ARGS`` in a new process, and the modules it imported."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['agentos', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('agentos', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "else:\n"
        "    code = 0\n"
        "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    line = next(x for x in out.stderr.splitlines() if x.startswith("MODULES "))
    return out.returncode, set(line.split()[1:])


@pytest.mark.process
def test_psycopg_is_imported_only_when_the_state_is_postgresql(
    ws: Workspace, pg_server: Any
) -> None:
    url = pg_server.url(pg_server.fresh())
    for args in (["runs", "list"], ["status"], ["events"], ["receipts", "list"]):
        argv = ["--workspace", str(ws.root), *args]
        sqlite_code, on_sqlite = _modules_after(argv, {})
        pg_code, on_postgres = _modules_after(argv, {"AGENTOS_STATE_URL": url})
        assert (sqlite_code, pg_code) == (0, 0), args
        assert not {m for m in on_sqlite if m.split(".")[0] in ("psycopg", "psycopg_pool")}
        assert "agentos.state.postgres" not in on_sqlite
        assert {"psycopg", "agentos.state.postgres"} <= on_postgres, args


@pytest.mark.process
def test_a_follower_issues_no_query_between_the_servers_announcements(
    ws: Workspace, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentos events --follow` on PostgreSQL: while nothing is written it sends the server
    nothing at all; each event written (by another process) wakes it, and it reads once."""
    database = pg_server.database()
    pg_server.sql(f"ALTER DATABASE {database} SET log_statement = 'all'")
    url = pg_server.url(database)
    monkeypatch.setenv("AGENTOS_STATE_URL", url)
    env = {**os.environ}
    writer = [sys.executable, "-m", "agentos", "--workspace", str(ws.root)]
    follower = subprocess.Popen(
        [*writer, "events", "--follow"], stdout=subprocess.PIPE, text=True, env=env
    )
    lines = Lines(follower.stdout)

    def backends() -> list[tuple[int, str, float]]:  # the follower's: (pid, state, idle for)
        # (A connection still starting has no state, nor a time it changed: idle for 0.)
        return [
            (int(pid), str(state), float(idle or 0.0))
            for pid, state, idle in pg_server.sql(
                "SELECT pid, state, EXTRACT(EPOCH FROM now() - state_change) "
                "FROM pg_stat_activity WHERE datname = %s AND application_name = 'agentos'",
                (database,),
            )
        ]

    def statements(pids: set[int], since: int) -> list[str]:
        found = []
        for line in pg_server.log_lines()[since:]:
            m = re.match(
                r"\S+ \S+ \S+ \[(\d+)\] .*?: LOG:  (?:statement|execute [^:]*): (.*)", line
            )
            if m and int(m.group(1)) in pids:
                found.append(m.group(2))
        return found

    with follower:
        try:
            # Up: its store and its listener connected, both idle for over a second (five
            # times the interval a poller would have read the table at).
            wait_until(
                lambda: (
                    len(backends()) == 2
                    and all(state == "idle" and idle > 1.0 for _, state, idle in backends())
                ),
                what="the follower's two connections idle",
            )
            pids = {pid for pid, _, _ in backends()}
            quiet = len(pg_server.log_lines())
            wait_until(
                lambda: all(idle > 2.0 for _, _, idle in backends()), what="two quiet seconds"
            )
            assert statements(pids, quiet) == []  # nothing asked while nothing happened
            for n in (1, 2):
                subprocess.run(
                    [*writer, "runs", "list"], env=env, check=True, capture_output=True
                )  # another process connects and reads, writes no event: no wake
                store = RunStore(Workspace(ws.root))
                store.record_event("test", "note", f"event {n}", run=f"r{n}")
                store.close()
                assert f"r{n} note: event {n}" in lines.next(what=f"event {n}")
            woken = statements(pids, quiet)
        finally:
            follower.terminate()
            follower.wait(timeout=10)
    assert (
        woken
        == [
            "SELECT id, at, source, kind, run, seq, task, agent, status, message FROM events "
            "WHERE id > $1  ORDER BY id LIMIT $2"
        ]
        * 2
    ), woken


def test_the_dashboards_stream_on_postgresql_sends_an_event_another_process_writes(
    ws: Workspace, pg_url: str, tmp_path: Path
) -> None:
    import httpx

    with (tmp_path / "dashboard.log").open("w") as log:
        board = subprocess.Popen(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "dashboard",
             "--http", "127.0.0.1:0", "--repo", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    with board:
        try:
            line = Lines(board.stdout).until(lambda x: "#token=" in x, what="the URL")[-1]
            url = re.search(r"http://127\.0\.0\.1:\d+", line)
            assert url, line
            with (
                httpx.Client(base_url=url[0], timeout=30) as http,
                http.stream("GET", "/api/stream") as stream,
            ):
                chunks = stream.iter_lines()
                subprocess.run(
                    [sys.executable, "-c",
                     "import sys; from agentos.run.events import record; "
                     "from agentos.workspace.layout import Workspace; "
                     "record(Workspace(__import__('pathlib').Path(sys.argv[1])), 'test', "
                     "'note', 'from another process', run='r9')", str(ws.root)],
                    check=True,
                )  # fmt: skip
                data = next(c for c in chunks if c.startswith("data: "))
        finally:
            board.terminate()
            board.wait(timeout=15)
    event = json.loads(data.removeprefix("data: "))
    assert {k: v for k, v in event.items() if k != "at"} == {
        "id": 1, "source": "test", "kind": "note", "run": "r9", "message": "from another process"
    }  # fmt: skip


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_no_agent_gets_the_states_url_even_when_its_package_lists_it(
    ws: Workspace, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_STATE_URL", pg_url + "&password=hunter2")  # trust: unused
    add_agent(ws, tmp_path, "envdump", "env | sort > env.txt\n", env=["AGENTOS_STATE_URL"])
    repo = make_repo(tmp_path / "repo")

    report = start_run(ws, "envdump-task", repo, force=True)

    assert report.status == "succeeded", report.message
    seen = (repo / "env.txt").read_text()
    assert "AGENTOS_STATE_URL" not in seen and "hunter2" not in seen
    assert f"AGENTOS_RUN_ID={report.run_id}\n" in seen


# -- receipts in the state's table -----------------------------------------------------------


def test_a_receipt_changed_or_removed_in_the_table_is_named_by_verify(
    cli: Any, ws: Workspace, pg_server: Any, pg_url: str
) -> None:
    for i in range(4):
        write_receipt(ws, "note", {"i": i})
    assert cli("receipts", "verify").stdout == "receipts verified: 4 receipts, chain intact\n"
    pg_server.sql(
        "UPDATE receipts SET text = convert_to(replace(convert_from(text, 'UTF8'), 'i: 1', "
        "'i: 9'), 'UTF8') WHERE seq = 2",
        database="agentos_shared",
    )
    pg_server.sql("DELETE FROM receipts WHERE seq = 4", database="agentos_shared")

    out = cli("receipts", "verify")

    assert (out.returncode, out.stdout) == (
        1,
        "problem: 00000002: changed after it was written (content does not match its sha256)\n"
        "problem: 00000004: missing: removed from the chain's end (AgentOS last wrote "
        "00000004)\n",
    )


def test_a_machine_without_the_key_verifies_hashes_only_writes_nothing_until_it_imports_it(
    cli: Any, ws: Workspace, tmp_path: Path, pg_url: str
) -> None:
    from agentos.workspace.layout import init_workspace

    other, _ = init_workspace(tmp_path / "other-machine")
    other.settings_file.write_text("run: {guardian: false}\n")
    write_receipt(ws, "note", {"by": "the first machine"})  # makes the key, there only
    key = tmp_path / "receipts.key"
    assert cli("receipts", "key", "export", "--out", str(key)).returncode == 0

    verified = cli("receipts", "verify", workspace=other.root)
    request = "fix the lint errors in the parser"
    refused = cli("route", request, workspace=other.root)
    imported = cli("receipts", "key", "import", str(key), workspace=other.root)
    written = cli("route", request, workspace=other.root)
    both = cli("receipts", "verify", "--json", workspace=other.root)

    assert (verified.returncode, verified.stdout) == (
        0,
        "receipts verified: 1 receipt, chain intact\n"
        "note: this machine holds no receipts key (.agentos/receipts.key), so the receipts "
        "were verified by hashes only: `agentos receipts key import FILE` (the key of a "
        "machine that writes them) checks their MACs too\n"
        "note: hashes only: MACs and the anchor were not checked (no key was read); hashes, "
        "links and signed_from lines were\n",
    )
    assert refused.returncode == 2 and refused.stderr.startswith(
        f"error: {other.state_dir}/receipts.key: is missing, and this workspace's receipts "
        "were signed (the receipts_marks table's anchor exists): restore it"
    ), refused.stderr
    assert imported.returncode == 0 and written.returncode == 0, imported.stderr + written.stderr
    assert json.loads(both.stdout) == {
        "ok": True, "receipts": 2, "macs_checked": True, "problems": [], "notes": []
    }  # fmt: skip


def test_the_chain_exported_as_files_verifies_offline_and_an_edit_there_is_named(
    cli: Any, ws: Workspace, tmp_path: Path, pg_url: str
) -> None:
    for i in range(3):
        write_receipt(ws, "note", {"i": i}, run_id="r1")
    out = tmp_path / "exported"

    exported = cli("receipts", "export", str(out))
    offline = cli("receipts", "verify", "--dir", str(out), env={"AGENTOS_STATE_URL": ""})
    again = cli("receipts", "export", str(out))
    texts = [cli("receipts", "show", str(i)).stdout for i in (1, 2, 3)]
    (out / "00000002.txt").write_text(texts[1].replace("i: 1", "i: 7"))
    edited = cli("receipts", "verify", "--dir", str(out), "--hashes-only")

    assert exported.stdout == f"3 receipts written to {out}\n"
    assert sorted(p.name for p in out.iterdir()) == [
        ".head", "00000001.txt", "00000002.txt", "00000003.txt", "receipts.anchor"
    ]  # fmt: skip
    assert [(out / f"0000000{i}.txt").read_text() for i in (1, 3)] == [texts[0], texts[2]]
    assert offline.stdout == "receipts verified: 3 receipts, chain intact\n", offline.stderr
    assert again.returncode == 2 and "exists and is not an empty folder" in again.stderr
    assert edited.stdout.splitlines()[0] == (
        "problem: 00000002: changed after it was written (content does not match its sha256)"
    )
