"""Workspace discovery, `agentos init`, agentos.yaml validation and state migrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
import yaml
from conftest import REPO_ROOT, CliRunner
from pydantic import BaseModel

from agentos.errors import NotFound
from agentos.hub.store import Hub
from agentos.state import sqlite
from agentos.state.migrations import SQLITE_MIGRATIONS, Migration
from agentos.workspace.layout import Workspace, find_workspace, init_workspace, locate_workspace
from agentos.workspace.settings import Settings


def test_init_seeds_bundled_agents_and_cards_and_keeps_existing_files(
    cli: CliRunner, tmp_path: Path
) -> None:
    target = tmp_path / "new-ws"
    first = cli("init", str(target), "--json", workspace=None)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "workspace": str(target),
        "created": ["hub/", "routing_cards/", "receipts/", ".agentos/", "agentos.yaml"],
    }
    bundled = {p.name for p in (REPO_ROOT / "routing_cards").glob("*.yaml")}
    assert {p.name for p in (target / "routing_cards").glob("*.yaml")} == bundled
    assert Hub(target / "hub").verify() == []
    assert "ruff-fixer" in {v.name for v in Hub(target / "hub").versions()}

    (target / "agentos.yaml").write_text("run: {retries: 5}\n")
    again = cli("init", str(target), "--json", workspace=None)
    assert json.loads(again.stdout)["created"] == []
    assert (target / "agentos.yaml").read_text() == "run: {retries: 5}\n"


def test_init_takes_the_global_workspace_option_as_its_directory(
    cli: CliRunner, tmp_path: Path
) -> None:
    target, other = tmp_path / "given", tmp_path / "other"
    made = cli("--workspace", str(target), "init", "--json", workspace=None)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["workspace"] == str(target)
    assert (target / ".agentos").is_dir()

    both = cli("--workspace", str(target), "init", str(other), workspace=None)
    assert both.returncode == 2
    assert both.stderr.count("\n") == 1 and "two directories" in both.stderr
    assert not other.exists()
    same = cli("--workspace", str(target), "init", str(target), "--json", workspace=None)
    assert same.returncode == 0 and json.loads(same.stdout)["created"] == []


def _keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key path of nested mappings: run, run.budget, run.budget.tokens..."""
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        if isinstance(value, dict):
            out |= _keys(value, f"{prefix}{key}.")
    return out


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, info in model.model_fields.items():
        out.add(prefix + name)
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out |= _model_keys(kind, f"{prefix}{name}.")
    return out


def test_init_writes_every_setting_with_its_default_commented_out(
    cli: CliRunner, tmp_path: Path
) -> None:
    """The agentos.yaml `init` writes says it lists every key with its default: it does
    (every field of the settings model, nested ones too), each parses to the model's
    default, and the file as written sets nothing."""
    target = tmp_path / "new-ws"
    assert cli("init", str(target), workspace=None).returncode == 0
    text = (target / "agentos.yaml").read_text()
    lines = text.splitlines()
    assert all(line.startswith("# ") for line in lines), text
    assert "docs/formats.md" in text
    first = next(
        i for i, line in enumerate(lines) if line[2:].split(":")[0] in Settings.model_fields
    )
    assert "every key with its default" in " ".join(lines[:first])
    shown = yaml.safe_load("\n".join(line[2:] for line in lines[first:]))
    assert _keys(shown) == _model_keys(Settings)
    assert Settings.model_validate(shown) == Settings()
    assert Settings.model_validate(yaml.safe_load(text) or {}) == Settings()
    uncommented = target / "agentos.yaml"
    uncommented.write_text(yaml.safe_dump(shown, sort_keys=False))
    listed = cli("runs", "list", "--json", workspace=target)  # the CLI reads it as valid
    assert listed.returncode == 0, listed.stderr


