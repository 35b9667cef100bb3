"""Turning any text a person types into a safe FTS5 query; ranking priors; snippets.

The user's text is never handed to FTS5's query parser as it is. Terms are taken out of
it (runs of word characters, joined by ``.``, ``-`` or ``/`` so that ``os.path.join`` and
``command-line`` stay together), each is put in double quotes, and they are joined with
``OR``. FTS5 syntax the user typed (``AND``, ``NEAR(``, ``*``, ``^``, ``col:``, quotes,
parentheses, a leading ``-``) is reduced to plain words or dropped, so no input can raise
an FTS5 syntax error. Inside quotes FTS5 runs the table's tokenizer, so a quoted
``parseDate`` or ``os.path.join`` becomes a phrase of its parts.

Ranking is bm25 over the quoted terms (a chunk with more of them, rarer ones, scores
higher). An extra phrase of the whole query, or of word pairs, was tried and lowered the
known-item MRR on the standard library: prose that happens to repeat the query's words
("parse command-line arguments" in optparse) then beats the module that implements it.
The best chunks by bm25 are then weighed by their file's :func:`prior`: test code counts
``TEST_PRIOR`` as much as other code, so the module a test exercises comes first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

MAX_QUERY_CHARS = 4000
MAX_TERMS = 16
TEST_PRIOR = 0.6  # test code weighs this much, next to the code it tests

_TERM = re.compile(r"\w+(?:[./-]\w+)*")

# Words that carry no meaning for search; dropped unless the query has nothing else.
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers him his how i if in into is it its itself just me more
most my no nor not of off on once only or other our ours out over own same she should so some
such than that the their them then there these they this those through to too under until up
very was we were what when where which while who whom why will with would you your yours
near
""".split()
)


_TEST_PATH = re.compile(
    r"(?:^|/)(?:tests?|testing|__tests__|spec)/|(?:^|/)\w*_tests?/|(?:^|/)test_[^/]*$"
    r"|_test\.\w+$|\.(?:test|spec)\.\w+$|(?:^|/)conftest\.py$"
)


def prior(label: str) -> float:
    """How much a file's chunks weigh in ranking: test code less than the code it tests."""
    return TEST_PRIOR if _TEST_PATH.search(label) else 1.0


def quote(term: str) -> str:
    """``term`` as an FTS5 string (a phrase of its tokens)."""
    return '"' + term.replace('"', '""') + '"'


def terms(query: str, tokens: Callable[[str], Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """The search terms of ``query`` with their index tokens: distinct, FTS5-safe, stop
    words dropped when others remain. ``tokens`` gives a term's index tokens (terms with
    none are dropped, and two terms with the same tokens count once)."""
    seen: set[tuple[str, ...]] = set()
    found: dict[str, tuple[str, ...]] = {}
    for m in _TERM.finditer(query[:MAX_QUERY_CHARS]):
        term = m.group()
        key = tuple(tokens(term))
        if not key or key in seen:
            continue
        seen.add(key)
        found[term] = key
    content = {t: k for t, k in found.items() if t.lower() not in STOPWORDS} or found
    return dict(list(content.items())[:MAX_TERMS])


def expression(query_terms: Sequence[str]) -> str:
    """The FTS5 MATCH expression for ``query_terms`` ("" when there are none)."""
    return " OR ".join(quote(t) for t in query_terms)


# --- snippets -----------------------------------------------------------------------------

SNIPPET_CHARS = 160
MAX_PROBE_LINES = 12  # lines looked at per probe when picking a chunk's snippet line
Spans = Callable[[bytes], list[tuple[int, int, str]]]


class Snippets:
    """Snippets for one query: ``snippets(body)`` gives one line of ``body`` (about
    SNIPPET_CHARS long) where the query's terms are densest, each matched token marked.

    The line is picked with a cheap case-insensitive search for the terms and their
    stems; only that line is tokenized (``spans`` gives a text's tokens with byte
    offsets), so the marks are exact: a token is marked when it is one of the query's
    tokens. FTS5's own snippet() tokenizes the whole chunk, twice, which with a tokenizer
    written in Python costs more than the search itself."""

    def __init__(
        self,
        query_terms: dict[str, tuple[str, ...]],
        spans: Spans,
        marks: tuple[str, str] = ("«", "»"),
    ) -> None:
        self.wanted = {t for toks in query_terms.values() for t in toks}
        # Stems, and the words whose stem is not part of them ("copy" for "copi"); a probe
        # that holds a shorter one ("decoder", "decod") finds nothing the shorter misses.
        found = {*self.wanted, *(w.lower() for t in query_terms for w in _WORD.findall(t))}
        self.probes = sorted(p for p in found if not any(o != p and o in p for o in found))
        self.spans = spans
        self.marks = marks

    def __call__(self, body: str) -> str:
        lowered = body.lower()
        per_line: dict[int, set[str]] = {}
        for probe in self.probes:
            i = lowered.find(probe)
            for _ in range(MAX_PROBE_LINES):
                if i < 0:
                    break
                per_line.setdefault(lowered.rfind("\n", 0, i) + 1, set()).add(probe)
                end = lowered.find("\n", i)  # on to the next line holding the probe
                i = lowered.find(probe, end) if end >= 0 else -1
        # The line holding the most distinct probes; the first such line on a tie.
        best = min(per_line, key=lambda at: (-len(per_line[at]), at), default=0)
        end = body.find("\n", best)
        line = body[best : end if end != -1 else len(body)].strip()
        if len(line) > 4 * SNIPPET_CHARS:  # a minified file: tokenize only near a match
            lowered = line.lower()
            first = min((i for p in self.probes if (i := lowered.find(p)) >= 0), default=0)
            line = line[max(0, first - SNIPPET_CHARS // 2) : first + 2 * SNIPPET_CHARS]
        return _mark(line, self.wanted, self.spans, self.marks)


_WORD = re.compile(r"[^\W_]+")


def _mark(line: str, wanted: Collection[str], spans: Spans, marks: tuple[str, str]) -> str:
    data = line.encode("utf-8")
    hits: list[tuple[int, int]] = []
    for s, e, token in spans(data):
        if token in wanted:
            if hits and not data[hits[-1][1] : s].strip(b"_"):  # one identifier: one mark
                s = hits.pop()[0]
            hits.append((s, e))
    start, end = 0, len(data)
    if end > SNIPPET_CHARS:
        # A window around the first match, cut at token edges where possible.
        first = hits[0][0] if hits else 0
        start = max(0, first - SNIPPET_CHARS // 4)
        end = min(len(data), start + SNIPPET_CHARS)
        hits = [(s, e) for s, e in hits if s >= start and e <= end]
    out, pos = [], start
    for s, e in hits:
        out += [data[pos:s], marks[0].encode(), data[s:e], marks[1].encode()]
        pos = e
    out.append(data[pos:end])
    text = b"".join(out).decode("utf-8", errors="ignore")
    return ("…" if start > 0 else "") + text + ("…" if end < len(data) else "")
