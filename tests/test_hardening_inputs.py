"""Hostile input that once gave tracebacks or hung (issue 16, items 4 and 11): file names that
are not UTF-8 in the repository a run works on and in what `kb add` reads, and a
catastrophic regex in a check run on a file an agent wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import CliRunner, add_agent, git, make_repo, needs_tmux

from agentos.gate.builtin import file_contains
from agentos.workspace.layout import Workspace

LATIN1 = os.fsdecode(b"caf\xe9.txt")  # "café.txt" written in Latin-1: not UTF-8
NEW = os.fsdecode(b"n\xffw.txt")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a committed file whose name is not UTF-8."""
    path = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    (path / LATIN1).write_text("latin-1 name\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "a file whose name is not UTF-8")
    return path


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_a_run_on_a_repository_with_a_non_utf8_file_name_merges_and_names_it(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    # The agent changes the file with the Latin-1 name and adds another; the gate lists both
    # (on every attempt: the script does the same each time).
    script = (
        "printf 'latin-1 name\\nmore\\n' > \"$(printf 'caf\\351.txt')\"\n"
        "printf 'new\\n' > \"$(printf 'n\\377w.txt')\"\n"
    )
    add_agent(
        ws,
        tmp_path,
        "latin",
        script,
        card={
            "checks": [
                {"name": "text files only", "no_changes_outside": ["*.txt"]},
                {"name": "small", "max_diff_lines": 1},
            ]
        },
    )

    out = cli("run", "latin-task", "--repo", str(repo), "--force", "--json")

    assert "Traceback" not in out.stderr, out.stderr
    report = json.loads(out.stdout)
    assert (out.returncode, report["status"]) == (1, "failed"), out.stderr
    # The failing check names both files, their bytes that are not UTF-8 written \xNN.
    gate = report["agents"][0]["gate"]
    checks = {c["name"]: c for c in gate["checks"]}
    assert checks["text files only"]["passed"] is True
    assert checks["small"]["passed"] is False
    assert checks["small"]["output_tail"] == (
        f"2 line(s) changed in 2 file(s) against {gate['base'][:12]} (limit 1)\n"
        "  +1 -0  caf\\xe9.txt\n"
        "  +1 -0  n\\xffw.txt\n"  # committed after the first attempt
    )
    assert git(repo, "status", "--porcelain") == ""

    add_agent(ws, tmp_path, "latin2", script)  # no checks: this one passes and merges
    out = cli("run", "latin2-task", "--repo", str(repo), "--force", "--json")
    assert (out.returncode, json.loads(out.stdout)["status"]) == (0, "succeeded"), out.stderr
    assert (repo / LATIN1).read_text() == "latin-1 name\nmore\n"
    assert (repo / NEW).read_text() == "new\n"
    assert git(repo, "status", "--porcelain") == ""


def test_kb_add_skips_names_that_are_not_utf8_and_refuses_one_given_by_name(
    cli: CliRunner, repo: Path
) -> None:
    out = cli("kb", "add", str(repo), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["seen"] == 1  # README.md; the Latin-1 name has no text form
    assert cli("kb", "search", "target").stdout.count("README.md") >= 1

    out = cli("kb", "add", str(repo / LATIN1))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        f"error: {repo}/caf\\xe9.txt: the name is not UTF-8: the knowledge store keeps names "
        "as text\n"
    )


@pytest.mark.timeout(60)  # the regression hangs for hours: fail instead
def test_a_catastrophic_check_regex_on_an_agents_file_is_matched_in_linear_time(
    tmp_path: Path,
) -> None:
    # 40 a's and a b: Python's re tries 2^40 ways on (a+)+$; RE2 reads the line once.
    (tmp_path / "out.txt").write_text("ok\n" + "a" * 40 + "b\n" + "a" * 10_000 + "\n")
    found = file_contains(tmp_path, "out.txt", r"^(a+)+$")
    missing = file_contains(tmp_path, "out.txt", r"^(a+)+c$")
    assert (found.passed, found.tail) == (True, "/^(a+)+$/ matches out.txt at line 3\n")
    assert (missing.passed, missing.tail) == (False, "no match for /^(a+)+c$/ in out.txt\n")


@pytest.mark.parametrize(
    "args", [("route",), ("interview", "--no-input"), ("run", "--no-input", "--force")]
)
def test_a_request_that_is_not_utf8_is_one_line(cli: CliRunner, args: tuple[str, ...]) -> None:
    # Bytes that are not UTF-8 (here a Latin-1 é) reach Python as lone surrogates, which
    # the tokenizer and the receipts could not encode.
    result = cli(args[0], "caf\udce9 fix the parser", *args[1:])
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: REQUEST: the request is not valid text (bytes that are not UTF-8)\n"
    )
