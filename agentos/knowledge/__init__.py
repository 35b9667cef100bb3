"""The knowledge store: a repository's files chunked into an SQLite FTS5 index, searched for
the context an agent gets.

Its parts: :mod:`~agentos.knowledge.store` (the index: add, search, context),
:mod:`~agentos.knowledge.files` (which files it reads), :mod:`~agentos.knowledge.chunking`
(line-addressed chunks), :mod:`~agentos.knowledge.ingest` (reading files, in a second process
when it pays), :mod:`~agentos.knowledge.tokenizer` (``parseDate`` matches ``parse``) and
:mod:`~agentos.knowledge.fts` (any typed text as a safe FTS5 query; ranking; snippets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.knowledge.store import Context, Hit, KnowledgeStore, open_store

FACE = {
    "KnowledgeStore": "agentos.knowledge.store",
    "Hit": "agentos.knowledge.store",
    "Context": "agentos.knowledge.store",
    "open_store": "agentos.knowledge.store",
}
__all__ = [
    "Context",
    "Hit",
    "KnowledgeStore",
    "open_store",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
