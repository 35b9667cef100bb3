"""The gate's built-in checks: files that must exist or contain a pattern, and what a change
may touch (the paths it changes, how many lines). Each yields an
:class:`~agentos.shared.process.Outcome` whose output is the text it reports; the shell
checks run through :func:`agentos.shared.process.run_shell`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput, MissingTool
from agentos.shared import patterns
from agentos.shared.process import Outcome, reported

# Root-level files AgentOS itself writes into a worktree (AGENTOS_FEEDBACK.md, context files):
# they are not the agent's change, so the diff checks do not count them.
_AGENTOS_FILE = re.compile(r"^AGENTOS_[^/]*$")

# Variables that would point git at another repository than the worktree's.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
)


def shown(path: str) -> str:
    """A path read from git or the file system, as text: the bytes of a name that is not
    UTF-8 (which ``os.fsdecode`` carries as lone surrogates) are written ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


# --- files -----------------------------------------------------------------------------


def inside(worktree: Path, rel: str) -> Path | None:
    """``worktree/rel`` resolved, or None when a symlink takes it outside the worktree."""
    path = (worktree / rel).resolve()
    return path if path.is_relative_to(worktree.resolve()) else None


def file_exists(worktree: Path, rel: str) -> Outcome:
    path = inside(worktree, rel)
    if path is None:
        return reported(False, f"{rel} leads outside the worktree (symlink)\n")
    if path.exists():
        return reported(True, f"{rel} exists\n")
    return reported(False, f"{rel} does not exist\n")


def file_contains(worktree: Path, rel: str, pattern: str) -> Outcome:
    path = inside(worktree, rel)
    if path is None:
        return reported(False, f"{rel} leads outside the worktree (symlink)\n")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return reported(False, f"{rel} does not exist\n")
    except OSError as exc:
        return reported(False, f"{rel} cannot be read: {exc.strerror or exc}\n")
    try:
        regex = patterns.compile(pattern, multiline=True)  # RE2: linear in the agent's file
    except ValueError as exc:
        return reported(False, f"/{pattern}/ cannot be matched: {exc}\n")
    data = patterns.encode(text)
    start = regex.first(data)
    if start is None:
        return reported(False, f"no match for /{pattern}/ in {rel}\n")
    line = data.count(b"\n", 0, start) + 1
    return reported(True, f"/{pattern}/ matches {rel} at line {line}\n")


# --- diffs against the base ------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: str  # relative to the repository's top level, with /
    added: int
    removed: int
    untracked: bool = False
    binary: bool = False

    @property
    def lines(self) -> int:
        return 1 if self.binary else self.added + self.removed


def _git_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}


