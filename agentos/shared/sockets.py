"""The address of a Unix socket at any path. Standard modules only, and few: the client of
the command servers imports it on the path of `agentos route`."""

from __future__ import annotations

import os


class UnixAddress:
    """An address for the Unix socket at ``path`` that fits in a socket address (108
    bytes) however long its directory's path: the socket's name through a descriptor of
    its directory, good while the ``with`` block lasts."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.directory, self.name = os.path.split(os.fspath(path))
        self.fd: int | None = None

    def __enter__(self) -> str:
        self.fd = os.open(self.directory or ".", os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.fd}/{self.name}"

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
