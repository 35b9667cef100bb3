"""The gate: shell checks with timeouts, built-in kinds, diffs, collection,
feedback for the agent, receipt fields and ``agentos gate run``."""

from __future__ import annotations

import hashlib
import json
import locale
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git, make_repo, wait_until, write_package

from agentos.errors import BadInput, MissingTool, NotFound, ValidationFailed
from agentos.gate.builtin import file_contains, glob_regex
from agentos.gate.repo import RepoProfile
from agentos.gate.results import FEEDBACK_FILE, GateResult, gate_receipt_fields, write_feedback
from agentos.gate.runner import run_gate
from agentos.gate.selection import collect_checks, describe, select_checks
from agentos.hub.manifest import load_manifest
from agentos.shared.checks import CheckSpec
from agentos.shared.models import validate
from agentos.shared.process import TAIL_BYTES
from agentos.workspace.layout import Workspace


def check(**fields: Any) -> CheckSpec:
    return validate(CheckSpec, fields, file="test")


def set_workspace_checks(ws: Workspace, checks: list[dict[str, Any]]) -> Workspace:
    ws.settings_file.write_text(yaml.safe_dump({"checks": checks}, sort_keys=False))
    return Workspace(ws.root)  # settings are cached per Workspace object


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie waiting to be reaped is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# demo\n", "src/app.py": "x = 1\n"})


# --- shell checks ------------------------------------------------------------------------


def test_a_hanging_check_is_killed_with_its_process_group_at_its_timeout_and_fails(
    repo: Path,
) -> None:
    hang = check(
        name="hangs",
        timeout=1,
        run="echo started; sleep 600 & echo $! > bg.pid; sleep 600; echo never",
    )
    result = run_gate([hang], repo)

    assert result.passed is False
    [r] = result.results
    assert (r.passed, r.timed_out, r.exit_code) == (False, True, None)
    assert r.output_tail.startswith("started\n")
    assert "never" not in r.output_tail
    assert "timed out after 1s: process group killed" in r.output_tail
    background = int((repo / "bg.pid").read_text())
    assert wait_until(lambda: not alive(background)), "the check's background child survived"


def test_processes_a_passing_check_leaves_behind_are_killed(repo: Path) -> None:
    leaver = check(name="leaves a daemon", run="sleep 600 & echo $! > bg.pid; echo done")
    result = run_gate([leaver], repo)

    assert result.passed is True
    assert result.results[0].output_tail == "done\n"
    background = int((repo / "bg.pid").read_text())
    assert wait_until(lambda: not alive(background))


def test_a_check_that_closes_its_output_but_keeps_running_still_times_out(repo: Path) -> None:
    result = run_gate(
        [check(name="silent", run="exec >/dev/null 2>&1; sleep 600", timeout=1)], repo
    )
    assert result.results[0].timed_out is True


def test_exit_code_decides_and_output_interleaves_stdout_and_stderr(repo: Path) -> None:
    result = run_gate(
        [
            check(name="ok", run="echo out; echo err >&2"),
            check(name="bad", run="echo broken >&2; exit 3"),
        ],
        repo,
    )

    ok, bad = result.results
    assert (ok.passed, ok.exit_code, ok.output_tail) == (True, 0, "out\nerr\n")
    assert (bad.passed, bad.exit_code, bad.output_tail, bad.timed_out) == (
        False,
        3,
        "broken\n",
        False,
    )
    assert result.passed is False
    assert [r.name for r in result.failures] == ["bad"]


def test_output_tail_is_the_last_4kb_and_digest_covers_the_whole_output(repo: Path) -> None:
    result = run_gate([check(name="loud", run="seq 1 50000")], repo)

    full = "".join(f"{i}\n" for i in range(1, 50001)).encode()
    [r] = result.results
    assert r.digest == hashlib.sha256(full).hexdigest()
    assert r.output_bytes == len(full)
    assert r.output_tail.encode() == full[-TAIL_BYTES:]


def test_shell_checks_get_a_scrubbed_environment(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_TEST_SECRET", "leaked")
    result = run_gate(
        [check(name="env", run="env | cut -d= -f1 | sort | tr '\\n' ' '")], repo, env={"GIVEN": "1"}
    )

    names = set(result.results[0].output_tail.split())
    assert "AGENTOS_TEST_SECRET" not in names
    assert {"GIVEN", "PATH", "HOME", "LANG"} <= names
    assert names <= {"GIVEN", "PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"}


def test_shell_checks_run_in_their_cwd_inside_the_worktree(repo: Path) -> None:
    result = run_gate(
        [
            check(name="where", run="pwd", cwd="src"),
            check(name="missing dir", run="pwd", cwd="nope"),
        ],
        repo,
    )

    where, missing = result.results
    assert where.output_tail == f"{(repo / 'src').resolve()}\n"
    assert (missing.passed, missing.output_tail) == (
        False,
        "cwd nope is not a directory in the worktree\n",
    )


def test_a_cwd_symlinked_out_of_the_worktree_fails_the_check(repo: Path, tmp_path: Path) -> None:
    (repo / "out").symlink_to(tmp_path)
    result = run_gate([check(name="escape", run="pwd", cwd="out")], repo)
    assert (result.passed, result.results[0].output_tail) == (
        False,
        "cwd out leads outside the worktree (symlink)\n",
    )


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"run": "true", "cwd": "../elsewhere"}, "cwd"),
        ({"run": "true", "cwd": "/tmp"}, "cwd"),
        ({"file_exists": "../../etc/passwd"}, "file_exists"),
        ({"file_contains": {"path": "a", "pattern": "(unclosed"}}, "file_contains.pattern"),
        ({"file_contains": {"path": "/etc/passwd", "pattern": "x"}}, "file_contains.path"),
        ({"no_changes_outside": ["/etc/**"]}, "no_changes_outside"),
    ],
    ids=["cwd-dotdot", "cwd-absolute", "file-exists-dotdot", "bad-regex", "abs-path", "abs-glob"],
)
def test_checks_that_escape_the_worktree_or_have_a_bad_regex_are_bad_input(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationFailed) as err:
        check(name="x", **fields)
    assert str(err.value).startswith(f"test: {field}: ")


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"run": "true", "cwd": "~/src"}, "cwd: '~/src' must be a relative path"),
        ({"file_exists": "a/../../b"}, "file_exists: 'a/../../b' must be a relative path"),
        ({"tests": ["~/t.py::x"]}, "tests: '~/t.py' must be a relative path"),
        ({"tests": ["/t.py"]}, "tests: '/t.py' must be a relative path"),
        ({"no_changes_outside": ["docs", "~"]}, "no_changes_outside: '~' must be a relative path"),
    ],
    ids=["cwd-home", "file-exists-climbing", "tests-home", "tests-absolute", "glob-home"],
)
def test_a_path_of_a_check_outside_the_worktree_is_named_whole(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationFailed) as err:
        check(name="x", **fields)
    assert str(err.value) == f"test: {problem} inside the worktree"


