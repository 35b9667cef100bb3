"""Damaged and locked databases (issue 16, item 12), through the real CLI in subprocesses.

``state.db`` and ``knowledge.db`` truncated, overwritten with random bytes (whole, or every
page after the first), emptied, or held by another real process (``BEGIN EXCLUSIVE``).
A damaged state.db is one line naming it and what to do, exit code 2, and is left as it
was; an empty one is a new database. A damaged knowledge store never stops a run: it is
set aside and rebuilt, and one line says so. A locked database waits for the busy
timeout (``AGENTOS_BUSY_TIMEOUT``, one second here), then names the file and its holder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import CliRunner, Lines, add_agent, make_repo, needs_tmux

from agentos.knowledge.store import open_store
from agentos.run.store import RunStatus, RunStore
from agentos.state import database
from agentos.state.errors import inode, set_aside
from agentos.workspace.layout import Workspace

PAGE = 4096
WRITER = 'echo "written by $AGENTOS_AGENT" >> notes.txt\n'
BUSY = {"AGENTOS_BUSY_TIMEOUT": "1"}


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def random_bytes(data: bytes) -> bytes:
    return os.urandom(len(data))


def pages_overwritten(data: bytes) -> bytes:
    """The header page intact, every other page random: found on the first query, not on
    opening."""
    return data[:PAGE] + os.urandom(len(data) - PAGE)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": truncated,
    "random-bytes": random_bytes,
    "pages-overwritten": pages_overwritten,
}


def sqlite_says(how: Callable[[bytes], bytes]) -> str:
    """SQLite's own words for the damage: no header at all, or a header and broken pages."""
    return "file is not a database" if how is random_bytes else "database disk image is malformed"


def damage(path: Path, how: Callable[[bytes], bytes]) -> bytes:
    """Damage the closed database at ``path`` (its WAL checkpointed away); the new bytes."""
    assert not Path(f"{path}-wal").exists()
    data = how(path.read_bytes())
    path.write_bytes(data)
    return data


def filled_state_db(ws: Workspace) -> Path:
    """A state.db of many pages: finished runs, and no guardian tables yet."""
    store = RunStore(ws)
    for n in range(40):
        store.create(f"run-{n}", f"request {n} " + "x" * 400, ws.root, status=RunStatus.SUCCEEDED)
    store.close()
    assert ws.state_db.stat().st_size > 8 * PAGE
    return ws.state_db


def filled_knowledge_db(ws: Workspace) -> Path:
    with open_store(ws) as store:
        store.add([Path(database.__file__).parent])
    assert ws.knowledge_db.stat().st_size > 8 * PAGE
    return ws.knowledge_db


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# target\n", "notes.txt": "start\n"})


HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "exclusive":  # readers wait too, not only writers
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hold() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Another process holding a database with ``BEGIN EXCLUSIVE`` until the test ends."""
    holders: list[subprocess.Popen[str]] = []

    def start(path: Path, mode: str = "normal") -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(proc)
        assert Lines(proc.stdout).next(timeout=60, what="the holder") == "held\n"
        return proc

    yield start
    for proc in holders:
        with proc:  # closes its pipes
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=10)


# --- state.db -----------------------------------------------------------------------------

COMMANDS = {
    "runs-list": ("runs", "list"),
    "gc": ("gc",),
    "status": ("status",),
    "run": ("run", "writer-task", "--force", "--json"),
}


def _argv(command: str, repo: Path) -> tuple[str, ...]:
    args = COMMANDS[command]
    return (*args, "--repo", str(repo)) if command == "run" else args


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_state_db_is_one_line_naming_it_and_is_left_as_it_was(
    ws: Workspace, cli: CliRunner, repo: Path, how: Callable[[bytes], bytes], command: str
) -> None:
    damaged = damage(filled_state_db(ws), how)

    out = cli(*_argv(command, repo))

    assert out.returncode == 2, out.stderr
    assert one_line(out.stderr) == (
        f"error: {ws.state_db}: damaged or not a SQLite database "
        f"({sqlite_says(how)})"
        "; move it aside (to state.db.broken, say) and AgentOS starts a new, empty one"
    )
    assert out.stdout == ""
    assert ws.state_db.read_bytes() == damaged


@pytest.mark.parametrize("command", ["runs-list", "gc", "status"])
def test_an_empty_state_db_is_a_new_database(
    ws: Workspace, cli: CliRunner, repo: Path, command: str
) -> None:
    ws.state_db.parent.mkdir(parents=True, exist_ok=True)
    ws.state_db.write_bytes(b"")

    out = cli(*_argv(command, repo))

    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert RunStore(ws).list() == []  # created with every migration


@pytest.mark.parametrize("command", ["gc", "run"])
def test_a_state_db_another_process_holds_names_it_and_the_holder_after_the_busy_timeout(
    ws: Workspace,
    cli: CliRunner,
    repo: Path,
    hold: Callable[..., subprocess.Popen[str]],
    command: str,
) -> None:
    filled_state_db(ws)
    if command == "gc":  # a run whose orchestrator died: gc must write to abort it
        store = RunStore(ws)
        store.create("run-dead", "request", repo, status=RunStatus.RUNNING)
        store.update("run-dead", pid=None)
        store.close()
    holder = hold(ws.state_db)

    started = time.monotonic()
    out = cli(*_argv(command, repo), env=BUSY)

    assert time.monotonic() - started >= 1
    assert out.returncode == 2, out.stderr
    line = one_line(out.stderr)
    assert line.startswith(
        f"error: {ws.state_db}: locked by another process (pid {holder.pid}: {sys.executable} -c"
    ), line
    assert line.endswith("past the 1 s busy timeout; let it finish or end it, then try again"), line


@pytest.mark.parametrize("command", ["runs-list", "status"])
def test_read_only_commands_read_while_another_process_writes(
    ws: Workspace, cli: CliRunner, hold: Callable[..., subprocess.Popen[str]], command: str
) -> None:
    filled_state_db(ws)
    hold(ws.state_db)

    out = cli(*COMMANDS[command], "--json", env=BUSY)

    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    listed = json.loads(out.stdout)["runs"]
    assert len(listed) == (20 if command == "runs-list" else 0)  # status: live runs only


def test_runs_list_names_a_holder_that_keeps_readers_out(
    ws: Workspace, cli: CliRunner, hold: Callable[..., subprocess.Popen[str]]
) -> None:
    filled_state_db(ws)
    holder = hold(ws.state_db, "exclusive")

    out = cli("runs", "list", env=BUSY)

    assert out.returncode == 2, out.stderr
    assert one_line(out.stderr).startswith(
        f"error: {ws.state_db}: locked by another process (pid {holder.pid}: "
    )


def test_a_bad_busy_timeout_is_named(ws: Workspace, cli: CliRunner) -> None:
    out = cli("runs", "list", env={"AGENTOS_BUSY_TIMEOUT": "soon"})

    assert out.returncode == 2
    assert one_line(out.stderr) == (
        "error: AGENTOS_BUSY_TIMEOUT: must be seconds between 0 and 3600, not 'soon'"
    )


# --- knowledge.db ---------------------------------------------------------------------------


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
@pytest.mark.parametrize("how", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_knowledge_db_is_set_aside_and_the_run_goes_on(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path, how: Callable[[bytes], bytes]
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    damaged = damage(filled_knowledge_db(ws), how)

    out = cli("run", "writer-task", "--repo", str(repo), "--force", "--json")

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"
    assert one_line(out.stderr) == (
        f"{ws.knowledge_db}: damaged or not a SQLite database "
        f"({sqlite_says(how)})"
        "; set aside as knowledge.db.broken, a new knowledge store starts empty and "
        "indexes files as they are added"
    )
    assert (ws.state_dir / "knowledge.db.broken").read_bytes() == damaged
    with open_store(ws) as store:
        assert store.stats()["files"] == 2  # the run indexed its repository again


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_a_run_on_an_empty_state_db_and_knowledge_db_starts_both_afresh(
    ws: Workspace, cli: CliRunner, tmp_path: Path, repo: Path
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    ws.state_db.write_bytes(b"")
    ws.knowledge_db.write_bytes(b"")

    out = cli("run", "writer-task", "--repo", str(repo), "--force", "--json")

    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    run = json.loads(out.stdout)["run"]
    assert RunStore(ws).get(run).status == "succeeded"
    assert not (ws.state_dir / "knowledge.db.broken").exists()


@pytest.mark.parametrize("how", DAMAGE.values(), ids=DAMAGE.keys())
def test_kb_search_on_a_damaged_knowledge_db_says_it_started_afresh(
    ws: Workspace, cli: CliRunner, how: Callable[[bytes], bytes]
) -> None:
    damage(filled_knowledge_db(ws), how)

    out = cli("kb", "search", "busy timeout")

    assert out.returncode == 0, out.stderr
    assert "set aside as knowledge.db.broken" in one_line(out.stderr)
    assert out.stdout == "no results\n"


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_a_knowledge_db_another_process_holds_fails_the_run_with_one_line(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    repo: Path,
    hold: Callable[..., subprocess.Popen[str]],
) -> None:
    add_agent(ws, tmp_path, "writer", WRITER)
    filled_knowledge_db(ws)
    holder = hold(ws.knowledge_db)

    out = cli("run", "writer-task", "--repo", str(repo), "--force", "--json", env=BUSY)

    assert out.returncode == 2, out.stderr
    assert one_line(out.stderr).startswith(
        f"error: {ws.knowledge_db}: locked by another process (pid {holder.pid}: "
    )
    assert [r.status for r in RunStore(ws).list()] == ["failed"]


def test_a_store_another_process_set_aside_first_is_not_moved_again(ws: Workspace) -> None:
    path = filled_knowledge_db(ws)
    seen = inode(path)
    assert set_aside(path, seen) == path.with_name("knowledge.db.broken")
    with open_store(ws) as store:  # the other process's new store
        store.add([Path(database.__file__)])

    assert set_aside(path, seen) is None
    with open_store(ws) as store:
        assert store.stats()["files"] == 1


def test_damaged_kept_settings_and_hub_versions_are_made_again(
    ws: Workspace, cli: CliRunner
) -> None:
    """What the read-only commands keep in .agentos/cache (the validated settings and
    hub.lock's versions) is a cache: damaged or foreign content is validated again."""
    import marshal

    before = json.loads(cli("route", "fix the lint errors", "--json").stdout)
    listed = cli("hub", "list", "--json").stdout
    cache = ws.state_dir / "cache"
    (kept_versions,) = cache.glob("hub-versions-*.marshal")
    for settings, versions in (
        (b"[1, 2]", marshal.dumps({"ruff-fixer": ("9.9.9", {"9.9.9": ("x",)})})),
        (b'{"digest": 5}', b"\x00garbage"),
        (b"not json", marshal.dumps(["a list"])),
    ):
        (cache / "settings.json").write_bytes(settings)
        kept_versions.write_bytes(versions)

        again = cli("route", "fix the lint errors", "--json")
        assert again.returncode == 0 and again.stderr == "", again.stderr
        assert json.loads(again.stdout)["selected"] == before["selected"]
        assert cli("hub", "list", "--json").stdout == listed
