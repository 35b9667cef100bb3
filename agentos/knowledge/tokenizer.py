"""A code-aware FTS5 tokenizer: ``parseDate`` and ``HTTPServer`` match their parts.

Registered with apsw as ``agentos_code`` and chained between FTS5's own tokenizers::

    tokenize = "porter agentos_code unicode61 remove_diacritics 2"

``unicode61`` already splits ``parse_date`` at the underscore; this tokenizer also
splits identifiers where the case changes (``parseDate`` -> ``parse date``,
``HTTPServer`` -> ``http server``, ``getHTTPResponse`` -> ``get http response``), and
``porter`` then stems every part. A query goes through the same chain, so the query
``parseDate`` becomes the phrase ``parse date`` and matches the identifier.

Indexing is the hot path: for FTS5_TOKENIZE_DOCUMENT the text is split at case changes
with byte-level operations (``bytes.translate`` and ``bytes.find``, no per-byte regex)
and handed to ``unicode61`` in one call, without offsets (the index does not store
them). Queries and snippets (FTS5_TOKENIZE_QUERY / AUX) need byte offsets into the
original text, so they take a slower path that splits token by token; both paths yield
the same tokens (a test checks this).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import pairwise
from typing import Any, cast

import apsw

NAME = "agentos_code"
BASE = ["unicode61", "remove_diacritics", "2"]
TOKENIZE = f"porter {NAME} {' '.join(BASE)}"

# Byte classes: lowercase letters and digits -> "a", uppercase -> "A", the rest -> " ".
_CLASSES = bytearray(b" " * 256)
for _c in b"abcdefghijklmnopqrstuvwxyz0123456789":
    _CLASSES[_c] = ord("a")
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _CLASSES[_c] = ord("A")
_CLASS_TABLE = bytes(_CLASSES)
# A cut goes after the first byte of each pattern: "aA" is parse|Date, "AAa" is HTTP|Server.
_CUT_PATTERNS = (b"aA", b"AAa")

Tokenize = Callable[[bytes, int, "str | None"], Any]


def case_cuts(utf8: bytes) -> list[int]:
    """Byte offsets where an identifier changes case (``parseDate`` -> [5]), sorted."""
    classes = utf8.translate(_CLASS_TABLE)
    cuts: list[int] = []
    for pattern in _CUT_PATTERNS:
        i = classes.find(pattern)
        while i >= 0:
            cuts.append(i + 1)
            i = classes.find(pattern, i + 2)
    if len(cuts) > 1:
        cuts.sort()
    return cuts


def split_case(utf8: bytes) -> bytes:
    """``utf8`` with a space inserted at every case change inside an identifier."""
    cuts = case_cuts(utf8)
    if not cuts:
        return utf8
    starts = [0, *cuts]
    cuts.append(len(utf8))
    return b" ".join([utf8[i:j] for i, j in zip(starts, cuts, strict=True)])


def _factory(con: apsw.Connection, args: list[str]) -> Tokenize:
    base = con.fts5_tokenizer(args[0], args[1:]) if args else con.fts5_tokenizer(BASE[0], BASE[1:])
    document = apsw.FTS5_TOKENIZE_DOCUMENT

    def tokenize(utf8: bytes, flags: int, locale: str | None) -> Any:
        if flags == document:
            return base(
                split_case(utf8), flags, locale, include_offsets=False, include_colocated=False
            )
        return _with_offsets(base, utf8, flags, locale)

    return tokenize


def _with_offsets(
    base: apsw.FTS5Tokenizer, utf8: bytes, flags: int, locale: str | None
) -> list[tuple[int, int, str]]:
    """Tokens with byte offsets into ``utf8``; only tokens with a case change are split."""
    tokens = _spans(base, utf8, flags, locale)
    cuts = case_cuts(utf8)
    if not cuts:
        return tokens
    starts = [t[0] for t in tokens]
    split: dict[int, list[int]] = {}
    for cut in cuts:
        i = bisect_right(starts, cut) - 1
        if i >= 0 and tokens[i][0] < cut < tokens[i][1]:
            split.setdefault(i, []).append(cut)
    out: list[tuple[int, int, str]] = []
    last = 0
    for i, token_cuts in split.items():
        out.extend(tokens[last:i])
        last = i + 1
        for a, b in pairwise([tokens[i][0], *token_cuts, tokens[i][1]]):
            out.extend((a + s, a + e, t) for s, e, t in _spans(base, utf8[a:b], flags, locale))
    out.extend(tokens[last:])
    return out


def _spans(
    base: apsw.FTS5Tokenizer, utf8: bytes, flags: int, locale: str | None
) -> list[tuple[int, int, str]]:
    return cast("list[tuple[int, int, str]]", base(utf8, flags, locale, include_colocated=False))


def register(con: apsw.Connection) -> None:
    """Make ``agentos_code`` available on this connection (needed before any FTS use)."""
    con.register_fts5_tokenizer(NAME, _factory)
