"""A command in its own process group, its output captured: the last few KB as text to
read, the sha256 and size of all of it.

Every check of the gate, and every confined check, yields an :class:`Outcome`: pass or fail,
the tail of its output, the sha256 of the whole output. The tail is kept as text to read
(terminal escape sequences and stray control characters removed, see :func:`plain_text`);
the sha256 and the size are those of the raw output.
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

from agentos.errors import MissingTool

TAIL_BYTES = 4096
_RAW_TAIL_BYTES = 4 * TAIL_BYTES  # kept raw, so the tail is still ~4 KB once colours are gone
DRAIN_SECONDS = 2.0  # how long to read leftover output once the check's process group is gone
_POLL = 0.1


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


# --- a command in its own process group -------------------------------------------------


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
