"""Words and stems, shared by the router, the interview engine and the knowledge store.

Stemming is SQLite FTS5's own Porter tokenizer (through apsw), so a word is stemmed
exactly the way the knowledge store's index stems it.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import apsw

_local = threading.local()


def _tokenizer(stem: bool) -> apsw.FTS5Tokenizer:
    cache = getattr(_local, "tokenizers", None)
    if cache is None:
        con = apsw.Connection(":memory:")
        cache = _local.tokenizers = {
            True: con.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"]),
            False: con.fts5_tokenizer("unicode61", ["remove_diacritics", "2"]),
            "con": con,
        }
    return cache[stem]  # type: ignore[no-any-return]


def _tokens(text: str, stem: bool) -> list[str]:
    if not text:
        return []
    out = _tokenizer(stem)(
        text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False
    )
    # Each entry is a list of the token and its colocated synonyms; we use the token.
    return [str(t[0]) if isinstance(t, (list, tuple)) else str(t) for t in out]


def words(text: str) -> list[str]:
    """Lowercased words of ``text`` (Unicode-aware, diacritics removed)."""
    return _tokens(text, stem=False)


def stems(text: str) -> list[str]:
    """Porter stems of the words of ``text``, in order."""
    return _tokens(text, stem=True)


@lru_cache(maxsize=65536)
def stem_phrase(text: str) -> tuple[str, ...]:
    """Stems of a short fixed text (a keyword or phrase from a card), cached."""
    return tuple(stems(text))