def test_a_path_with_dots_inside_its_names_stays_inside_the_worktree() -> None:
    assert check(name="x", file_exists="a..b/..c/d..").file_exists == "a..b/..c/d.."
    assert check(name="x", run="true", cwd="./src").cwd == "./src"


# --- file checks ---------------------------------------------------------------------------


def test_file_exists_and_file_contains(repo: Path) -> None:
    result = run_gate(
        [
            check(name="readme", file_exists="README.md"),
            check(name="changelog", file_exists="CHANGES.md"),
            check(name="assigns x", file_contains={"path": "src/app.py", "pattern": r"^x = \d+$"}),
            check(name="assigns y", file_contains={"path": "src/app.py", "pattern": r"^y ="}),
            check(name="no file", file_contains={"path": "nope.py", "pattern": "x"}),
        ],
        repo,
    )

    assert [(r.name, r.passed, r.output_tail) for r in result.results] == [
        ("readme", True, "README.md exists\n"),
        ("changelog", False, "CHANGES.md does not exist\n"),
        ("assigns x", True, "/^x = \\d+$/ matches src/app.py at line 1\n"),
        ("assigns y", False, "no match for /^y =/ in src/app.py\n"),
        ("no file", False, "nope.py does not exist\n"),
    ]
    assert all(r.exit_code is None and r.kind.startswith("file_") for r in result.results)


# --- diff checks -----------------------------------------------------------------------------


