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
import struct
import threading
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


def _ends_watch(data: bytes) -> bool:
    offset = 0
    while offset + EVENT.size <= len(data):
        _wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
        if mask & _ENDS:
            return True
        offset += EVENT.size + length
    return False


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
        with self._lock:
            if self._fd is None:
                return True
            seen = False
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    return seen
                except OSError:
                    self.close()
                    return True
                if not data:
                    self.close()
                    return True
                seen = True
                if _ends_watch(data):
                    self.close()
                    return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()
