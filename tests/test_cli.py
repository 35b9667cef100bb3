"""The CLI as a whole: help for every command, the README reference in sync, exit codes."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, CliRunner

from agentos.cli import COMMANDS, _docs
from agentos.workspace.layout import Workspace

GROUPS = sorted(COMMANDS)


def test_help_lists_the_command_groups() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentos", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = out.split("Commands:")[1]
    for name in GROUPS:
        assert f"  {name} " in listed


def test_every_command_has_help_text() -> None:
    for name, help_text in _docs.commands():
        body = help_text.split("Options:")[0].strip().splitlines()
        assert len(body) > 1 and body[1:], f"{name} has no description"


def test_the_docs_cli_reference_and_field_tables_are_in_sync_with_the_code(
    tmp_path: Path,
) -> None:
    cli_md = (REPO_ROOT / "docs" / "cli.md").read_text()
    assert _docs.reference() in cli_md, "docs/cli.md is stale: run `python -m agentos.cli._docs`"
    formats = tmp_path / "formats.md"
    formats.write_text((REPO_ROOT / "docs" / "formats.md").read_text())
    assert _docs.FIELDS.search(formats.read_text())  # it has tables to check
    assert not _docs.update_formats(formats), (
        "docs/formats.md's field tables are stale: run `python -m agentos.cli._docs`"
    )
    assert REPO_ROOT / "agentos" / "mcp_server" in _docs.packages(REPO_ROOT)
    architecture = (REPO_ROOT / "docs" / "architecture.md").read_text()
    assert _docs.module_map(REPO_ROOT) in architecture, (
        "docs/architecture.md's module map is stale: run `python -m agentos.cli._docs`"
    )
    assert _docs.folder_table(REPO_ROOT) in architecture, (
        "docs/architecture.md's folder table is stale: run `python -m agentos.cli._docs`"
    )


def test_nothing_in_the_project_points_outside_it() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        if name.endswith((".md", ".py", ".yaml", ".toml")) and name != "tests/test_cli.py":
            text = (REPO_ROOT / name).read_text(errors="replace")
            assert "SPEC.md" not in text and "shared folder" not in text, name


HEAVY = ("pydantic", "yaml", "langchain", "crewai", "ollama", "mcp", "textual", "starlette")


@pytest.mark.process  # what a new process imports
def test_read_only_commands_and_the_version_do_not_import_heavy_modules(
    cli: CliRunner, ws: Workspace
) -> None:
    """What makes the read-only commands fast (benchmarks/cli_bench.py): none loads pydantic
    or YAML once agentos.yaml and hub.lock were found valid (their validated data is kept
    in the cache, by digest)."""
    assert cli("route", "fix the lint errors").returncode == 0  # validates both, once
    for argv in (
        ["--version"],
        ["runs", "list"],
        ["status"],
        ["runs", "list", "--json"],
        ["hub", "list"],
        ["route", "--json", "fix the lint errors"],
    ):
        where = None if argv == ["--version"] else ws.root
        out = cli(*argv, env={"PYTHONPROFILEIMPORTTIME": "1"}, workspace=where)
        assert out.returncode == 0, out.stderr
        imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        assert not {m for m in imported if m.split(".")[0] in HEAVY}, argv
    ws.settings_file.write_text("run: [\n")  # a broken agentos.yaml is still refused up front
    out = cli("runs", "list")
    assert (out.returncode, out.stderr.startswith(f"error: {ws.settings_file}")) == (2, True)


@pytest.mark.process  # what a new process imports
def test_the_version_is_answered_without_click_whatever_workspace_is_given(
    cli: CliRunner, ws: Workspace
) -> None:
    """As click answers it (with the version alone, before the workspace is looked at), in
    ~25 ms instead of ~60: hooks run `agentos --workspace DIR --version` too."""
    from agentos import __version__

    for argv in (
        ["--version"],
        ["--workspace", str(ws.root), "--version"],
        ["-w", str(ws.root), "--version"],
        [f"--workspace={ws.root}", "--version"],
        ["--version", "--workspace", "/nowhere"],
    ):
        out = cli(*argv, env={"PYTHONPROFILEIMPORTTIME": "1"}, workspace=None)
        assert (out.returncode, out.stdout) == (0, f"agentos, version {__version__}\n"), argv
        imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        assert "click" not in imported, argv
    clicks = cli("-w", "--version", workspace=None)  # -w takes "--version" as its value
    assert clicks.stdout != f"agentos, version {__version__}\n"


def test_package_and_user_text_is_shown_as_written_never_read_as_markup(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    """rich reads `[...]` as markup: a fix like pip install 'agentos-kit[ollama]' lost its
    brackets in a table. Cells and lines of package or user text are shown as written."""
    from conftest import write_package

    described = "Fixes [bold]CI[/bold]; needs pip install 'agentos-kit[ollama]'"
    pkg = write_package(tmp_path / "pkg", name="bracketed", description=described)
    assert cli("hub", "install", str(pkg)).returncode == 0
    shown = cli("hub", "show", "bracketed")
    assert shown.returncode == 0, shown.stderr
    assert f"  {described}\n" in shown.stdout
    (ws.cards_dir / "bracketed.yaml").write_text(
        "id: bracketed\nagent: bracketed\ndescription: d\nmin_score: 1\n"
        'triggers:\n  phrases: ["fix [ci] config"]\n'
    )
    routed = cli("route", "please fix [ci] config now")
    assert routed.returncode == 0, routed.stderr
    assert "fix [ci] config" in routed.stdout


def test_a_listing_shows_control_characters_as_escapes_and_aligns_wide_text(
    cli: CliRunner, ws: Workspace
) -> None:
    """A request is anyone's text: an escape sequence in it (clear the screen, retitle the
    terminal) is printed as ``\\x1b``, never sent to the terminal of whoever lists runs; a
    wide character takes two columns, so the next column still lines up."""
    from agentos.run.store import RunStore

    store = RunStore(ws)
    try:
        store.create("20260101-000000-aaaaaa", "fix \x1b[2J\x1b]0;owned\x07 now", ws.root)
        store.create("20260101-000000-bbbbbb", "修正 the parser", ws.root)
    finally:
        store.close()
    out = cli("runs", "list")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["run", "status", "agents", "used", "started", "request"]
    by_run = {line.split()[0]: line for line in lines[1:]}
    assert by_run["20260101-000000-aaaaaa"].endswith("fix \\x1b[2J\\x1b]0;owned\\x07 now")
    assert by_run["20260101-000000-bbbbbb"].endswith("修正 the parser")
    # every row's request column starts at the header's
    start = lines[0].index("request")
    assert all(line[start - 2 : start] == "  " for line in lines[1:])


def test_runs_show_prints_a_runs_request_and_message_as_text_with_control_characters_escaped(
    cli: CliRunner, ws: Workspace
) -> None:
    """What a run says of itself is anyone's text (a workflow's task is an agent's): shown
    as written, brackets and all, with its escape sequences as ``\\x1b``, never sent to
    the terminal of whoever looks at the run."""
    from agentos.run.store import RunStatus, RunStore

    store = RunStore(ws)
    try:
        store.create("20260101-000000-cccccc", "fix \x1b[2J\x1b]0;owned\x07 [bold]now[/]", ws.root)
        store.update(
            "20260101-000000-cccccc", status=RunStatus.FAILED, message="agent said \x1b[31m[x]"
        )
    finally:
        store.close()
    out = cli("runs", "show", "20260101-000000-cccccc")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    lines = out.stdout.splitlines()
    assert lines[0] == "run 20260101-000000-cccccc: failed — agent said \\x1b[31m[x]"
    assert lines[1] == "  request: fix \\x1b[2J\\x1b]0;owned\\x07 [bold]now[/]"


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """What ``argv`` prints to a terminal (a pseudo-terminal as its stdout)."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal's last handle
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.process  # a terminal of its own
@pytest.mark.parametrize("argv", [["hub", "list"], ["cards", "list"]], ids=["fast", "click"])
def test_a_table_is_styled_on_a_terminal_and_plain_when_piped(
    ws: Workspace, argv: list[str]
) -> None:
    """On a terminal the header is bold; piped, the same table is plain text: alike whether
    the command is served without click (hub list) or by click (cards list)."""
    command = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), *argv]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(COLUMNS="200", TERM="xterm")
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stdout
    shown = _on_a_terminal(command, env)
    first, *rest = shown.splitlines()
    assert first.startswith("\x1b[1m") and first.endswith("\x1b[0m")
    assert "\x1b" not in "\n".join(rest)  # no cell of these is coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", shown) == piped.stdout


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("setting", [("NO_COLOR", "1"), ("TERM", "dumb")], ids=lambda s: s[0])
def test_no_color_and_a_dumb_terminal_get_plain_text(
    monkeypatch: pytest.MonkeyPatch, setting: tuple[str, str]
) -> None:
    from agentos.cli import output

    monkeypatch.setenv(*setting)
    written = _Stream(True)
    monkeypatch.setattr(sys, "stdout", written)
    output.table(None, ["check", "status"], [("tmux", output.Styled("ok", "green"))])
    assert written.getvalue() == "check  status\ntmux   ok\n"


