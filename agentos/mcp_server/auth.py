"""The workspace's MCP token: what a client of ``agentos mcp serve --http`` must send as
``Authorization: Bearer TOKEN``.

It is made once per workspace (32 random bytes, URL-safe) and kept in ``.agentos/mcp-token``,
mode 0600: inside the state directory, which every sandbox hides from agents and which MCP
clients may not name (:mod:`agentos.mcp_server.paths`). Remove the file to make a new token; the
clients registered with the old one then need ``agentos mcp install`` again.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

from agentos.errors import BadInput
from agentos.workspace.layout import Workspace

TOKEN_FILE = "mcp-token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,}")
_REMEDY = "remove it and `agentos mcp serve --http` makes a new token"


def token_file(ws: Workspace) -> Path:
    return ws.state_dir / TOKEN_FILE


def workspace_token(ws: Workspace) -> str:
    """The workspace's token, made now when it has none."""
    path = token_file(ws)
    if not os.path.lexists(path):
        _create(path)
    return _read(path)


def _create(path: Path) -> None:
    """Write a new token beside ``path`` and link it into place: a concurrent creator wins
    or loses whole, and nobody ever reads a half-written token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise BadInput(f"cannot read the MCP token: {exc.strerror}; {_REMEDY}", file=path) from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"is not a regular file; {_REMEDY}", file=path)
        if mode & 0o077:
            raise BadInput(
                f"the MCP token is readable by others (mode {stat.S_IMODE(mode):o}); {_REMEDY}",
                file=path,
            )
        text = fh.read(4096).decode("ascii", "replace").strip()
    if not _TOKEN.fullmatch(text):
        raise BadInput(f"does not hold an MCP token; {_REMEDY}", file=path)
    return text