def test_workspace_is_found_from_flag_then_env_then_nearest_parent(tmp_path: Path) -> None:
    a, _ = init_workspace(tmp_path / "a")
    b, _ = init_workspace(tmp_path / "b")
    deep = b.root / "x" / "y"
    deep.mkdir(parents=True)
    env = {"AGENTOS_HOME": str(a.root)}
    assert find_workspace(str(b.root), cwd=deep, env=env).root == b.root
    assert find_workspace(None, cwd=deep, env=env).root == a.root
    assert find_workspace(None, cwd=deep, env={}).root == b.root


def test_without_any_workspace_the_checkout_is_the_workspace(tmp_path: Path) -> None:
    assert find_workspace(None, cwd=tmp_path, env={}).root == REPO_ROOT


def test_each_workspace_says_how_it_was_found(tmp_path: Path) -> None:
    a, _ = init_workspace(tmp_path / "a")
    deep = a.root / "x"
    deep.mkdir()
    found = [
        locate_workspace(str(a.root), cwd=tmp_path, env={}),
        locate_workspace(None, cwd=tmp_path, env={"AGENTOS_HOME": str(a.root)}),
        locate_workspace(None, cwd=deep, env={}),
        locate_workspace(None, cwd=tmp_path, env={}),
    ]
    assert [(f.workspace.root, f.origin) for f in found] == [
        (a.root, "--workspace"),
        (a.root, "AGENTOS_HOME"),
        (a.root, ".agentos"),
        (REPO_ROOT, "checkout"),
    ]
    assert [f.notice for f in found[:3]] == [None, None, None]
    assert found[3].notice == (
        f"no workspace found from {tmp_path.resolve()}; using the AgentOS checkout {REPO_ROOT} "
        "(set AGENTOS_HOME or run agentos init)"
    )


def test_from_inside_the_checkout_the_checkout_is_found_without_a_notice() -> None:
    inside = locate_workspace(None, cwd=REPO_ROOT / "tests", env={})
    assert inside.workspace.root == REPO_ROOT
    # By its .agentos/ once any command has run there; before that, as the checkout.
    expected = ".agentos" if (REPO_ROOT / ".agentos").is_dir() else "checkout"
    assert (inside.origin, inside.notice) == (expected, None)


def _agentos(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "AGENTOS_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "agentos", *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_command_falling_back_to_the_checkout_says_so_once_on_stderr_only(
    tmp_path: Path,
) -> None:
    notice = (
        f"agentos: no workspace found from {tmp_path.resolve()}; using the AgentOS checkout "
        f"{REPO_ROOT} (set AGENTOS_HOME or run agentos init)\n"
    )
    as_json = _agentos("cards", "list", "--json", cwd=tmp_path, env={})
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stderr == notice
    assert json.loads(as_json.stdout)["cards"]
    for_people = _agentos("receipts", "verify", cwd=tmp_path, env={})
    assert for_people.stderr == notice
    assert "no workspace found" not in for_people.stdout


def test_a_named_or_found_workspace_gets_no_notice(tmp_path: Path) -> None:
    ws, _ = init_workspace(tmp_path / "ws")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for args, cwd, env in [
        (["--workspace", str(ws.root)], outside, {}),
        ([], outside, {"AGENTOS_HOME": str(ws.root)}),
        ([], ws.root / "receipts", {}),
        ([], REPO_ROOT / "tests", {}),
    ]:
        result = _agentos(*args, "receipts", "list", "--json", cwd=cwd, env=env)
        assert (result.returncode, result.stderr) == (0, ""), (args, cwd, env)