def test_a_styled_cell_is_coloured_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentos.cli import output

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")

    rows = [("tmux", output.Styled("ok", "green")), ("git", None)]
    for tty, expected in [
        (False, "checks\ncheck  status\ntmux   ok\ngit\n"),
        (
            True,
            "\x1b[1mchecks\x1b[0m\n\x1b[1mcheck\x1b[0m  \x1b[1mstatus\x1b[0m\n"
            "tmux   \x1b[32mok\x1b[0m\ngit\n",
        ),
    ]:
        written = _Stream(tty)
        monkeypatch.setattr(sys, "stdout", written)
        output.table("checks", ["check", "status"], rows)
        assert written.getvalue() == expected


def test_the_fast_help_of_every_command_is_clicks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`agentos ... --help` is answered from agentos/cli/help.json without click: for every
    command it is the text click renders (so the two cannot drift: regenerate with
    `python -m agentos.cli._docs`)."""
    from agentos.cli import stored_help

    monkeypatch.setenv("COLUMNS", "80")  # what the stored texts are for, whatever runs this
    names = [name for name, _ in _docs.commands()]
    assert len(names) > 60
    for name in names:
        path = name.split()[1:]
        assert stored_help([*path, "--help"]) == _docs.click_help(path), f"{name} --help"
        assert stored_help([*path, "-h"]) == _docs.click_help(path, "-h"), f"{name} -h"
    assert stored_help(["--workspace", "x", "--help"]) is None  # options: click decides
    assert stored_help(["no-such-command", "--help"]) is None


@pytest.mark.process  # what a new process imports
def test_help_is_printed_without_importing_click_unless_the_terminal_is_narrow() -> None:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "COLUMNS": "120"}
    fast = subprocess.run(
        [sys.executable, "-m", "agentos", "run", "--help"], capture_output=True, text=True, env=env
    )
    imported = {line.split("|")[-1].strip() for line in fast.stderr.splitlines() if "|" in line}
    assert fast.returncode == 0 and "click" not in imported
    assert fast.stdout == _docs.click_help(["run"])
    narrow = subprocess.run(
        [sys.executable, "-m", "agentos", "run", "--help"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "60"},
    )
    assert narrow.returncode == 0 and "click" in {
        line.split("|")[-1].strip() for line in narrow.stderr.splitlines() if "|" in line
    }
    assert (
        max(len(line) for line in narrow.stdout.splitlines())
        <= 60
        < max(len(line) for line in fast.stdout.splitlines())
    )