def git(worktree: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("git") is None:
        raise MissingTool("git is needed for diff checks and is not on PATH")
    return subprocess.run(
        ["git", "-C", str(worktree), *args],
        capture_output=True,
        env=_git_env(),
        stdin=subprocess.DEVNULL,
    )


def toplevel(path: Path) -> Path | None:
    """The top of the git working tree holding ``path``, or None outside git."""
    out = git(path, "rev-parse", "--show-toplevel")
    return Path(os.fsdecode(out.stdout.strip())) if out.returncode == 0 else None


def resolve_base(worktree: Path, base: str) -> tuple[Path, str]:
    """The top of ``worktree``'s git working tree and the commit id ``base`` names there;
    :class:`BadInput` when either does not exist."""
    top = toplevel(worktree)
    if top is None:
        raise BadInput(
            f"{worktree} is not a git repository; diff checks need one", field="worktree"
        )
    out = git(top, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if out.returncode != 0:
        raise BadInput(f"{base!r} is not a commit in {worktree}", field="base")
    return top, out.stdout.decode().strip()


def _count_lines(path: Path) -> tuple[int, bool]:
    """(lines, binary) of an untracked file, counted the way ``git diff --numstat`` would."""
    if path.is_symlink() or not path.is_file():
        return 1, True
    lines = 0
    last = b""
    with path.open("rb") as fh:
        first = True
        while chunk := fh.read(1 << 16):
            if first and b"\0" in chunk[:8000]:
                return 1, True
            first = False
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    if last and last != b"\n":
        lines += 1
    return lines, False


def changes(top: Path, base: str) -> list[Change]:
    """Every file of the working tree at ``top`` that differs from commit ``base``:
    committed, staged, unstaged and untracked.

    Files ignored by git (``.gitignore``, ``info/exclude``) and the root-level ``AGENTOS_*``
    files AgentOS writes into a worktree are not counted.
    """
    diff = git(
        top,
        "-c",
        "core.quotepath=off",
        "diff",
        "--numstat",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        base,
        "--",
    )
    if diff.returncode != 0:
        raise BadInput(
            f"git diff against {base!r} failed: {diff.stderr.decode(errors='replace').strip()}",
            field="base",
        )
    found: dict[str, Change] = {}
    for record in diff.stdout.split(b"\0"):
        if not record:
            continue
        added, removed, raw = record.split(b"\t", 2)
        path = os.fsdecode(raw)
        binary = added == b"-"
        found[path] = Change(
            path, 0 if binary else int(added), 0 if binary else int(removed), binary=binary
        )
    others = git(top, "ls-files", "-z", "--others", "--exclude-standard", "--full-name")
    for raw in others.stdout.split(b"\0"):
        if raw:
            path = os.fsdecode(raw)
            lines, binary = _count_lines(top / path)
            found[path] = Change(path, lines, 0, untracked=True, binary=binary)
    return sorted(
        (c for c in found.values() if not _AGENTOS_FILE.match(c.path)), key=lambda c: c.path
    )


def glob_regex(glob: str) -> re.Pattern[str]:
    """A repository-relative glob: ``*`` and ``?`` stay inside one directory, ``**`` crosses
    them, ``[...]`` is a class. A pattern also matches everything under what it names, so
    ``docs`` and ``docs/`` cover ``docs/a/b.md``."""
    g = glob.removeprefix("./").strip("/")
    out: list[str] = []
    i = 0
    while i < len(g):
        if g.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif g.startswith("**", i):
            out.append(".*")
            i += 2
        elif g[i] == "*":
            out.append("[^/]*")
            i += 1
        elif g[i] == "?":
            out.append("[^/]")
            i += 1
        elif g[i] == "[" and (end := g.find("]", i + 2)) != -1:
            body = g[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(g[i]))
            i += 1
    return re.compile("(?:" + "".join(out) + r")(?:/.*)?\Z")


def no_changes_outside(found: list[Change], base: str, globs: list[str]) -> Outcome:
    patterns = [glob_regex(g) for g in globs]
    outside = [c for c in found if not any(p.match(c.path) for p in patterns)]
    allowed = ", ".join(globs) if globs else "(nothing)"
    if not outside:
        return reported(True, f"{len(found)} changed file(s), all inside {allowed}\n")
    lines = [f"{len(outside)} file(s) changed outside {allowed} (against {base[:12]}):"]
    lines += [f"  {shown(c.path)}{' (untracked)' if c.untracked else ''}" for c in outside]
    return reported(False, "\n".join(lines) + "\n")


def max_diff_lines(found: list[Change], base: str, limit: int) -> Outcome:
    total = sum(c.lines for c in found)
    head = f"{total} line(s) changed in {len(found)} file(s) against {base[:12]} (limit {limit})"
    body = [
        f"  +{c.added} -{c.removed}  {shown(c.path)}"
        f"{' (binary)' if c.binary else ''}{' (untracked)' if c.untracked else ''}"
        for c in sorted(found, key=lambda c: (-c.lines, c.path))[:50]
    ]
    return reported(total <= limit, "\n".join([head, *body]) + "\n")
