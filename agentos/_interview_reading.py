"""Reading a request for the interview engine: named things, stems, clauses, verbs and the
criteria it states.

The request's named things (paths, symbols, quoted messages, ...) are masked by
placeholder words so that Porter stems of the rest can be matched against the phrase
lists of :mod:`agentos._interview_lexicon`; clauses are split on punctuation to find the
imperative verbs and their objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentos import _interview_lexicon as lex
from agentos._interview_checks import Criterion, checks_of, criteria
from agentos.text import stem_phrase, stems, words

_CLAUSE_SPLIT = re.compile(r"[.;:!?]+(?=\s|$)|[\n;]|,\s+")
_LEAD = frozenset(
    stems(
        "please can could would you we i need needs want like let us also "
        "then and just kindly now d ll should must to will go ahead probably "
        "maybe perhaps really quickly simply first finally"
    )
)
_PRE_VERB = frozenset(stems("to should must will please and then"))
STOP = lex.stem_set(lex.STOPWORDS)
_DETERMINERS = frozenset(lex.DETERMINERS)  # compared with words, not stems ("its"/"it")
PRONOUNS = frozenset(lex.PRONOUNS)
_EMPTY_OBJECTS = lex.stem_set(lex.PRONOUNS) | lex.stem_set(lex.GENERIC_OBJECTS)
VAGUE_WORDS = lex.stem_set(p for p in lex.VAGUE if " " not in p)
_OBJECT_HEADS = frozenset(
    stems("the a an it this that them these those all every each its their our my your")
)
UNKNOWN_VERB = 0.4  # an unlisted word used as an imperative verb
_VERBS = tuple(
    (s, p)
    for s, group in ((0.5, lex.STRONG_VERBS), (0.4, lex.MEDIUM_VERBS), (0.2, lex.WEAK_VERBS))
    for p in group
)


class Reading:
    """A request split into entities, masked text, stems and clauses."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.entities = lex.find_entities(text)
        parts, last = [], 0
        for i, e in enumerate(self.entities):
            parts += [text[last : e.start], f" qqref{i} "]
            last = e.end
        parts.append(text[last:])
        self.masked = "".join(parts)
        self.tokens = stems(self.masked)
        self.index = lex.positions(self.tokens)
        self.words = words(self.masked)
        if len(self.words) != len(self.tokens):  # never seen; keep the stems to be safe
            self.words = list(self.tokens)
        self.clauses = [
            c for c in (_tokens_of(s) for s in _CLAUSE_SPLIT.split(self.masked)) if c[0]
        ]
        self.criteria: list[Criterion] = criteria(text, self.entities)
        self.checks = checks_of(self.criteria)

    def kinds(self, *kinds: str) -> list[str]:
        seen: dict[str, None] = {}
        for e in self.entities:
            if e.kind in kinds:
                seen.setdefault(e.text, None)
        return list(seen)

    def find(self, phrases: tuple[str, ...]) -> list[str]:
        return lex.distinct(lex.find_phrases(self.tokens, phrases, self.index))

    def entity(self, token: str) -> lex.Entity | None:
        if token.startswith("qqref") and token[5:].isdigit():
            return self.entities[int(token[5:])]
        return None

    def surface(self, ws: list[str]) -> str:
        """Words of the request as written, with named things restored."""
        return " ".join((e.text if (e := self.entity(w)) is not None else w) for w in ws)

    def said(self, phrases: tuple[str, ...]) -> list[str]:
        """The words the request used for each phrase found ("tests" for "test")."""
        seen: dict[str, None] = {}
        for pos, phrase in lex.find_phrases(self.tokens, phrases, self.index):
            seen.setdefault(self.surface(self.words[pos : pos + len(stem_phrase(phrase))]), None)
        return list(seen)

    def content(self) -> list[str]:
        return [t for t in self.tokens if t not in STOP and t not in VAGUE_WORDS]


def _tokens_of(clause: str) -> tuple[list[str], list[str]]:
    toks, ws = stems(clause), words(clause)
    return toks, (ws if len(ws) == len(toks) else toks)


@dataclass
class Verb:
    phrase: str
    strength: float
    obj: str | None  # the object's words, or an entity's text
    obj_is_entity: bool
    empty_object: str | None  # "it", "stuff": an object that names nothing
    span: str  # the words of the request: "make it better"

    @property
    def score(self) -> float:
        return self.strength + (0.35 if self.obj_is_entity else 0.25 if self.obj else 0.0)


def verbs(r: Reading) -> list[Verb]:
    """Action verbs at the head of a clause, or after "to"/"should"/"must", with objects."""
    found: list[Verb] = []
    for toks, ws in r.clauses:
        start = 0
        while start < len(toks) and toks[start] in _LEAD:
            start += 1
        for i in range(start, len(toks)):
            if i != start and toks[i - 1] not in _PRE_VERB:
                continue
            for strength, phrase in _VERBS:
                key = stem_phrase(phrase)
                if tuple(toks[i : i + len(key)]) == key:
                    found.append(_object(r, phrase, strength, toks, ws, i, i + len(key)))
                    break
            else:
                if i == start and _imperative(r, toks, i):
                    found.append(_object(r, ws[i], UNKNOWN_VERB, toks, ws, i, i + 1))
    return found


def _imperative(r: Reading, toks: list[str], i: int) -> bool:
    """An unlisted word heading a clause and followed by a determiner, pronoun or named
    thing reads as an imperative verb: "Position it ...", "Cap the snippet ..."."""
    word = toks[i]
    if word in STOP or r.entity(word) is not None or word.isdigit() or i + 1 >= len(toks):
        return False
    nxt = toks[i + 1]
    return nxt in _OBJECT_HEADS or r.entity(nxt) is not None


def _object(
    r: Reading, phrase: str, strength: float, toks: list[str], ws: list[str], verb_at: int, at: int
) -> Verb:
    def span(end: int) -> str:
        return r.surface(ws[verb_at : min(end, len(ws))])

    j = at
    while j < len(toks) and ws[j] in _DETERMINERS:
        j += 1
    if j >= len(toks):
        return Verb(phrase, strength, None, False, None, span(j))
    if toks[j] in _EMPTY_OBJECTS or toks[j] in VAGUE_WORDS:
        end = j + 2 if j + 1 < len(toks) and toks[j + 1] in VAGUE_WORDS else j + 1
        return Verb(phrase, strength, None, False, ws[j], span(end))
    # An entity within a few words ("fix in agentos/hub.py", "add a test for parse()").
    for k in range(j, min(j + 4, len(toks))):
        e = r.entity(toks[k])
        if e is not None:
            return Verb(phrase, strength, e.text, True, None, span(k + 1))
    if toks[j] in STOP:
        return Verb(phrase, strength, None, False, None, span(j))
    obj = [
        w
        for t, w in zip(toks[j : j + 3], ws[j : j + 3], strict=False)
        if t not in STOP and not t.startswith("qqref")
    ][:2]
    return Verb(
        phrase, strength, " ".join(obj) or None, False, None, span(j + len(obj) if obj else j)
    )
