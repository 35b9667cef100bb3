"""Which machine this is: the host id every run and agent record carries.

Where the state is shared (PostgreSQL), a run's process ids, tmux sessions, worktrees and
logs mean something only on the host that runs it: ``gc``, the guardian, ``runs cancel``
and ``attach`` act on them only for their own host's records, and ask the owner for the
rest. The id is ``AGENTOS_HOST_ID`` when set (where machines share a hostname, as copies of
one container image may), else the machine's hostname.

Each host that runs something heartbeats into the state (:data:`HEARTBEAT`); a host
silent for longer than :func:`silent_after` seconds (``AGENTOS_HOST_SILENT_AFTER``,
default 120) has its live runs marked ``aborted`` by whichever machine looks next.
"""

from __future__ import annotations

import math
import os
import re

from agentos.errors import BadInput

HOST_ENV = "AGENTOS_HOST_ID"
SILENT_ENV = "AGENTOS_HOST_SILENT_AFTER"
DEFAULT_SILENT_AFTER = 120.0
HEARTBEAT_SHARE = 6  # heartbeats in a silent_after: a few may be late before a host counts as gone
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def host_id() -> str:
    """This machine's id (``AGENTOS_HOST_ID``, else its hostname, made a plain name)."""
    given = os.environ.get(HOST_ENV, "").strip()
    if given:
        if not _ID.fullmatch(given):
            raise BadInput(
                f"{given[:70]!r} is not a host id: letters, digits and ._- (at most 63)",
                field=HOST_ENV,
            )
        return given
    name = re.sub(r"[^A-Za-z0-9._-]", "-", os.uname().nodename).strip("-._")[:63]
    return name or "localhost"


def silent_after() -> float:
    """Seconds without a heartbeat after which a host's live runs are aborted by others."""
    raw = os.environ.get(SILENT_ENV, "").strip()
    if not raw:
        return DEFAULT_SILENT_AFTER
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 86400:
        raise BadInput(f"must be seconds between 1 and 86400, not {raw!r}", field=SILENT_ENV)
    return value


def heartbeat_interval() -> float:
    """Seconds between a live host's heartbeats."""
    return min(10.0, silent_after() / HEARTBEAT_SHARE)
