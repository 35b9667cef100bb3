"""Whether anything in a directory changed since the last look, for one process: Linux
inotify, asked without blocking.

A long-lived process (the MCP server, a dashboard, an SDK caller routing many requests)
keeps one watch per directory: "nothing changed" then costs one ``read`` that finds no
event, instead of a ``stat`` of every file. Where inotify is not available (another
system, or the per-user limit on watches reached), :meth:`DirWatch.changed` always says
yes, and callers look at the files as they would without it.

The caller must make the watch *before* it first reads the directory, and drain it
(:meth:`changed`) *before* each read: a change during a read then shows on the next ask.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

# <sys/inotify.h>
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL | None:
    """The C library, when it offers inotify: the symbols the interpreter itself is linked
    with (``dlopen(NULL)``), not ``ctypes.util.find_library``, which runs ldconfig."""
    try:
        found = ctypes.CDLL(None, use_errno=True)
        found.inotify_init1  # noqa: B018 -- not on every system
        found.inotify_add_watch  # noqa: B018
    except (OSError, AttributeError):
        return None
    return found


EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_ENDS = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_Q_OVERFLOW


def _names(data: bytes) -> tuple[set[str], bool, bool]:
    """The entries the events in ``data`` name; whether one of them ends the watch (the
    directory gone or moved, events lost); whether one is about the directory itself (no
    entry named: the caller cannot tell which entries it touched)."""
    names: set[str] = set()
    ends = unnamed = False
    offset = 0
    while offset + EVENT.size <= len(data):
        _wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
        start = offset + EVENT.size
        name = data[start : start + length].split(b"\0", 1)[0]
        if mask & _ENDS:
            ends = True
        elif name:
            names.add(os.fsdecode(name))
        else:
            unnamed = True
        offset = start + length
    return names, ends, unnamed


class DirWatch:
    """A watch on one directory (its entries: files added, removed, renamed, written)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        c = libc()
        if c is None:
            return
        fd = c.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return
        if c.inotify_add_watch(fd, os.fsencode(path), _MASK) < 0:
            os.close(fd)
            return
        self._fd = fd

    @property
    def active(self) -> bool:
        return self._fd is not None

    def changed(self) -> bool:
        """True when something happened in the directory since the last call (the events
        are consumed), or when this watch cannot tell. A directory removed or moved away,
        or events lost, end the watch: it cannot tell any more."""
        return self.changes() != set()

    def changes(self) -> set[str] | None:
        """The names of the entries that were added, removed, renamed or written since the
        last call (the events are consumed): empty when nothing happened; None when this
        watch cannot tell (see :meth:`changed`), and then the caller looks at every entry."""
        with self._lock:
            if self._fd is None:
                return None
            seen: set[str] = set()
            unknown = False
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    return None if unknown else seen
                except OSError:
                    self.close()
                    return None
                if not data:
                    self.close()
                    return None
                names, ends, unnamed = _names(data)
                if ends:
                    self.close()
                    return None
                seen |= names
                unknown = unknown or unnamed

    def wait(self, name: str, timeout: float) -> None:
        """Sleep until entry ``name`` is added, written or renamed into the directory, or
        ``timeout`` seconds pass (the whole time when this watch cannot tell). Other
        entries' events are consumed on the way, and do not end the wait."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            fd = self._fd
            if fd is None:
                time.sleep(left)
                return
            try:
                if not select.select([fd], [], [], left)[0]:
                    return
            except (OSError, ValueError):  # closed meanwhile
                return
            seen = self.changes()
            if seen is None or name in seen:
                return

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound at definition: a watch a module global keeps is closed while the
        # interpreter exits, when that module's globals may be gone already.
        if self._fd is not None:
            _close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()
