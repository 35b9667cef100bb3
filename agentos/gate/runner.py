"""Running one Stormbreaker check: a shell command in its own process group, or a built-in.

Every check yields an :class:`Outcome`: pass or fail, the last few KB of its output, and the
sha256 of the whole output. A shell check's output is stdout and stderr interleaved as the
command wrote them; a built-in check's output is the text it reports. The tail is kept as
text to read (terminal escape sequences and stray control characters removed, see
:func:`plain_text`); the sha256 and the size are those of the raw output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput, MissingTool
from agentos.shared import patterns

TAIL_BYTES = 4096
_RAW_TAIL_BYTES = 4 * TAIL_BYTES  # kept raw, so the tail is still ~4 KB once colours are gone
DRAIN_SECONDS = 2.0  # how long to read leftover output once the check's process group is gone
_POLL = 0.1

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


@dataclass(frozen=True)
class Outcome:
    passed: bool
    tail: str
    digest: str
    size: int
    exit_code: int | None = None
    timed_out: bool = False
    limit: str | None = None  # the sandbox limit that stopped it


# What a terminal interprets rather than shows: CSI (colours, cursor moves, erasing), the
# string sequences (OSC titles and hyperlinks, DCS, SOS, PM, APC) up to their terminator (or
# the end of the line when it is missing), their 8-bit forms, and every other ESC sequence.
_ESCAPES = re.compile(
    r"""
      (?:\x1b\[|\x9b) [0-?]* [ -/]* [@-~]
    | (?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f]) [^\x07\x1b\x9c]*? (?:\x07|\x1b\\|\x9c)
    | (?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f]) [^\x07\x1b\x9c\n]*
    | \x1b [ -/]* [0-~]?
    """,
    re.VERBOSE,
)
# Control characters left over, except tab and newline (carriage returns are handled first).
_STRAY = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: str) -> str:
    """``text`` as a terminal would leave it to read: escape sequences removed, each line
    what its last carriage return left visible (a progress bar's final state), and no other
    control character than tab and newline."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(
            next((seg for seg in reversed(line.split("\r")) if seg), "")
            for line in text.split("\n")
        )
    return _STRAY.sub("", text)


class _Capture:
    """The whole output hashed as it streams by; only its tail kept in memory."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._tail = bytearray()
        self.size = 0

    def add(self, data: bytes) -> None:
        self._hash.update(data)
        self.size += len(data)
        self._tail += data
        if len(self._tail) > _RAW_TAIL_BYTES:
            del self._tail[: len(self._tail) - _RAW_TAIL_BYTES]

    def outcome(
        self, passed: bool, exit_code: int | None = None, timed_out: bool = False
    ) -> Outcome:
        raw = bytes(self._tail)
        if self.size > len(raw) and b"\n" in raw:
            raw = raw[raw.index(b"\n") + 1 :]  # a line (or an escape sequence) cut in half
        text = plain_text(raw.decode("utf-8", errors="replace")).encode("utf-8")
        tail = text[-TAIL_BYTES:].decode("utf-8", errors="replace")
        if len(text) > TAIL_BYTES:
            tail = tail.lstrip("\ufffd")  # a character cut in half by the tail boundary
        return Outcome(passed, tail, self._hash.hexdigest(), self.size, exit_code, timed_out)


def reported(passed: bool, text: str) -> Outcome:
    """The outcome of a built-in check, whose output is the text it reports."""
    cap = _Capture()
    cap.add(text.encode("utf-8", "backslashreplace"))  # a lone surrogate never raises
    return cap.outcome(passed)


def shown(path: str) -> str:
    """A path read from git or the file system, as text: the bytes of a name that is not
    UTF-8 (which ``os.fsdecode`` carries as lone surrogates) are written ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


# --- shell checks --------------------------------------------------------------------------


def kill_group(pgid: int) -> None:
    """SIGKILL to a process group, gone or not."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_shell(
    command: str,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    wrap: Callable[[list[str]], list[str]] | None = None,
    *,
    stop: threading.Event | None = None,
    started: Callable[[int], None] | None = None,
) -> Outcome:
    """Run ``bash -c command`` in a new session; kill its whole process group at ``timeout``,
    or as soon as ``stop`` is set (the run was cancelled).

    When bash exits, whatever it left running in its group is killed too, so a check can
    neither outlive the gate nor hold its output pipe open. ``wrap`` turns the argv into
    the confined one (see :mod:`agentos.sandbox`); ``started`` is told the process group's
    id once it runs (so that it can be killed should this process die first).
    """
    bash = shutil.which("bash", path=env.get("PATH")) or shutil.which("bash")
    if bash is None:
        raise MissingTool("bash is needed to run shell checks and is not on PATH")
    argv = [bash, "-c", command]
    if wrap is not None:
        argv = wrap(argv)
    cap = _Capture()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:  # e.g. the directory vanished under us
        return reported(False, f"could not start the check: {exc}\n")
    assert proc.stdout is not None
    if started is not None:
        started(proc.pid)
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    timed_out = eof = cancelled = False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if stop is not None and stop.is_set():
                    cancelled = True
                    break
                if eof:  # the command closed its output but may still be working
                    try:
                        proc.wait(timeout=min(remaining, _POLL))
                    except subprocess.TimeoutExpired:
                        continue
                    break
                if proc.poll() is not None:
                    break
                if sel.select(min(remaining, _POLL)):
                    chunk = os.read(fd, 65536)
                    if chunk:
                        cap.add(chunk)
                    else:
                        eof = True
                        sel.unregister(fd)
        finally:
            kill_group(proc.pid)  # before reaping bash, so the group id cannot be reused
            proc.wait()
        drain_until = time.monotonic() + DRAIN_SECONDS
        while not eof and time.monotonic() < drain_until:
            if sel.select(_POLL):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                cap.add(chunk)
    proc.stdout.close()
    if cancelled:
        cap.add(b"\n[agentos] cancelled with its run: process group killed\n")
        return cap.outcome(False, None)
    if timed_out:
        cap.add(f"\n[agentos] timed out after {timeout:g}s: process group killed\n".encode())
        return cap.outcome(False, None, timed_out=True)
    return cap.outcome(proc.returncode == 0, proc.returncode)


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
