"""What the state's backends share: the connection the stores use and the listener
followers wait on (:mod:`agentos.state.database` opens them), what a lost connection
raises, and the refusal of a schema newer than this AgentOS."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from agentos.errors import StateUnavailable

POLL = "*"  # what a listener that cannot be notified hands back: anything may have changed
EVENTS = "agentos_events"  # a new event: "ID RUN" (RUN empty when it belongs to none)
CANCELS = "agentos_cancel"  # a run on another host asked to cancel: its id


class ConnectionLost(StateUnavailable):
    """The connection to the state's server broke (the server went away, the network
    dropped): a store opens it again and retries within its window."""


class Connection(Protocol):
    """One connection to the state database, as the stores use it."""

    dialect: str  # "sqlite" or "postgresql"
    where: str  # the file, or the URL masked: what messages name

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def write(self, sql: str, args: Sequence[Any] = ()) -> int: ...

    def write_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def begin(self) -> AbstractContextManager[None]: ...

    def lock(self, name: str) -> None: ...

    def applied(self) -> set[str]: ...

    def reconnect(self) -> None: ...

    def close(self) -> None: ...


class Listener(Protocol):
    """Waits for what a channel announces (:data:`EVENTS`, :data:`CANCELS`)."""

    def wait(self, timeout: float) -> list[str]:
        """The payloads announced, waiting up to ``timeout`` s for the first; ``[POLL]``
        when the backend cannot announce (look yourself), or after a lost connection came
        back (what was announced meanwhile is gone); empty when nothing came."""
        ...

    def close(self) -> None: ...


class Poller:
    """SQLite's listener: nothing is announced, so after each interval the follower looks."""

    def wait(self, timeout: float) -> list[str]:
        time.sleep(timeout)
        return [POLL]

    def close(self) -> None:
        pass


def unknown(applied: Iterable[str], known: Sequence[str]) -> list[str]:
    """The migrations a database records that this AgentOS does not know: a newer one's."""
    return sorted(set(applied) - set(known))


def refuse_newer(con: Connection, known: Sequence[str]) -> None:
    newer = unknown(con.applied(), known)
    if newer:
        raise StateUnavailable(
            f"its schema is newer than this AgentOS (it has migration {newer[0]}, which this "
            "version does not know): upgrade AgentOS on this machine to use it",
            file=con.where,
        )
