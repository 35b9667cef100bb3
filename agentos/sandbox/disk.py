"""The disk quota of one agent: all the files it writes together (its worktree, its run's
files, its ``/tmp`` and its home) may not grow past ``sandbox.disk``.

Why this design. The machine's file systems are what they are (here ext4 without project
quotas; bubblewrap 0.8 offers a sized tmpfs and no overlay), and a loop-mounted image per
agent costs far more than the sandbox's start budget. So:

- ``/tmp`` and the home are tmpfs sized at the quota (and, being memory, count against the
  memory limit too); what they hold is read from the sandbox's own view of them;
- the paths it writes on disk are watched with inotify (a watch per directory, new
  directories watched as they appear): every write wakes the watch, which takes the size
  the file now has on disk; when the growth since the start passes the quota, the agent's
  processes are killed at once and its attempt ends with ``limit: disk``;
- ``file_size`` still bounds each file by itself.

The overshoot. The kill follows the write that crossed the quota, not precedes it: what the
agent writes between that write and the kill (a few milliseconds, measured by
``benchmarks/sandbox_bench.py``) lands too, and no single file can hold more than one
``file_size``. A file written through a shared memory map grows without an event until it
is closed: every file seen is measured again every :data:`RESTAT` seconds, and what such a
file gains in that time is the overshoot. Where inotify is not to be had (out of watches,
say), the paths are measured every :data:`POLL` seconds instead, and the overshoot is what
the agent writes in that time. A tree so large that measuring it takes time is measured
less often (never more than a tenth of the time), so that no agent can make the
orchestrator spend its time measuring.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agentos.shared import dirwatch

POLL = 0.1  # seconds between two looks at the tmpfs (and at everything without inotify)
# Seconds between two looks at the size of every file it may have written: a file written
# through a shared memory map grows with no inotify event until it is closed.
RESTAT = 1.0
_IN_ISDIR = 0x40000000
_MASK = (
    dirwatch.IN_MODIFY
    | dirwatch.IN_CLOSE_WRITE
    | dirwatch.IN_CREATE
    | dirwatch.IN_DELETE
    | dirwatch.IN_MOVED_FROM
    | dirwatch.IN_MOVED_TO
)


def _usage(path: str) -> int:
    """Bytes ``path`` holds on disk (a file, or nothing)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_blocks * 512


