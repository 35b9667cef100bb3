"""Where a workspace's state lives: SQLite in ``.agentos/state.db`` (the default), or a
PostgreSQL database that many machines share, named by a URL.

The URL comes from ``AGENTOS_STATE_URL`` when it is set, else from ``state:`` in
``agentos.yaml``. It is ``postgresql://USER@HOST:PORT/DB`` (``postgres://`` too; a Unix
socket's directory as ``?host=/run/postgresql``). A password belongs in
``AGENTOS_STATE_URL``, ``PGPASSWORD`` or ``~/.pgpass``, never in ``agentos.yaml``, which is
refused when it holds one. Whatever AgentOS prints or writes shows the URL masked
(:attr:`StateLocation.masked`): its password, wherever it was given, as ``***``.

Nothing here imports a database driver: reading where the state is costs a look at the
environment and the settings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentos.errors import BadInput

ENV = "AGENTOS_STATE_URL"
SETTING = "state"
SCHEMES = ("postgresql", "postgres")
SHAPE = "postgresql://USER@HOST:PORT/DB"
MASK = "***"
_MAX_URL = 2048
_PASSWORD_PARAM = re.compile(r"(?i)(^|[?&])(password=)[^&]*")

Backend = Literal["sqlite", "postgresql"]


@dataclass(frozen=True)
class StateLocation:
    """Where the state is. ``url`` is the whole URL as given (with its password, if any:
    never printed, never written); ``source`` says where it came from (``AGENTOS_STATE_URL``,
    ``agentos.yaml``, or ``default`` for the workspace's own SQLite file)."""

    backend: Backend
    path: Path | None = None
    url: str | None = None
    source: str = "default"

    @property
    def masked(self) -> str:
        """The URL with its password as ``***`` (the SQLite file's path for SQLite)."""
        if self.url is None:
            return str(self.path)
        return mask(self.url)

    @property
    def shared(self) -> bool:
        """Whether other machines may share this state (PostgreSQL)."""
        return self.backend == "postgresql"

    def __str__(self) -> str:
        return self.masked


def mask(url: str) -> str:
    """``url`` with any password in it (``user:PASSWORD@``, ``?password=``) as ``***``."""
    from urllib.parse import urlsplit  # only where a URL is given: SQLite reads none

    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}"
    query = _PASSWORD_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", parts.query)
    rest = (
        parts.path
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )
    return f"{parts.scheme}://{netloc}{rest}"


def has_password(url: str) -> bool:
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        return True
    return any(k.lower() == "password" for k, _ in parse_qsl(parts.query, keep_blank_values=True))


def parse_url(text: str, *, source: str, file: Path | None = None) -> StateLocation:
    """The location ``text`` names; :class:`BadInput` naming ``file`` and ``source`` (the
    variable or the setting), and the URL masked, when it is not a PostgreSQL URL AgentOS
    can use."""
    from urllib.parse import unquote, urlsplit

    url = text.strip()
    shown = mask(url) if "://" in url else url
    if not url or len(url) > _MAX_URL or any(ord(c) < 32 or c == "\x7f" for c in url):
        raise BadInput(
            f"{shown[:80]!r} is not a PostgreSQL URL: it must look like {SHAPE} (or be unset: "
            "the state is then SQLite, the default)",
            file=file,
            field=source,
        )
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not url.lower().startswith(f"{parts.scheme}://"):
        raise BadInput(
            f"{shown} is not a PostgreSQL URL: it must look like {SHAPE} (or be unset: the "
            "state is then SQLite, the default)",
            file=file,
            field=source,
        )
    try:
        parts.port  # noqa: B018 -- reading it checks it
    except ValueError:
        raise BadInput(
            f"{shown}: the port is not a number from 1 to 65535 ({SHAPE})", file=file, field=source
        ) from None
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise BadInput(
            f"{shown} names no database: it must look like {SHAPE}", file=file, field=source
        )
    return StateLocation("postgresql", url=url, source=source)


def refuse_password(url: str, *, file: Path | None = None) -> None:
    """A password written in ``agentos.yaml`` is refused: it would be read by everyone who
    reads the workspace's settings (and copied with them)."""
    if has_password(url):
        raise BadInput(
            f"{mask(url)} holds a password: agentos.yaml is no place for it; give it in "
            f"{ENV}, PGPASSWORD or ~/.pgpass and write the URL here without it",
            file=file,
            field=SETTING,
        )


def locate(default: Path, configured: str | None, settings_file: Path) -> StateLocation:
    """Where a workspace's state is: ``AGENTOS_STATE_URL`` (which wins), else ``configured``
    (``state:`` in ``settings_file``, checked when the settings were), else ``default``,
    the workspace's SQLite file."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return parse_url(env, source=ENV)
    if configured:
        refuse_password(configured, file=settings_file)
        found = parse_url(configured, source=SETTING, file=settings_file)
        return StateLocation("postgresql", url=found.url, source=str(settings_file))
    return StateLocation("sqlite", path=default)
