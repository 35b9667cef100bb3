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
(no code runs on load, unlike pickle). It records which file and content each card came
from, so that when a few cards change :meth:`Index.updated` takes out the changed files'
cards and puts in their new ones, without reading or compiling the others.
"""

from __future__ import annotations

import gc
import json
import marshal
import re
import sys
import warnings
from array import array
from collections.abc import Callable, Iterable, Sequence
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
# card over them, once accepted, is refused). 5: the file and content of each card, for
# incremental updates. 6: no trigger text holds a NUL (the separator of a card's texts). 7: a
# check keeps only the fields its card set (a `tests` check without a timeout of its own takes
# the repository's; with the default written in, it took 300 s).
FORMAT = 7
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


def _without(packed: bytes, ci: int, width: int) -> bytes:
    """A packed posting list of entries ``width`` long, without those of card ``ci``."""
    entries = _unpack(packed)
    kept: list[int] = []
    for j in range(0, len(entries), width):
        if entries[j] != ci:
            kept.extend(entries[j : j + width])
    return _pack(kept)


# The row of a card an update took out: no id, no texts; nothing points at it.
_EMPTY_ROW: CardRow = ("", "", "", 0, "", 0, "", "", b"")


def _compiled_card(
    card: Card, term: Callable[[str], int]
) -> tuple[CardRow, list[tuple[int, int, int]], list[tuple[str, int]]]:
    """A card's row, its postings as (term, role, position of the text) with ``term``
    giving each text's term id, and its regexes with their positions."""
    t = card.triggers
    texts: list[str] = []
    requires: list[int] = []
    entries: list[tuple[int, int, int]] = []
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
                entries.append((ti, role, pos))
    regexes = []
    for pattern in dict.fromkeys(t.regex):
        regexes.append((pattern, len(texts)))
        texts.append(pattern)
    checks = (
        json.dumps([c.model_dump(mode="json", exclude_unset=True) for c in card.checks])
        if card.checks
        else ""
    )
    row: CardRow = (
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
    return row, entries, regexes


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
            self.files,
        ) = data
        if (fmt, byteorder) != (FORMAT, sys.byteorder):
            raise ValueError(f"index format {fmt}/{byteorder}, expected {FORMAT}")
        self._compiled: dict[int, patterns.Regex] = {}
        self._term_ids: dict[tuple[str, ...], int] | None = None
        self._ids: dict[str, int] | None = None  # row by card id

    def card(self, ci: int) -> tuple[str, str, str | None, int, str]:
        """id, agent, version constraint (None: the active version), priority, group."""
        row: CardRow = self.cards[ci]
        return row[0], row[1], row[2] or None, row[3], row[4]

    def checks_json(self, ci: int) -> str:
        return str(self.cards[ci][6])

    # -- building --------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        cards: Sequence[Card],
        revision: str,
        files: Sequence[tuple[str, str]] | None = None,
    ) -> Index:
        """The index of ``cards``; ``files`` says, card by card, the file each came from and
        the sha256 of its bytes (without it the index cannot be updated, only rebuilt)."""
        named = list(zip(files, cards, strict=True)) if files is not None else None
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
            row, entries, regexes = _compiled_card(card, term)
            for ti, role, pos in entries:
                postings[ti] += [ci, role, pos]
            for pattern, pos in regexes:
                if pattern not in patterns:
                    patterns[pattern] = len(pattern_cards)
                    pattern_cards.append([])
                pattern_cards[patterns[pattern]] += [ci, pos]
            rows.append(row)

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
        position = {card.id: ci for ci, card in enumerate(ordered)}
        index = cls(
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
                {}
                if named is None
                else {name: (digest, position[card.id]) for (name, digest), card in named},
            )
        )
        index._term_ids = term_ids
        return index

    def updated(
        self, revision: str, removed: Iterable[str], added: Sequence[tuple[str, str, Card]]
    ) -> Index:
        """A new index of this one's cards without those of the files ``removed`` and with
        ``added`` (file name, sha256 of its bytes, card); this one is left as it is.

        A removed card's row is left empty and its postings dropped; an added card takes a
        new row at the end (hits are ordered by card id, not by row). :class:`ValueError`
        when this index does not know its files, names a file it does not have, or an added
        card's id is another file's: the caller compiles the whole set instead, which says
        what is wrong.
        """
        if not self.files and (added or removed):
            raise ValueError("an index without its files cannot be updated")
        rows = list(self.cards)
        postings = list(self.postings)
        anchors = dict(self.anchors)
        multi = dict(self.multi)
        patterns_ = list(self.patterns)
        pattern_cards = list(self.pattern_cards)
        grams = {k: list(v) for k, v in self.grams.items()}
        always = list(self.always)
        files = dict(self.files)
        term_ids = dict(self.term_ids())
        pattern_ids = {p: pi for pi, p in enumerate(patterns_)}
        ids = dict(self.ids())

        for name in removed:
            _digest, ci = files.pop(name)
            row = rows[ci]
            for text in row[7].split("\0") if row[7] else ():
                ti = term_ids.get(stem_phrase(text))
                if ti is not None:
                    postings[ti] = _without(postings[ti], ci, 3)
                pi = pattern_ids.get(text)
                if pi is not None:
                    pattern_cards[pi] = _without(pattern_cards[pi], ci, 2)
            ids.pop(row[0], None)
            rows[ci] = _EMPTY_ROW

        def term(text: str) -> int:
            key = stem_phrase(text)
            ti = term_ids.get(key)
            if ti is None:  # a new term, anchored at its stem filed under the fewest terms
                ti = term_ids[key] = len(postings)
                postings.append(b"")
                if len(key) > 1:
                    multi[ti] = " ".join(key)
                offset = min(range(len(key)), key=lambda k: (len(anchors.get(key[k], b"")), k))
                anchors[key[offset]] = anchors.get(key[offset], b"") + _pack([ti, offset])
            return ti

        for name, digest, card in added:
            if card.id in ids or name in files:
                raise ValueError(f"card id {card.id!r} or file {name!r} is there already")
            ci = len(rows)
            row, entries, regexes = _compiled_card(card, term)
            for ti, role, pos in entries:
                postings[ti] += _pack([ci, role, pos])
            for pattern, pos in regexes:
                pi = pattern_ids.get(pattern)
                if pi is None:
                    pi = pattern_ids[pattern] = len(patterns_)
                    patterns_.append(pattern)
                    pattern_cards.append(b"")
                    keys = necessary_keys(pattern)
                    if keys is None:
                        always.append(pi)
                    else:
                        for k in sorted(keys):
                            grams.setdefault(k, []).append(pi)
                pattern_cards[pi] += _pack([ci, pos])
            rows.append(row)
            ids[card.id] = ci
            files[name] = (digest, ci)

        index = Index(
            (
                FORMAT,
                sys.byteorder,
                revision,
                rows,
                multi,
                anchors,
                postings,
                patterns_,
                pattern_cards,
                {k: tuple(v) for k, v in grams.items()},
                tuple(sorted({len(k) for k in grams})),
                tuple(always),
                files,
            )
        )
        index._term_ids = term_ids
        index._ids = ids
        return index

    def ids(self) -> dict[str, int]:
        """Each card's row by its id."""
        if self._ids is None:
            self._ids = {row[0]: ci for ci, row in enumerate(self.cards) if row[0]}
        return self._ids

    def term_ids(self) -> dict[tuple[str, ...], int]:
        """Each term's id by its stems (read off the anchors once, when first asked)."""
        if self._term_ids is None:
            found: dict[tuple[str, ...], int] = {}
            for stem, packed in self.anchors.items():
                entries = _unpack(packed)
                for j in range(0, len(entries), 2):
                    ti = entries[j]
                    joined = self.multi.get(ti)
                    found[tuple(joined.split(" ")) if joined is not None else (stem,)] = ti
            self._term_ids = found
        return self._term_ids

    def dead_rows(self) -> int:
        """Rows left empty by updates (a rebuild drops them)."""
        return len(self.cards) - len(self.ids())

    def dumps(self) -> bytes:
        return marshal.dumps(
            (
                FORMAT,
                sys.byteorder,
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
                self.files,
            )
        )

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
        for ci in sorted(acc, key=lambda ci: self.cards[ci][0]):  # in card-id order
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
