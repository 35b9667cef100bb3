"""AgentOS's state: runs, agents, events, workflow executions and tasks, the guardian's
memory (and, on PostgreSQL, the receipts chain), in ``.agentos/state.db`` or a PostgreSQL
database that many machines share.

Where it is (:mod:`~agentos.state.location`), which machine this is
(:mod:`~agentos.state.host`), the one API the stores use over either backend
(:mod:`~agentos.state.database`: :mod:`~agentos.state.sqlite` through apsw, and
:mod:`~agentos.state.postgres` through psycopg, imported only for PostgreSQL), their ordered,
named migrations (:mod:`~agentos.state.migrations`), SQLite's failures as one-line errors
naming the file (:mod:`~agentos.state.errors`), and copying a workspace's state to
PostgreSQL (:mod:`~agentos.state.transfer`). The stores that write it belong to their
concepts (:mod:`agentos.run.store`, :mod:`agentos.workflows.store`,
:mod:`agentos.guardian.store`, :mod:`agentos.receipts.table`).
"""

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.state.database import Store
    from agentos.state.location import StateLocation
    from agentos.state.migrations import Migration

# Imported when first used: a store imports the part it needs (`runs list` reads no schema).
FACE = {
    "Migration": "agentos.state.migrations",
    "StateLocation": "agentos.state.location",
    "Store": "agentos.state.database",
}

__all__ = ["Migration", "StateLocation", "Store"]

if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
