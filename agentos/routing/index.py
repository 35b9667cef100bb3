"""The router's compiled index over a card set, and the reference evaluator it must equal.

Compiling turns every trigger into data looked up by the request's own words:

- every keyword, phrase, ``require`` and ``exclude`` entry becomes a *term* (its tuple of
  Porter stems); a term is filed under its rarest stem (its *anchor*), and a posting list
  says which cards use it and how. A request's distinct stems find exactly the terms that
  could be present, so the cost follows the request, not the number of cards.
- every regex is filed under a short literal (at most 3 characters) that any match must
  contain, read from the parsed pattern; a request only runs the regexes whose literal
  occurs in it (plus those where no literal could be found). Patterns are compiled on
  first use and kept for the life of the process.

The index is plain tuples, lists, dicts and strings, so it is cached with :mod:`marshal`
(no code runs on load, unlike pickle).
"""

from __future__ import annotations

import gc
import json
import marshal
import re
import sys
import warnings
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from re import _constants as sre_c  # type: ignore[attr-defined]  # no public parser API
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from agentos.shared import patterns
from agentos.shared.text import stem_phrase, stems

if TYPE_CHECKING:
    from agentos.routing.cards import Card

# 3: regexes matched by RE2 (a cached index of older cards is rebuilt). 4: only cards within
# the limits of agentos.shared.limits are compiled (a cached index of older cards is rebuilt, so a
# card over them, once accepted, is refused).
FORMAT = 4
KEYWORD, PHRASE, REQUIRE, EXCLUDE, REGEX = 0, 1, 2, 3, 4
_POINTS = {KEYWORD: 1, PHRASE: 3}
_REGEX_POINTS = 3
_LABEL = {KEYWORD: "keyword", PHRASE: "phrase", REGEX: "regex"}
_MAX_KEY = 3

# Characters that match an ASCII literal under re.IGNORECASE and are not ASCII themselves
# (checked over all of Unicode): mapped to it, then lowercased, one character for one.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def normalize(text: str) -> str:
    """The text regex literals are looked up in: ASCII-equivalent letters lowercased."""
    return text.translate(_FOLD).lower()


# --- literals a regex needs ---------------------------------------------------------------

_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)}


def _best(options: list[frozenset[str]]) -> frozenset[str] | None:
    """The most selective alternative: longest shortest key, then fewest keys."""
    if not options:
        return None
    return max(options, key=lambda keys: (min(map(len, keys)), -len(keys), sorted(keys)))


def _necessary(items: Sequence[tuple[Any, Any]]) -> frozenset[str] | None:
    options: list[frozenset[str]] = []
    run: list[str] = []
    for op, av in items:
        if op is sre_c.LITERAL and 32 <= av < 127:
            run.append(chr(av).lower())
            continue
        if run:
            options.append(frozenset({"".join(run)[:_MAX_KEY]}))
            run = []
        sub: frozenset[str] | None = None
        if op is sre_c.SUBPATTERN:
            sub = _necessary(av[3])
        elif op in _REPEATS and av[0] >= 1:
            sub = _necessary(av[2])
        elif op is getattr(sre_c, "ATOMIC_GROUP", None):
            sub = _necessary(av)
        elif op is sre_c.BRANCH:
            branches = [_necessary(b) for b in av[1]]
            if all(branches):
                sub = frozenset().union(*branches)  # type: ignore[arg-type]
        if sub:
            options.append(sub)
    if run:
        options.append(frozenset({"".join(run)[:_MAX_KEY]}))
    return _best(options)