def test_a_workspace_flag_pointing_nowhere_is_bad_input(cli: CliRunner, tmp_path: Path) -> None:
    result = cli("hub", "list", workspace=tmp_path / "missing")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: --workspace: workspace {tmp_path / 'missing'} does not exist "
        f"(run `agentos init {tmp_path / 'missing'}`)"
    )
    with pytest.raises(NotFound):
        find_workspace(None, cwd=tmp_path, env={"AGENTOS_HOME": str(tmp_path / "nope")})


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("run: {retries: 2, colour: red}\n", "run.colour", "unknown field"),
        ("interview: {threshold: 2}\n", "interview.threshold", "less than or equal to 1"),
        ("interview: {floors: {goal: 1.5}}\n", "interview", "outside 0..1"),
        ("interview: {floors: {mood: 0.5}}\n", "interview.floors.mood", "Input should be"),
        ("guardian: {interval: -1}\n", "guardian.interval", "greater than or equal to 0.05"),
        ("checks: [{name: x}]\n", "checks[0]", "exactly one of"),
        ("receipts: [1, 2\n", "line", "invalid YAML"),
        ("- just\n- a list\n", "(root)", "expected a mapping"),
    ],
    ids=["unknown", "threshold", "floor-range", "floor-axis", "interval", "check", "yaml", "list"],
)
def test_invalid_settings_fail_every_command_naming_file_and_field(
    cli: CliRunner, ws: Workspace, text: str, field: str, message: str
) -> None:
    ws.settings_file.write_text(text)
    result = cli("hub", "list")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith(f"error: {ws.settings_file}: {field}") and message in line, line
    assert "\n" not in line


def test_settings_defaults_match_the_spec(ws: Workspace) -> None:
    ws.settings_file.unlink()
    s = ws.settings
    assert (s.receipts.redact, s.interview.threshold, s.run.retries, s.run.guardian) == (
        False,
        0.4,
        2,
        True,
    )
    assert (
        s.guardian.interval,
        s.guardian.stuck_after,
        s.guardian.max_restarts,
        s.guardian.kill_after,
    ) == (60, 300, 1, 900)
    assert s.checks == []


def test_migrations_apply_once_in_order_and_are_recorded(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    extra = [*SQLITE_MIGRATIONS, Migration("999_extra", "CREATE TABLE extra (x)")]
    con = sqlite.connect(db)
    names = [r[0] for r in con.execute("SELECT name FROM migrations ORDER BY rowid")]
    assert names == [m.name for m in SQLITE_MIGRATIONS]
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()
    con = sqlite.connect(db, extra)
    assert sqlite.migrate(con, extra) == []
    names = [r[0] for r in con.execute("SELECT name FROM migrations ORDER BY rowid")]
    assert names[-1] == "999_extra" and len(names) == len(extra)


def test_a_failing_migration_leaves_nothing_half_applied(tmp_path: Path) -> None:
    bad = [
        Migration("001_ok", "CREATE TABLE a (x)"),
        Migration("002_bad", "CREATE TABLE b (x); CREATE TABLE a (y)"),
    ]
    with pytest.raises(apsw.SQLError):
        sqlite.connect(tmp_path / "s.db", bad)
    con = apsw.Connection(str(tmp_path / "s.db"))
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "b" not in tables and "a" in tables
    assert [r[0] for r in con.execute("SELECT name FROM migrations")] == ["001_ok"]


def test_a_run_store_shared_by_threads_waits_out_another_writer(ws: Workspace) -> None:
    import threading

    from agentos.run.store import RunStore

    store = RunStore(ws)
    store.create("r1", "request", ws.root)
    for i in range(4):
        store.add_agent("r1", f"agent-{i}", "1.0.0")
    other = apsw.Connection(str(ws.state_db))
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
    errors: list[BaseException] = []

    def update(i: int) -> None:
        try:
            store.update_agent("r1", f"agent-{i}", status="running")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=update, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    threading.Event().wait(0.3)
    other.execute("COMMIT")
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert {a.status for a in store.get("r1").agents} == {"running"}


def test_a_state_db_with_a_migration_this_agentos_does_not_know_is_refused_in_one_line(
    cli: Any, ws: Workspace
) -> None:
    con = sqlite.connect(ws.state_db)
    con.execute("INSERT INTO migrations VALUES ('010_from_the_future', 0)")
    con.close()

    out = cli("runs", "list")

    assert (out.returncode, out.stdout, out.stderr) == (
        2,
        "",
        f"error: {ws.state_db}: its schema is newer than this AgentOS (it has migration "
        "010_from_the_future, which this version does not know): upgrade AgentOS on this "
        "machine to use it\n",
    )