class DiskWatch:
    """Watches what one agent writes; calls ``over`` once, from its own thread, when the
    agent has written more than ``quota`` bytes since the watch began."""

    def __init__(
        self,
        roots: Sequence[Path],
        quota: int,
        over: Callable[[], None],
        views: Callable[[], list[str]] = lambda: [],
    ) -> None:
        """``roots``: the paths it writes on disk; ``views``: its tmpfs mounts, as paths
        this process can reach (``/proc/<pid>/root/tmp``), asked anew at each look."""
        self.roots = [str(r) for r in roots if r.exists()]
        self.quota, self.over, self.views = quota, over, views
        self.sizes: dict[str, int] = {}
        self.total = 0  # what the files under the roots hold now
        self.dirs: dict[int, str] = {}
        self.tmpfs = 0  # what its tmpfs mounts held at the last look
        self.hit = False
        self._stop = threading.Event()
        self._closing = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._libc = dirwatch.libc()
        self._fd = -1
        if self._libc is not None:
            self._fd = self._libc.inotify_init1(dirwatch.IN_NONBLOCK | dirwatch.IN_CLOEXEC)
        for root in self.roots:
            self._add(root)
        self.baseline = self.total
        self._thread = threading.Thread(target=self._loop, name="agentos-disk", daemon=True)
        self._thread.start()

    @property
    def used(self) -> int:
        """Bytes written since the watch began, at the last look."""
        return self.total - self.baseline + self.tmpfs

    def _set(self, path: str, size: int | None) -> None:
        self.total += (size or 0) - self.sizes.pop(path, 0)
        if size is not None:
            self.sizes[path] = size

    def _add(self, root: str) -> None:
        """Watch ``root`` and every directory under it; take each file's size."""
        if not os.path.isdir(root) or os.path.islink(root):
            self._set(root, _usage(root))
            return
        for parent, dirs, files in os.walk(root):
            self._watch(parent)
            for name in files:
                path = os.path.join(parent, name)
                self._set(path, _usage(path))
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(parent, d))]

    def _watch(self, path: str) -> None:
        if self._fd < 0 or self._libc is None:
            return
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:  # out of watches: measure by looking every POLL seconds instead
            os.close(self._fd)
            self._fd = -1
            return
        self.dirs[wd] = path

    def _rescan(self) -> None:
        self.sizes.clear()
        self.total = 0
        for root in self.roots:
            self._add(root)

    def _restat(self) -> None:
        for path in list(self.sizes):
            self._set(path, _usage(path))

    def _loop(self) -> None:
        measure_at = time.monotonic() + (RESTAT if self._fd >= 0 else POLL)
        try:
            while not self._stop.is_set():
                watched = [self._wake_r] + ([self._fd] if self._fd >= 0 else [])
                ready, _, _ = select.select(watched, [], [], POLL)
                if self._stop.is_set():
                    return
                if self._fd in ready:
                    self._events()
                if not ready:
                    self._look_at_views()
                if time.monotonic() >= measure_at:  # every file again (all, without inotify)
                    started = time.monotonic()
                    if self._fd >= 0:
                        self._restat()
                    else:
                        self._rescan()
                    took = time.monotonic() - started
                    # A tree so large that measuring it takes time is measured less often,
                    # so that it never takes more than a tenth of this process's time.
                    every = RESTAT if self._fd >= 0 else POLL
                    measure_at = time.monotonic() + max(every, 10 * took)
                if self._check():
                    return
        finally:
            # Closed here, not by close(): closing an inotify descriptor waits for the
            # kernel (~15 ms), which an agent's attempt need not wait for.
            with self._closing:
                self._stop.set()
                for fd in (self._fd, self._wake_r, self._wake_w):
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)

    def _events(self) -> None:
        try:
            data = os.read(self._fd, 1 << 16)
        except OSError:
            return
        offset = 0
        event = dirwatch.EVENT
        while offset + event.size <= len(data):
            wd, mask, _cookie, length = event.unpack_from(data, offset)
            name = data[offset + event.size : offset + event.size + length].rstrip(b"\0")
            offset += event.size + length
            if mask & dirwatch.IN_Q_OVERFLOW:  # events were lost: measure everything
                self._rescan()
                continue
            base = self.dirs.get(wd)
            if base is None:
                continue
            path = os.path.join(base, os.fsdecode(name)) if name else base
            if mask & _IN_ISDIR:
                if mask & (dirwatch.IN_CREATE | dirwatch.IN_MOVED_TO):
                    self._add(path)
                continue
            gone = mask & (dirwatch.IN_DELETE | dirwatch.IN_MOVED_FROM)
            self._set(path, None if gone else _usage(path))
            if self._check():
                return

    def _look_at_views(self) -> None:
        tmpfs = 0
        for view in self.views():
            with contextlib.suppress(OSError):
                st = os.statvfs(view)
                # Only the sandbox's own tmpfs, sized at the quota: while the sandbox is
                # being set up, the path still leads to the host's file system.
                if st.f_blocks * st.f_frsize <= self.quota + (1 << 20):
                    tmpfs += (st.f_blocks - st.f_bfree) * st.f_frsize
        self.tmpfs = tmpfs

    def _check(self) -> bool:
        """Whether the quota is passed (``over`` is then called, once)."""
        if not self.hit and self.used > self.quota:
            self.hit = True
            self._stop.set()
            self.over()
        return self.hit

    def close(self) -> None:
        """Stop watching (idempotent); the watch's thread ends on its own at once."""
        with self._closing:
            if not self._stop.is_set():  # (else the thread has closed the pipe, or will)
                self._stop.set()
                os.write(self._wake_w, b"x")