def necessary_keys(pattern: str) -> frozenset[str] | None:
    """Short lowercase literals, one of which every match of ``pattern`` contains.

    ``None`` when no such literal can be read off the pattern (the regex then runs on
    every request). Sound by construction: keys come only from ASCII literals that every
    match passes through, compared against :func:`normalize` of the request. The pattern
    is matched by RE2 (see :mod:`agentos.shared.patterns`): where Python's parse may read it
    otherwise (it warns of a "possible nested set": RE2's ``[[:alpha:]]``), no keys.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return _necessary(sre_parse.parse(pattern))
    except (re.error, RecursionError, Warning):
        return None


# --- the index ----------------------------------------------------------------------------


@dataclass
class Hit:
    """What one card scored on a request, and why it may not match."""

    card: int
    score: int
    fired: list[str]
    reason: str | None  # None: the card matches


# A card row: id, agent, version constraint ("" for the active version), priority, group,
# min_score, checks (JSON, "" for none), its trigger texts joined by NUL (keywords, phrases,
# require, exclude, regex: a posting's "pos" indexes this list), and its require entries
# packed as (term, pos) pairs.
CardRow = tuple[str, str, str, int, str, int, str, str, bytes]


def _pack(values: list[int]) -> bytes:
    return array("I", values).tobytes()


def _unpack(blob: bytes) -> array[int]:
    out = array("I")
    out.frombytes(blob)
    return out


class Index:
    """A compiled card set. Posting lists are packed arrays decoded only when a request
    touches them, so loading the cached index creates few objects."""

    def __init__(self, data: tuple[Any, ...]) -> None:
        (
            fmt,
            byteorder,
            self.revision,
            self.cards,
            self.multi,
            self.anchors,
            self.postings,
            self.patterns,
            self.pattern_cards,
            self.grams,
            self.gram_lens,
            self.always,
        ) = data
        if (fmt, byteorder) != (FORMAT, sys.byteorder):
            raise ValueError(f"index format {fmt}/{byteorder}, expected {FORMAT}")
        self._data = data
        self._compiled: dict[int, patterns.Regex] = {}

    def card(self, ci: int) -> tuple[str, str, str | None, int, str]:
        """id, agent, version constraint (None: the active version), priority, group."""
        row: CardRow = self.cards[ci]
        return row[0], row[1], row[2] or None, row[3], row[4]

    def checks_json(self, ci: int) -> str:
        return str(self.cards[ci][6])

    # -- building --------------------------------------------------------------------------

    @classmethod
    def build(cls, cards: Sequence[Card], revision: str) -> Index:
        ordered = sorted(cards, key=lambda c: c.id)
        term_ids: dict[tuple[str, ...], int] = {}
        postings: list[list[int]] = []
        patterns: dict[str, int] = {}
        pattern_cards: list[list[int]] = []
        rows: list[CardRow] = []

        def term(text: str) -> int:
            key = stem_phrase(text)
            if key not in term_ids:
                term_ids[key] = len(postings)
                postings.append([])
            return term_ids[key]

        for ci, card in enumerate(ordered):
            t = card.triggers
            texts: list[str] = []
            requires: list[int] = []
            for role, items in (
                (KEYWORD, t.keywords),
                (PHRASE, t.phrases),
                (REQUIRE, t.require),
                (EXCLUDE, t.exclude),
            ):
                seen: set[int] = set()
                for text in items:
                    ti, pos = term(text), len(texts)
                    texts.append(text)
                    if role == REQUIRE:
                        requires += [ti, pos]
                    if ti not in seen:  # the same stems twice in one list count once
                        seen.add(ti)
                        postings[ti] += [ci, role, pos]
            for pattern in dict.fromkeys(t.regex):
                if pattern not in patterns:
                    patterns[pattern] = len(pattern_cards)
                    pattern_cards.append([])
                pattern_cards[patterns[pattern]] += [ci, len(texts)]
                texts.append(pattern)
            checks = (
                json.dumps([c.model_dump(mode="json", exclude_none=True) for c in card.checks])
                if card.checks
                else ""
            )
            rows.append(
                (
                    card.id,
                    card.agent,
                    card.version or "",
                    card.priority,
                    card.group,
                    card.min_score,
                    checks,
                    "\0".join(texts),
                    _pack(requires),
                )
            )

        terms = list(term_ids)
        frequency: dict[str, int] = {}
        for key in terms:
            for s in set(key):
                frequency[s] = frequency.get(s, 0) + 1
        anchors: dict[str, list[int]] = {}
        for ti, key in enumerate(terms):
            offset = min(range(len(key)), key=lambda k: (frequency[key[k]], k))
            anchors.setdefault(key[offset], []).extend((ti, offset))

        grams: dict[str, list[int]] = {}
        always: list[int] = []
        for pattern, pi in patterns.items():
            keys = necessary_keys(pattern)
            if keys is None:
                always.append(pi)
            else:
                for k in sorted(keys):
                    grams.setdefault(k, []).append(pi)
        return cls(
            (
                FORMAT,
                sys.byteorder,
                revision,
                rows,
                {ti: " ".join(key) for ti, key in enumerate(terms) if len(key) > 1},
                {stem: _pack(v) for stem, v in anchors.items()},
                [_pack(p) for p in postings],
                list(patterns),
                [_pack(c) for c in pattern_cards],
                {k: tuple(v) for k, v in grams.items()},
                tuple(sorted({len(k) for k in grams})),
                tuple(always),
            )
        )

    def dumps(self) -> bytes:
        return marshal.dumps(self._data)

    @classmethod
    def loads(cls, blob: bytes) -> Index:
        enabled = gc.isenabled()
        gc.disable()  # marshal creates many objects and no cycles: skip the collector's passes
        try:
            return cls(marshal.loads(blob))
        finally:
            if enabled:
                gc.enable()

    # -- matching --------------------------------------------------------------------------

    def _regex(self, pi: int) -> patterns.Regex:
        compiled = self._compiled.get(pi)
        if compiled is None:
            compiled = self._compiled[pi] = patterns.compile(self.patterns[pi])
        return compiled

    def _candidate_patterns(self, request: str) -> list[int]:
        found: set[int] = set(self.always)
        if self.grams:
            text = normalize(request)
            for n in self.gram_lens:
                for i in range(len(text) - n + 1):
                    hit = self.grams.get(text[i : i + n])
                    if hit is not None:
                        found.update(hit)
        return sorted(found)

    def _present_terms(self, seq: list[str]) -> set[int]:
        positions: dict[str, list[int]] = {}
        for i, s in enumerate(seq):
            positions.setdefault(s, []).append(i)
        present: set[int] = set()
        for s, where in positions.items():
            packed = self.anchors.get(s)
            if packed is None:
                continue
            entries = _unpack(packed)
            for j in range(0, len(entries), 2):
                ti, offset = entries[j], entries[j + 1]
                if offset == 0 and ti not in self.multi:
                    present.add(ti)
                    continue
                key = self.multi[ti].split(" ")
                n = len(key)
                if any(p >= offset and seq[p - offset : p - offset + n] == key for p in where):
                    present.add(ti)
        return present

    def match(self, request: str) -> list[Hit]:
        """Every card that fired at least one scoring trigger, in card-id order."""
        seq = stems(request)
        present = self._present_terms(seq)
        acc: dict[int, list[Any]] = {}  # card -> [score, [(pos, role)], first exclude pos]
        for ti in present:
            entries = _unpack(self.postings[ti])
            for j in range(0, len(entries), 3):
                ci, role, pos = entries[j], entries[j + 1], entries[j + 2]
                a = acc.get(ci)
                if a is None:
                    a = acc[ci] = [0, [], None]
                if role in _POINTS:
                    a[0] += _POINTS[role]
                    a[1].append((pos, role))
                elif role == EXCLUDE and (a[2] is None or pos < a[2]):
                    a[2] = pos
        data: bytes | None = None  # the request as RE2 reads it, encoded once
        for pi in self._candidate_patterns(request):
            if data is None:
                data = patterns.encode(request)
            if not self._regex(pi).search(data):
                continue
            entries = _unpack(self.pattern_cards[pi])
            for j in range(0, len(entries), 2):
                ci, pos = entries[j], entries[j + 1]
                a = acc.get(ci)
                if a is None:
                    a = acc[ci] = [0, [], None]
                a[0] += _REGEX_POINTS
                a[1].append((pos, REGEX))
        hits = []
        for ci in sorted(acc):
            score, fired, excluded = acc[ci]
            if not score:
                continue
            row: CardRow = self.cards[ci]
            texts = row[7].split("\0")
            req = _unpack(row[8])
            missing = [texts[req[j + 1]] for j in range(0, len(req), 2) if req[j] not in present]
            hits.append(
                Hit(
                    ci,
                    score,
                    [f"{_LABEL[role]}:{texts[pos]}" for pos, role in sorted(fired)],
                    _reason(None if excluded is None else texts[excluded], missing, score, row[5]),
                )
            )
        return hits


def _reason(excluded: str | None, missing: list[str], score: int, min_score: int) -> str | None:
    if excluded is not None:
        return f"excluded: the request has {excluded!r}"
    if missing:
        return "requires " + ", ".join(repr(m) for m in missing)
    if score < min_score:
        return f"score {score} is under min_score {min_score}"
    return None


def _contains(seq: list[str], key: tuple[str, ...]) -> bool:
    n = len(key)
    return any(tuple(seq[i : i + n]) == key for i in range(len(seq) - n + 1))


def reference_match(
    cards: Sequence[Card], request: str
) -> list[tuple[str, int, list[str], str | None]]:
    """The matching rules (docs/formats.md) as a plain loop over every card and trigger:
    the oracle the index is tested against, and the baseline the benchmark compares with.

    Returns ``(card id, score, fired, reason)`` for every card that fired, in id order.
    """
    seq = stems(request)
    out = []
    for card in sorted(cards, key=lambda c: c.id):
        t = card.triggers
        score, fired = 0, []
        for role, texts in ((KEYWORD, t.keywords), (PHRASE, t.phrases)):
            seen = set()
            for text in texts:
                key = stem_phrase(text)
                if key not in seen and _contains(seq, key):
                    score += _POINTS[role]
                    fired.append(f"{_LABEL[role]}:{text}")
                seen.add(key)
        for pattern in dict.fromkeys(t.regex):
            if patterns.compile(pattern).search(request):
                score += _REGEX_POINTS
                fired.append(f"regex:{pattern}")
        if not score:
            continue
        excluded = next((x for x in t.exclude if _contains(seq, stem_phrase(x))), None)
        missing = [r for r in t.require if not _contains(seq, stem_phrase(r))]
        out.append((card.id, score, fired, _reason(excluded, missing, score, card.min_score)))
    return out


def cache_name(revision: str) -> str:
    """File name of the cached index: the card set's revision, the format and the Python
    (marshal's format may change between Python versions)."""
    return f"router-{revision}-f{FORMAT}-py{sys.version_info[0]}{sys.version_info[1]}.idx"
