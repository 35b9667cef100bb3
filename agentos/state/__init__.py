"""AgentOS's state database, ``.agentos/state.db``.

SQLite through apsw: connections and ordered, named migrations
(:mod:`~agentos.state.database`), and its failures as one-line errors naming the file
(:mod:`~agentos.state.errors`). The stores that write it belong to their concepts
(:mod:`agentos.run.store`, :mod:`agentos.workflows.store`, :mod:`agentos.guardian.store`).
"""

from agentos.state.database import STATE_MIGRATIONS, Migration, Store, connect, transaction

__all__ = ["STATE_MIGRATIONS", "Migration", "Store", "connect", "transaction"]