def test_no_changes_outside_counts_untracked_files(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    only_src = check(name="only src", no_changes_outside=["src/**"])
    (repo / "src" / "app.py").write_text("x = 2\n")
    (repo / "src" / "new.py").write_text("y = 1\n")
    assert run_gate([only_src], repo, base=base).passed is True

    (repo / "notes.txt").write_text("an untracked file outside src\n")
    result = run_gate([only_src], repo, base=base)
    assert result.passed is False
    assert result.results[0].output_tail == (
        f"1 file(s) changed outside src/** (against {base[:12]}):\n  notes.txt (untracked)\n"
    )


def test_no_changes_outside_counts_commits_since_the_base_and_deletions(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").unlink()
    git(repo, "commit", "-qam", "remove readme")
    result = run_gate([check(name="only src", no_changes_outside=["src"])], repo, base=base)
    assert "  README.md\n" in result.results[0].output_tail
    # Against HEAD (the default) the committed deletion is no longer a change.
    assert run_gate([check(name="only src", no_changes_outside=["src"])], repo).passed


def test_max_diff_lines_counts_untracked_files(repo: Path) -> None:
    (repo / "src" / "app.py").write_text("x = 2\n")  # +1 -1
    (repo / "src" / "new.py").write_text("a\nb\nc")  # 3 lines, no final newline
    assert run_gate([check(name="small", max_diff_lines=5)], repo).passed is True

    result = run_gate([check(name="tiny", max_diff_lines=4)], repo)
    base = git(repo, "rev-parse", "HEAD")
    assert result.passed is False
    assert result.results[0].output_tail == (
        f"5 line(s) changed in 2 file(s) against {base[:12]} (limit 4)\n"
        "  +3 -0  src/new.py (untracked)\n"
        "  +1 -1  src/app.py\n"
    )


def test_diff_checks_ignore_gitignored_files_and_agentos_files(repo: Path) -> None:
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore build")
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("generated\n" * 100)
    write_feedback(repo, GateResult([]))
    (repo / "AGENTOS_CONTEXT.md").write_text("context\n" * 100)

    result = run_gate(
        [check(name="nothing", max_diff_lines=0), check(name="nowhere", no_changes_outside=[])],
        repo,
    )
    assert result.passed is True, result.feedback()


def test_diff_checks_see_files_an_earlier_shell_check_wrote(repo: Path) -> None:
    result = run_gate(
        [
            check(name="before", max_diff_lines=0),
            check(name="writes", run="echo generated > new.txt"),
            check(name="after", max_diff_lines=0),
        ],
        repo,
    )
    assert [r.passed for r in result.results] == [True, True, False]
    assert result.base == git(repo, "rev-parse", "HEAD")


def test_diff_checks_need_a_git_repository_and_a_real_base(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BadInput) as err:
        run_gate([check(name="d", max_diff_lines=1)], plain)
    assert str(err.value) == f"worktree: {plain} is not a git repository; diff checks need one"
    with pytest.raises(BadInput) as err:
        run_gate([check(name="d", max_diff_lines=1)], repo, base="no-such-rev")
    assert str(err.value) == f"base: 'no-such-rev' is not a commit in {repo}"
    with pytest.raises(NotFound):
        run_gate([], tmp_path / "missing")


@pytest.mark.parametrize(
    "glob, path, matches",
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "srcx/a.py", False),
        ("src", "src/a/b.py", True),
        ("docs/", "docs/index.md", True),
        ("*.md", "README.md", True),
        ("*.md", "docs/README.md", False),
        ("**/*.md", "docs/deep/README.md", True),
        ("**/*.md", "README.md", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/pkg/a.py", False),
        ("test_?.py", "test_a.py", True),
        ("[!a]*.txt", "b.txt", True),
        ("[!a]*.txt", "a.txt", False),
        ("./tests/**", "tests/x.py", True),
        ("/src/", "src/a.py", True),
        ("**", "a/b/c.py", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/x/yb", False),
        ("a**", "ab/c", True),
        ("a.b", "a.b", True),
        ("a.b", "axb", False),
        ("[ab].py", "b.py", True),
        ("[ab].py", "c.py", False),
        ("[!ab].py", "c.py", True),
        ("[]].py", "].py", True),
        ("[\\].py", "\\.py", True),
        ("[.py", "[.py", True),
        ("src", "srcx", False),
        ("src", "x/src", False),
        ("*.md", "README.mdx", False),
        ("*.md", "README_md", False),
        ("a**c", "ab/xc", True),
        ("a**c", "ab/xd", False),
        ("a?c", "abc", True),
        ("X11/**", "X11/a", True),
        ("X11/**", "11/a", False),
        ("[ab].[cd]", "a.c", True),
        ("[ab].[cd]", "axc", False),
        ("[\\].py", "X.py", False),
    ],
)
def test_glob_matching(glob: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(glob).match(path)) is matches


# --- the built-in checks' edges (found by mutation testing: docs/mutation.md) --------------


def _tails(repo: Path, *checks: CheckSpec, base: str | None = None) -> list[tuple[bool, str]]:
    result = run_gate(list(checks), repo, base=base)
    return [(r.passed, r.output_tail) for r in result.results]


def test_file_checks_refuse_a_symlink_out_of_the_worktree_and_name_the_matching_line(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("x = 1\n")
    (repo / "out").symlink_to(outside)
    (repo / "notes.txt").write_bytes(b"first\nsecond \xff\nthird: x = 3\n")
    (repo / "dangling").symlink_to(repo / "nowhere")
    (repo / "lead.txt").write_text("\nx = 1\n")
    contains = [
        ("out/secret.txt", "x"),
        ("notes.txt", r"^third: x = \d$"),
        ("notes.txt", "second \ufffd$"),  # a byte that is not UTF-8 reads as U+FFFD
        ("src", "x"),
        ("lead.txt", "^x"),
    ]
    assert _tails(
        repo,
        check(name="e1", file_exists="out/secret.txt"),
        check(name="e2", file_exists="src"),
        check(name="e3", file_exists="dangling"),
        *(
            check(name=f"c{i}", file_contains={"path": path, "pattern": pattern})
            for i, (path, pattern) in enumerate(contains)
        ),
    ) == [
        (False, "out/secret.txt leads outside the worktree (symlink)\n"),
        (True, "src exists\n"),
        (False, "dangling does not exist\n"),
        (False, "out/secret.txt leads outside the worktree (symlink)\n"),
        (True, "/^third: x = \\d$/ matches notes.txt at line 3\n"),
        (True, "/second \ufffd$/ matches notes.txt at line 2\n"),
        (False, "src cannot be read: Is a directory\n"),
        (True, "/^x/ matches lead.txt at line 2\n"),
    ]


def test_untracked_files_count_lines_as_git_would_and_binary_ones_as_one(repo: Path) -> None:
    """Text: its newlines, plus one for a last line without one, across reads of 64 KiB; a
    NUL in the first 8000 bytes: binary (one line); a symlink: one line."""
    (repo / "empty.txt").write_text("")
    (repo / "big.txt").write_text("line\n" * 20_000)  # 100,000 bytes: two reads
    (repo / "big-unended.txt").write_bytes(b"x" * 70_000)  # one line, its end in the second
    (repo / "late-nul.txt").write_bytes(b"a\n" * 5_000 + b"\0\n")  # NUL at byte 10,000
    (repo / "second-read-nul.txt").write_bytes(b"a\n" * 32_818 + b"\0\n")  # NUL at 65,636
    (repo / "nul-at-8000.txt").write_bytes(b"a" * 8_000 + b"\0\n")  # git reads 8000 bytes
    (repo / "blob.bin").write_bytes(b"PK\0\0" + b"\n" * 10)
    (repo / "link").symlink_to("README.md")
    base = git(repo, "rev-parse", "HEAD")
    [(passed, tail)] = _tails(repo, check(name="size", max_diff_lines=57_824))
    assert (passed, tail) == (
        True,
        f"57824 line(s) changed in 8 file(s) against {base[:12]} (limit 57824)\n"
        "  +32819 -0  second-read-nul.txt (untracked)\n"
        "  +20000 -0  big.txt (untracked)\n"
        "  +5001 -0  late-nul.txt (untracked)\n"
        "  +1 -0  big-unended.txt (untracked)\n"
        "  +1 -0  blob.bin (binary) (untracked)\n"
        "  +1 -0  link (binary) (untracked)\n"
        "  +1 -0  nul-at-8000.txt (untracked)\n"
        "  +0 -0  empty.txt (untracked)\n",
    )
    assert _tails(repo, check(name="size", max_diff_lines=57_823))[0][0] is False


def test_diff_checks_count_binary_changes_renames_and_names_that_are_not_utf_8(
    repo: Path,
) -> None:
    (repo / "img.bin").write_bytes(b"\0\1\2")
    (repo / "odd\tname.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "binary and odd")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "img.bin").write_bytes(b"\0\1\2\3")
    git(repo, "mv", "README.md", "READ.md")  # no renames: a deletion and an addition
    (repo / "odd\tname.txt").write_text("a\nb\n")
    (repo / os.fsdecode(b"caf\xe9.txt")).write_text("x\n")
    git(repo, "commit", "-qam", "changes")
    assert _tails(
        repo,
        check(name="size", max_diff_lines=0),
        check(name="where", no_changes_outside=["src"]),
        base=base,
    ) == [
        (
            False,
            f"5 line(s) changed in 5 file(s) against {base[:12]} (limit 0)\n"
            "  +1 -0  READ.md\n"
            "  +0 -1  README.md\n"
            "  +1 -0  caf\\xe9.txt (untracked)\n"
            "  +0 -0  img.bin (binary)\n"
            "  +1 -0  odd\tname.txt\n",
        ),
        (
            False,
            f"5 file(s) changed outside src (against {base[:12]}):\n"
            "  READ.md\n"
            "  README.md\n"
            "  caf\\xe9.txt (untracked)\n"
            "  img.bin\n"
            "  odd\tname.txt\n",
        ),
    ]


def test_a_file_named_like_the_base_commit_or_starting_with_a_space_is_a_file(
    repo: Path,
) -> None:
    """Paths never read as revisions or options (``--``), and are split off git's numbers
    at their tabs alone."""
    (repo / " lead.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a name with a space first")
    base = git(repo, "rev-parse", "HEAD")
    (repo / " lead.txt").write_text("a\nb\n")
    (repo / base).write_text("x\n")
    assert _tails(repo, check(name="where", no_changes_outside=["src"])) == [
        (
            False,
            f"2 file(s) changed outside src (against {base[:12]}):\n"
            "   lead.txt\n"
            f"  {base} (untracked)\n",
        )
    ]


def test_a_diff_git_cannot_make_is_bad_input_naming_the_base(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    (repo / ".git" / "objects" / tree[:2] / tree[2:]).unlink()  # the base's tree is lost
    with pytest.raises(BadInput) as err:
        run_gate([check(name="size", max_diff_lines=1)], repo)
    prefix = f"base: git diff against {base!r} failed: "
    assert str(err.value).startswith(prefix)
    assert "tree" in str(err.value).removeprefix(prefix)  # git's own words, whichever they are


def test_a_file_git_cannot_read_is_named_in_the_bad_input_even_when_its_name_is_not_utf_8(
    repo: Path,
) -> None:
    """A tracked file replaced by a FIFO: git names it in its error, in the name's own bytes,
    which the message carries as U+FFFD."""
    name = os.fsdecode(b"caf\xe9.txt")
    (repo / name).write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a name that is not UTF-8")
    base = git(repo, "rev-parse", "HEAD")
    (repo / name).unlink()
    os.mkfifo(repo / name)
    with pytest.raises(BadInput) as err:
        run_gate([check(name="size", max_diff_lines=1)], repo)
    prefix = f"base: git diff against {base!r} failed: "
    assert str(err.value).startswith(prefix)
    assert "caf\ufffd.txt" in str(err.value).removeprefix(prefix)


def test_a_range_of_commits_is_not_a_base(repo: Path) -> None:
    with pytest.raises(BadInput) as err:
        run_gate([check(name="size", max_diff_lines=1)], repo, base="HEAD..HEAD")
    assert str(err.value) == f"base: 'HEAD..HEAD' is not a commit in {repo}"


def test_diff_checks_without_git_on_the_path_say_that_git_is_needed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(MissingTool) as err:
        run_gate([check(name="size", max_diff_lines=1)], repo)
    assert str(err.value) == "git is needed for diff checks and is not on PATH"


def test_git_reads_nothing_from_the_gates_stdin(repo: Path, tmp_path: Path) -> None:
    """A hook the worktree's git runs (here core.fsmonitor, which ``ls-files`` calls) gets
    /dev/null, not what was typed to whoever started the gate."""
    read = tmp_path / "the hook read"
    hook = tmp_path / "hook"
    hook.write_text(f"#!/bin/sh\ncat >> '{read}'\nexit 1\n")
    hook.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(hook))
    typed, typing = os.pipe()
    os.write(typing, b"typed at the terminal\n")
    os.close(typing)
    saved = os.dup(0)
    os.dup2(typed, 0)
    try:
        run_gate([check(name="size", max_diff_lines=1)], repo)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(typed)
    assert read.read_bytes() == b""


def test_a_pattern_that_cannot_be_matched_fails_the_check(repo: Path) -> None:
    """Check specs refuse such a pattern when they load; one built otherwise still fails
    with the reason, not an exception."""
    outcome = file_contains(repo, "README.md", "(unclosed")
    assert outcome.passed is False
    assert outcome.tail.startswith("/(unclosed/ cannot be matched: ")
    assert outcome.tail.removeprefix("/(unclosed/ cannot be matched: ") != "\n"


def test_a_file_is_read_as_utf_8_whatever_the_locale(repo: Path) -> None:
    (repo / "notes.txt").write_text("café\n", encoding="utf-8")
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # ASCII: é would read as two U+FFFD
    try:
        tails = _tails(
            repo, check(name="c", file_contains={"path": "notes.txt", "pattern": "^café$"})
        )
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert tails == [(True, "/^café$/ matches notes.txt at line 1\n")]


def test_only_agentos_files_at_the_top_are_left_out_of_the_diff(repo: Path) -> None:
    (repo / "AGENTOS_NOTES.md").write_text("not the agent's\n")
    (repo / "src" / "AGENTOS_NOTES.md").write_text("the agent's\n")
    (repo / "AGENTOS_DIR").mkdir()
    (repo / "AGENTOS_DIR" / "x.txt").write_text("the agent's too\n")
    assert _tails(repo, check(name="where", no_changes_outside=[]))[0][1].splitlines()[1:] == [
        "  AGENTOS_DIR/x.txt (untracked)",
        "  src/AGENTOS_NOTES.md (untracked)",
    ]


def test_the_largest_changes_are_listed_first_and_at_most_50(repo: Path) -> None:
    for n in range(60):
        (repo / f"f{n:02}.txt").write_text("x\n" * (1 + n % 3))
    tail = _tails(repo, check(name="size", max_diff_lines=120))[0][1]
    lines = tail.splitlines()
    base = git(repo, "rev-parse", "HEAD")
    assert lines[0] == f"120 line(s) changed in 60 file(s) against {base[:12]} (limit 120)"
    assert (
        lines[1:]
        == [
            f"  +{lines_} -0  f{n:02}.txt (untracked)"
            for lines_, n in sorted(
                ((1 + n % 3, n) for n in range(60)), key=lambda p: (-p[0], p[1])
            )
        ][:50]
    )


def test_no_allowed_paths_is_said_as_nothing_and_every_change_is_outside(repo: Path) -> None:
    (repo / "src" / "app.py").write_text("x = 2\n")
    base = git(repo, "rev-parse", "HEAD")
    assert _tails(repo, check(name="none", no_changes_outside=[])) == [
        (False, f"1 file(s) changed outside (nothing) (against {base[:12]}):\n  src/app.py\n")
    ]
    assert _tails(repo, check(name="two", no_changes_outside=["docs", "src"])) == [
        (True, "1 changed file(s), all inside docs, src\n")
    ]


def test_diff_checks_judge_the_worktree_whatever_git_variables_the_caller_has(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE and the like would point git elsewhere."""
    other = make_repo(tmp_path / "other", {"a.txt": "a\n"})
    (other / "b.txt").write_text("b\n" * 7)
    for name, value in [
        ("GIT_DIR", other / ".git"),
        ("GIT_WORK_TREE", other),
        ("GIT_INDEX_FILE", other / ".git" / "index"),
        ("GIT_OBJECT_DIRECTORY", other / ".git" / "objects"),
        ("GIT_COMMON_DIR", other / ".git"),
        ("GIT_CEILING_DIRECTORIES", repo.parent),
    ]:
        monkeypatch.setenv(name, str(value))
    (repo / "src" / "app.py").write_text("x = 2\n")
    base = git(repo, "--git-dir", str(repo / ".git"), "rev-parse", "HEAD")
    assert _tails(repo / "src", check(name="size", max_diff_lines=2)) == [
        (
            True,
            f"2 line(s) changed in 1 file(s) against {base[:12]} (limit 2)\n  +1 -1  src/app.py\n",
        )
    ]


# --- collecting checks -------------------------------------------------------------------


def test_checks_come_from_package_then_card_then_workspace_and_duplicates_are_kept(
    ws: Workspace, tmp_path: Path
) -> None:
    pkg = write_package(
        tmp_path / "pkg",
        checks=[{"name": "tests", "run": "pytest -q"}, {"name": "lint", "run": "ruff check ."}],
    )
    manifest = load_manifest(pkg)
    ws = set_workspace_checks(
        ws,
        [
            {"name": "tests", "run": "pytest -q"},  # identical
            {"name": "lint", "run": "flake8"},  # same name, different
            {"name": "small", "max_diff_lines": 200},
        ],
    )
    card = [check(name="lint", run="pylint src"), check(name="readme", file_exists="README.md")]

    checks = collect_checks(ws, package=manifest, card_checks=card)

    assert [(c.name, c.kind) for c in checks] == [
        ("tests", "run"),
        ("lint", "run"),
        ("lint [card]", "run"),
        ("readme", "file_exists"),
        ("lint [workspace]", "run"),
        ("small", "max_diff_lines"),
    ]
    assert [c.run for c in checks if c.name.startswith("lint")] == [
        "ruff check .",
        "pylint src",
        "flake8",
    ]


def test_checks_written_inside_the_worktree_are_not_collected(ws: Workspace, repo: Path) -> None:
    ws = set_workspace_checks(ws, [{"name": "real", "run": "false"}])
    (repo / "agentos.yaml").write_text(yaml.safe_dump({"checks": []}))
    (repo / "agent.yaml").write_text("name: x\nchecks: []\n")
    result = run_gate(collect_checks(ws), repo)
    assert [r.name for r in result.results] == ["real"]
    assert result.passed is False


def test_a_name_taken_twice_takes_the_next_number_of_its_source(
    ws: Workspace, tmp_path: Path
) -> None:
    """Each check of one name but another definition is kept under a name of its own, and a
    renamed check is then a name like any other: one identical to it later runs once."""
    package = load_manifest(
        write_package(
            tmp_path / "pkg",
            checks=[
                {"name": "lint", "run": "ruff check ."},
                {"name": "lint", "run": "flake8"},
                {"name": "lint", "run": "pylint src"},
                {"name": "lint", "run": "ruff check ."},  # identical to the first
            ],
        )
    )
    card = [check(name="lint [card]", run="mypy ."), check(name="lint", run="black --check .")]
    ws = set_workspace_checks(ws, [{"name": "lint [package]", "run": "flake8"}])

    checks = collect_checks(ws, package=package, card_checks=card)

    assert [(c.name, c.run) for c in checks] == [
        ("lint", "ruff check ."),
        ("lint [package]", "flake8"),
        ("lint [package 2]", "pylint src"),
        ("lint [card]", "mypy ."),
        ("lint [card 2]", "black --check ."),
    ]


def test_select_checks_keeps_gate_order_and_rejects_unknown_names() -> None:
    checks = [check(name="c", run="true"), check(name="a", run="true"), check(name="b", run="true")]
    assert [c.name for c in select_checks(checks, ["b", "c"])] == ["c", "b"]
    assert select_checks(checks, []) == checks
    with pytest.raises(NotFound) as raised:
        select_checks(checks, ["a", "y", "z"])
    assert (raised.value.message, raised.value.field) == (
        "no check named 'y' (checks: 'a', 'b', 'c')",
        "check",
    )
    with pytest.raises(NotFound) as raised:
        select_checks([], ["a"])
    assert raised.value.message == "no check named 'a' (checks: none)"


def _profile(repo: Path) -> RepoProfile:
    return RepoProfile(repo, "detected", "pytest", "python -m pytest -q", None, None, timeout=900)


@pytest.mark.parametrize(
    "fields, with_profile, line",
    [
        ({"run": "make lint"}, False, "`make lint`, timeout 300s"),
        ({"run": "make", "cwd": "sub", "timeout": 2.5}, False, "`make` (in sub), timeout 2.5s"),
        ({"tests": []}, False, "the repository's tests (the whole suite)"),
        (
            {"tests": ["tests/a.py", "tests/b.py::t"]},
            False,
            "the repository's tests (tests/a.py tests/b.py::t)",
        ),
        (
            {"tests": []},
            True,
            "the repository's tests (the whole suite): `python -m pytest -q`, timeout 900s",
        ),
        (
            {"tests": ["tests/a.py"], "timeout": 60},
            True,
            "the repository's tests (tests/a.py): `python -m pytest -q tests/a.py`, timeout 60s",
        ),
        ({"file_exists": "README.md"}, False, "file_exists README.md"),
        (
            {"file_contains": {"path": "src/app.py", "pattern": "^x = "}},
            False,
            "file_contains src/app.py /^x = /",
        ),
        ({"no_changes_outside": []}, False, "no_changes_outside (nothing)"),
        ({"no_changes_outside": ["docs", "src"]}, False, "no_changes_outside docs, src"),
        ({"max_diff_lines": 0}, False, "max_diff_lines 0"),
    ],
    ids=[
        "run",
        "run-in-a-directory",
        "whole-suite",
        "tests-named",
        "whole-suite-with-its-command",
        "tests-named-with-their-command-and-own-timeout",
        "file-exists",
        "file-contains",
        "no-changes-outside-nothing",
        "no-changes-outside-two",
        "max-diff-lines",
    ],
)
def test_describe_says_what_each_kind_of_check_does_in_one_line(
    repo: Path, fields: dict[str, Any], with_profile: bool, line: str
) -> None:
    profile = _profile(repo) if with_profile else None
    assert describe(check(name="c", **fields), profile) == line


# --- results for the agent and for receipts ------------------------------------------------


def test_a_gate_with_no_checks_passes_and_says_nothing_was_verified(repo: Path) -> None:
    result = run_gate([], repo)
    assert result.passed is True
    assert result.summary() == "gate passed: no checks configured (nothing was verified)"
    assert result.as_dict() == {
        "passed": True,
        "summary": result.summary(),
        "base": None,
        "checks": [],
    }


def test_feedback_names_each_failing_check_with_its_output_tail(repo: Path) -> None:
    result = run_gate(
        [
            check(name="ok", run="true"),
            check(name="tests", run="echo 'FAILED test_x - assert 1 == 2'; exit 1"),
            check(name="fences", run="printf '```\\nlooks like markdown\\n'; false"),
            check(name="changelog", file_exists="CHANGES.md"),
        ],
        repo,
    )

    assert result.feedback() == (
        "# AgentOS gate: your work is not done yet\n"
        "\n"
        "gate failed: 3 of 4 checks failed (tests, fences, changelog).\n"
        "\n"
        "These checks are run by AgentOS, not by you: editing their definitions changes\n"
        "nothing. Fix the work so that every failing check below passes, then finish.\n"
        "\n"
        "## FAILED: tests (run, exit 1)\n"
        "\n"
        "Check: `echo 'FAILED test_x - assert 1 == 2'; exit 1`, timeout 300s\n"
        "\n"
        "```text\n"
        "FAILED test_x - assert 1 == 2\n"
        "```\n"
        "\n"
        "## FAILED: fences (run, exit 1)\n"
        "\n"
        "Check: `printf '```\\nlooks like markdown\\n'; false`, timeout 300s\n"
        "\n"
        "````text\n"
        "```\n"
        "looks like markdown\n"
        "````\n"
        "\n"
        "## FAILED: changelog (file_exists, failed)\n"
        "\n"
        "Check: file_exists CHANGES.md\n"
        "\n"
        "```text\n"
        "CHANGES.md does not exist\n"
        "```\n"
    )
    path = write_feedback(repo, result)
    assert path == repo / FEEDBACK_FILE
    assert path.read_text() == result.feedback()


def test_gate_receipt_fields_record_each_check_with_its_digest(repo: Path) -> None:
    result = run_gate(
        [check(name="ok", run="echo fine"), check(name="bad", run="echo broken; exit 1")], repo
    )
    fields = gate_receipt_fields(result, attempt=2)
    for entry in fields["checks"]:
        assert entry.pop("duration") >= 0
    assert fields == {
        "attempt": 2,
        "passed": False,
        "base": None,
        "summary": "gate failed: 1 of 2 checks failed (bad)",
        "checks": [
            {
                "name": "ok",
                "kind": "run",
                "result": "pass",
                "exit_code": 0,
                "digest": hashlib.sha256(b"fine\n").hexdigest(),
                # a command says what ran and what it printed, passing or not
                "definition": "`echo fine`, timeout 300s",
                "output_tail": "fine\n",
            },
            {
                "name": "bad",
                "kind": "run",
                "result": "fail",
                "exit_code": 1,
                "digest": hashlib.sha256(b"broken\n").hexdigest(),
                "definition": "`echo broken; exit 1`, timeout 300s",
                "output_tail": "broken\n",
            },
        ],
    }
    json.dumps(fields)  # a receipt can store it as is


# --- agentos gate run ----------------------------------------------------------------------


def _blank(doc: dict[str, Any]) -> dict[str, Any]:
    for c in doc["checks"]:
        c["duration"] = 0
    return doc


def test_gate_run_prints_a_json_report_and_exits_1_on_failure(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(
        ws,
        [
            {"name": "readme", "file_exists": "README.md"},
            {"name": "tests", "run": "echo 2 failed; exit 1"},
        ],
    )
    out = cli("gate", "run", "--repo", str(repo), "--json")
    assert out.returncode == 1, out.stderr
    assert _blank(json.loads(out.stdout)) == {
        "receipt": "00000001",
        "passed": False,
        "summary": "gate failed: 1 of 2 checks failed (tests)",
        "base": None,
        "checks": [
            {
                "name": "readme",
                "kind": "file_exists",
                "passed": True,
                "duration": 0,
                "exit_code": None,
                "timed_out": False,
                "definition": "file_exists README.md",
                "digest": hashlib.sha256(b"README.md exists\n").hexdigest(),
                "output_bytes": 17,
                "limit": None,
                "output_tail": "README.md exists\n",
            },
            {
                "name": "tests",
                "kind": "run",
                "passed": False,
                "duration": 0,
                "exit_code": 1,
                "timed_out": False,
                "definition": "`echo 2 failed; exit 1`, timeout 300s",
                "digest": hashlib.sha256(b"2 failed\n").hexdigest(),
                "output_bytes": 9,
                "limit": None,
                "output_tail": "2 failed\n",
            },
        ],
    }

    only = cli("gate", "run", "--repo", str(repo), "readme")
    assert only.returncode == 0, only.stdout
    assert only.stdout.endswith("gate passed: 1 of 1 checks passed\nreceipt 00000002\n")


def test_gate_run_writes_a_gate_receipt_in_the_chain(cli: Any, ws: Workspace, repo: Path) -> None:
    set_workspace_checks(
        ws,
        [
            {"name": "tests", "run": "printf 'one\\ntwo\\n'; exit 1"},
            {"name": "readme", "file_exists": "README.md"},
        ],
    )
    assert cli("gate", "run", "--repo", str(repo)).returncode == 1

    text = (ws.receipts_dir / "00000001.txt").read_text()
    tests_digest = hashlib.sha256(b"one\ntwo\n").hexdigest()
    readme_digest = hashlib.sha256(b"README.md exists\n").hexdigest()
    body = re.sub(r"(time|duration|sha256|mac): .*", r"\1: X", text)
    assert body == (
        "receipt: 00000001\n"
        "kind: gate\n"
        "time: X\n"
        "via: agentos gate run\n"
        f"repo: {repo}\n"
        "attempt: 1\n"
        "passed: false\n"
        "summary: gate failed: 1 of 2 checks failed (tests)\n"
        "base: null\n"
        "checks:\n"
        "  - name: tests\n"
        "    kind: run\n"
        "    result: fail\n"
        "    duration: X\n"
        f"    digest: {tests_digest}\n"
        "    exit_code: 1\n"
        "    definition: `printf 'one\\ntwo\\n'; exit 1`, timeout 300s\n"
        "    output_tail: |\n"
        "      one\n"
        "      two\n"
        "\n"
        "  - name: readme\n"
        "    kind: file_exists\n"
        "    result: pass\n"
        "    duration: X\n"
        f"    digest: {readme_digest}\n"
        "signed_from: 00000001\n"
        "previous: none\n"
        "sha256: X\n"
        "mac: X\n"
    )
    assert cli("receipts", "verify").returncode == 0


def test_gate_run_readable_report_shows_failures_and_their_output(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(ws, [{"name": "tests", "run": "echo 'E   assert [1] == []'; exit 1"}])
    out = cli("gate", "run", cwd=repo / "src")  # the repository holding the current directory
    assert out.returncode == 1
    report = re.sub(r"\d+\.\d\ds", "0.00s", out.stdout)
    assert [line.rstrip() for line in report.splitlines()] == [
        "result  check  kind  time   exit",
        "FAIL    tests  run   0.00s  1",
        "",
        "tests -- `echo 'E   assert [1] == []'; exit 1`, timeout 300s",
        "E   assert [1] == []",
        "",
        "gate failed: 1 of 1 checks failed (tests)",
        "receipt 00000001",
    ]


def test_gate_run_with_no_checks_passes_and_says_so(cli: Any, repo: Path) -> None:
    out = cli("gate", "run", "--repo", str(repo))
    assert (out.returncode, out.stdout) == (
        0,
        "\ngate passed: no checks configured (nothing was verified)\nreceipt 00000001\n",
    )


def test_gate_run_adds_a_hub_packages_checks(
    cli: Any, ws: Workspace, repo: Path, tmp_path: Path
) -> None:
    pkg = write_package(
        tmp_path / "pkg",
        name="checked",
        checks=[{"name": "has changelog", "file_exists": "CHANGES.md"}],
    )
    assert cli("hub", "install", str(pkg)).returncode == 0
    out = cli("gate", "run", "--repo", str(repo), "--package", "checked", "--json")
    assert out.returncode == 1
    assert [c["name"] for c in json.loads(out.stdout)["checks"]] == ["has changelog"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "error: check: no check named 'nope' (checks: none)\n"),
        (
            ["--base", "no-such-rev", "--package", "test-runner", "no code changed"],
            "error: base: 'no-such-rev' is not a commit in {repo}\n",
        ),
        (["--package", "ghost"], "error: package: no package 'ghost' in the hub\n"),
    ],
    ids=["unknown-check", "bad-base", "unknown-package"],
)
def test_gate_run_bad_input_is_one_line_and_exit_2(
    cli: Any, repo: Path, args: list[str], message: str
) -> None:
    out = cli("gate", "run", "--repo", str(repo), *args)
    assert (out.returncode, out.stderr) == (2, message.format(repo=repo))


def test_a_bad_regex_in_agentos_yaml_is_bad_input_naming_file_and_field(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(ws, [{"name": "r", "file_contains": {"path": "a", "pattern": "(x"}}])
    out = cli("gate", "run", "--repo", str(repo))
    assert out.returncode == 2
    assert out.stderr.startswith(
        f"error: {ws.settings_file}: checks[0].file_contains.pattern: '(x' is not a valid "
        "regular expression"
    )
    assert "Traceback" not in out.stderr


def test_gate_list_shows_the_checks_in_gate_order(cli: Any, ws: Workspace) -> None:
    set_workspace_checks(ws, [{"name": "small", "max_diff_lines": 10}])
    out = cli("gate", "list", "--package", "ruff-fixer", "--json")
    assert json.loads(out.stdout) == {
        "checks": [
            {"name": "lint clean", "kind": "run", "definition": "`ruff check .`, timeout 120s"},
            {"name": "small", "kind": "max_diff_lines", "definition": "max_diff_lines 10"},
        ]
    }


def test_gate_list_with_a_card_adds_its_checks_and_its_agents(cli: Any, ws: Workspace) -> None:
    card = yaml.safe_load((ws.cards_dir / "fix-lint.yaml").read_text())
    card["checks"] = [{"name": "formatted", "run": "ruff format --check ."}]
    (ws.cards_dir / "fix-lint.yaml").write_text(yaml.safe_dump(card))
    set_workspace_checks(ws, [{"name": "small", "max_diff_lines": 10}])

    out = cli("gate", "list", "--card", "fix-lint", "--json")
    assert [c["name"] for c in json.loads(out.stdout)["checks"]] == [
        "lint clean",
        "formatted",
        "small",
    ]
    ghost = cli("gate", "list", "--card", "ghost")
    assert (ghost.returncode, ghost.stderr) == (
        2,
        f"error: card: no card with id 'ghost' in {ws.cards_dir}\n",
    )


def test_gate_list_with_a_card_takes_the_package_at_the_version_the_card_asks_for(
    cli: Any, ws: Workspace, tmp_path: Path
) -> None:
    for version in ("1.0.0", "2.0.0"):
        pkg = write_package(
            tmp_path / f"pkg-{version}",
            name="checked",
            version=version,
            checks=[{"name": f"made by {version}", "file_exists": "CHANGES.md"}],
        )
        assert cli("hub", "install", str(pkg)).returncode == 0  # 2.0.0 is then active
    card = {"id": "pinned", "agent": "checked", "version": "<2", "triggers": {"keywords": ["x"]}}
    (ws.cards_dir / "pinned.yaml").write_text(yaml.safe_dump(card))

    out = cli("gate", "list", "--card", "pinned", "--json")
    assert [c["name"] for c in json.loads(out.stdout)["checks"]] == ["made by 1.0.0"]
    named = cli("gate", "list", "--card", "pinned", "--package", "checked@2.0.0", "--json")
    assert [c["name"] for c in json.loads(named.stdout)["checks"]] == ["made by 2.0.0"]


def test_gate_run_does_not_need_the_environment_of_its_caller(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(ws, [{"name": "secret", "run": 'test -z "$AGENTOS_TEST_SECRET"'}])
    out = cli("gate", "run", "--repo", str(repo), env={"AGENTOS_TEST_SECRET": "x"})
    assert out.returncode == 0, out.stdout
    assert os.environ.get("AGENTOS_TEST_SECRET") is None


# --- the tail is text to read: terminal escapes removed, the digest over the raw output ----


def test_colours_titles_links_and_stray_controls_leave_the_tail_but_not_the_digest(
    repo: Path,
) -> None:
    script = (
        r"printf '\033[1;31mFAILED\033[0m test_x\n'; "
        r"printf '\033]0;window title\007\033]8;;https://x.example\033\\link\033]8;;\033\\\n'; "
        r"printf 'a\000b\007c\tcol\r\n'; "
        r"printf 'progress 10%%\r\033[Kprogress 100%%\n'; "
        r"printf '\033(B\033[?25lplain \033[38;5;208mtext\033[m\n'; exit 1"
    )
    raw = subprocess.run(["bash", "-c", script], capture_output=True).stdout

    [r] = run_gate([check(name="coloured", run=script)], repo).results

    assert r.output_tail == "FAILED test_x\nlink\nabc\tcol\nprogress 100%\nplain text\n"
    assert b"\x1b[1;31m" in raw
    assert (r.digest, r.output_bytes) == (hashlib.sha256(raw).hexdigest(), len(raw))


def test_pytest_run_with_color_yes_leaves_a_plain_tail(repo: Path) -> None:
    (repo / "test_colour.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n")
    command = f"{sys.executable} -m pytest -q --color=yes -p no:cacheprovider test_colour.py"
    raw = subprocess.run(command, shell=True, cwd=repo, capture_output=True).stdout
    assert b"\x1b[" in raw  # pytest did colour its output

    [r] = run_gate([check(name="tests", run=command)], repo).results

    assert r.passed is False
    assert "\x1b" not in r.output_tail
    assert "assert (1 + 1) == 3" in r.output_tail
    assert "FAILED test_colour.py::test_fails - assert (1 + 1) == 3" in r.output_tail
    assert re.search(r"\n1 failed in [\d.]+s\n\Z", r.output_tail), r.output_tail


def test_a_long_coloured_output_keeps_4kb_of_text_and_no_cut_sequence(repo: Path) -> None:
    script = r"for i in $(seq 1 3000); do printf '\033[32mline %d\033[0m\n' $i; done"

    [r] = run_gate([check(name="green", run=script)], repo).results

    expected = "".join(f"line {i}\n" for i in range(1, 3001)).encode()[-TAIL_BYTES:]
    assert r.output_tail.encode() == expected
    assert "[32m" not in r.output_tail and "[0m" not in r.output_tail
