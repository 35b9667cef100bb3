"""Reading a request for the interview engine: named things, stems, clauses, verbs, the
criteria it states, and whether it asks for a change or only for an answer.

The request's named things (paths, symbols, quoted messages, ...: see
:mod:`agentos.interview.entities`) are masked by placeholder words so that Porter stems of
the rest can be matched against the phrase lists of :mod:`agentos.interview.lexicon`;
clauses are split on punctuation to find the imperative verbs and their objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from agentos.interview import lexicon as lex
from agentos.interview.checks import Criterion, checks_of, criteria
from agentos.interview.entities import Entity, find_entities
from agentos.shared.text import stem_phrase, stems, words

# --- matching the lexicon's phrases -------------------------------------------------------


def positions(tokens: list[str]) -> dict[str, list[int]]:
    """Where each token occurs, to look phrases up by their first stem."""
    index: dict[str, list[int]] = {}
    for i, token in enumerate(tokens):
        index.setdefault(token, []).append(i)
    return index


def find_phrases(
    tokens: list[str], phrases: Iterable[str], index: dict[str, list[int]] | None = None
) -> list[tuple[int, str]]:
    """(position, phrase) for every phrase of ``phrases`` found in ``tokens`` (stems)."""
    index = positions(tokens) if index is None else index
    found: list[tuple[int, str]] = []
    for phrase in phrases:
        key = stem_phrase(phrase)
        if not key:
            continue
        n = len(key)
        for i in index.get(key[0], ()):
            if n == 1 or tuple(tokens[i : i + n]) == key:
                found.append((i, phrase))
    found.sort()
    return found


def distinct(found: list[tuple[int, str]]) -> list[str]:
    """The phrases of ``found``, each once (one per stem: "raises" or "raising"), in order
    of first appearance."""
    seen: dict[tuple[str, ...], str] = {}
    for _, phrase in found:
        seen.setdefault(stem_phrase(phrase), phrase)
    return list(seen.values())


def stem_set(phrases: Iterable[str]) -> frozenset[str]:
    """Stems of single-word phrases, for membership tests."""
    return frozenset(s for p in phrases for s in stems(p) if " " not in p)


# --- reading ------------------------------------------------------------------------------

_CLAUSE_SPLIT = re.compile(r"[.;:!?]+(?=\s|$)|[\n;]|,\s+")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|[\n;]")
_LEAD = frozenset(
    stems(
        "please can could would you we i need needs want like let us also "
        "then and just kindly now d ll should must to will go ahead probably "
        "maybe perhaps really quickly simply first finally"
    )
)
_PRE_VERB = frozenset(stems("to should must will please and then"))
STOP = stem_set(lex.STOPWORDS)
_DETERMINERS = frozenset(lex.DETERMINERS)  # compared with words, not stems ("its"/"it")
PRONOUNS = frozenset(lex.PRONOUNS)
_EMPTY_OBJECTS = stem_set(lex.PRONOUNS) | stem_set(lex.GENERIC_OBJECTS)
VAGUE_WORDS = stem_set(p for p in lex.VAGUE if " " not in p)
_OBJECT_HEADS = frozenset(
    stems("the a an it this that them these those all every each its their our my your")
)
UNKNOWN_VERB = 0.4  # an unlisted word used as an imperative verb
READ_VERB = 0.4  # a read verb no other list has ("explain", "list")
_KNOWN = {stem_phrase(p) for p in (*lex.STRONG_VERBS, *lex.MEDIUM_VERBS, *lex.WEAK_VERBS)}
_READ_ONLY_VERBS = tuple(  # the longest first: "find out" before "find"
    sorted((p for p in lex.READ_VERBS if stem_phrase(p) not in _KNOWN), key=lambda p: -len(p))
)
_VERBS = tuple(
    (s, p)
    for s, group in (
        (0.5, lex.STRONG_VERBS),
        (0.4, lex.MEDIUM_VERBS),
        (0.2, lex.WEAK_VERBS),
        (READ_VERB, _READ_ONLY_VERBS),
    )
    for p in group
)
_READS = {stem_phrase(p) for p in lex.READ_VERBS}
_VAGUE_READS = {stem_phrase(p) for p in lex.VAGUE_READS}
_READ_AFTER = {
    stem_phrase(k): frozenset(stems(" ".join(v))) for k, v in lex.READ_ONLY_AFTER.items()
}
_WH = frozenset(stems(" ".join(lex.WH_WORDS)))
_TO_ME = frozenset(stems("me us"))
_FINDABLE = stem_set(lex.FINDABLE)
_QUESTION = frozenset(stems(" ".join(lex.QUESTION_WORDS)))
_QUESTION_AUX = frozenset(stems(" ".join(lex.QUESTION_AUX)))
_NEGATIONS = (*(stem_phrase(p) for p in lex.NEGATIONS), ("t",))  # "don't" is don + t
_AFTER_NEGATION = frozenset(n[-1] for n in _NEGATIONS)  # a verb may follow "not", "never"
_RUN = frozenset(stems("run rerun"))
_WRITING = frozenset(stems(" ".join(p for p in lex.WRITING_RUNS if " " not in p)))
_ASKED = re.compile(
    r"\b(?:check|verify|confirm|see|tell\s+(?:me|us)|find\s+out|report|show\s+(?:me|us)|ask)\s+"
    r"(?:that|whether|if)\b[^.;!?\n]*$",
    re.IGNORECASE,
)


class Reading:
    """A request split into entities, masked text, stems, clauses, criteria and intent."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.entities = find_entities(text)
        parts, last = [], 0
        for i, e in enumerate(self.entities):
            parts += [text[last : e.start], f" qqref{i} "]
            last = e.end
        parts.append(text[last:])
        self.masked = "".join(parts)
        self.tokens = stems(self.masked)
        self.index = positions(self.tokens)
        self.words = words(self.masked)
        if len(self.words) != len(self.tokens):  # never seen; keep the stems to be safe
            self.words = list(self.tokens)
        self.clauses: list[tuple[list[str], list[str]]] = []
        self.asking: list[bool] = []  # per clause: it is part of a question ("how does X?")
        self.question: str | None = None  # the first question the request asks
        for sentence, mark in _sentences(self.masked):
            clauses = [c for c in map(_tokens_of, _CLAUSE_SPLIT.split(sentence)) if c[0]]
            asks = self._asks(sentence, mark)
            self.clauses += clauses
            self.asking += [asks == "?"] * len(clauses)
        self.criteria: list[Criterion] = criteria(text, self.entities)
        self.checks = checks_of(self.criteria)
        self.intent = read_intent(self)

    def kinds(self, *kinds: str) -> list[str]:
        seen: dict[str, None] = {}
        for e in self.entities:
            if e.kind in kinds:
                seen.setdefault(e.text, None)
        return list(seen)

    def find(self, phrases: tuple[str, ...]) -> list[str]:
        return distinct(find_phrases(self.tokens, phrases, self.index))

    def entity(self, token: str) -> Entity | None:
        if token.startswith("qqref") and token[5:].isdigit():
            return self.entities[int(token[5:])]
        return None

    def surface(self, ws: list[str]) -> str:
        """Words of the request as written, with named things restored."""
        return " ".join((e.text if (e := self.entity(w)) is not None else w) for w in ws)

    def said(self, phrases: tuple[str, ...]) -> list[str]:
        """The words the request used for each phrase found ("tests" for "test")."""
        seen: dict[str, None] = {}
        for pos, phrase in find_phrases(self.tokens, phrases, self.index):
            seen.setdefault(self.surface(self.words[pos : pos + len(stem_phrase(phrase))]), None)
        return list(seen)

    def content(self) -> list[str]:
        return [t for t in self.tokens if t not in STOP and t not in VAGUE_WORDS]

    def _asks(self, sentence: str, mark: str) -> str:
        """ "?" for a question ending with a question mark, "wh" for one opening with a
        question word alone ("which tests fail"), "" for no question; the first question
        is kept in :attr:`question`."""
        toks, ws = _tokens_of(sentence)
        start = 0
        while start < len(toks) and toks[start] in _LEAD:
            start += 1
        if start >= len(toks):
            return ""
        if toks[start] in _QUESTION:
            asks = "?" if mark == "?" else "wh"
        elif toks[start] in _QUESTION_AUX and mark == "?":
            asks = "?"
        else:
            return ""
        if self.question is None:
            self.question = self.surface(ws[start : start + 6])
        return asks


def _sentences(text: str) -> list[tuple[str, str]]:
    """The sentences of ``text``, each with its end mark ("?" for a question mark)."""
    found: list[tuple[str, str]] = []
    last = 0
    for m in _SENTENCE_END.finditer(text):
        found.append((text[last : m.start()], "?" if "?" in m.group(0) else m.group(0)))
        last = m.end()
    found.append((text[last:], ""))
    return [(s, mark) for s, mark in found if s.strip()]


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
    negated: bool = False  # "don't change the API", "never touch X"
    asked: bool = False  # in a question: "how does the guardian decide to restart it?"
    after: str = ""  # the stem right after the verb ("me" in "show me")

    @property
    def score(self) -> float:
        return self.strength + (0.35 if self.obj_is_entity else 0.25 if self.obj else 0.0)


def verbs(r: Reading) -> list[Verb]:
    """Action verbs at the head of a clause, or after "to"/"should"/"must"/"and", with
    objects; a verb right after a negation ("don't", "never", "no need to") is found too,
    marked ``negated``."""
    found: list[Verb] = []
    for n, (toks, ws) in enumerate(r.clauses):
        start = 0
        while start < len(toks) and toks[start] in _LEAD:
            start += 1
        for i in range(start, len(toks)):
            if i != start and toks[i - 1] not in _PRE_VERB | _AFTER_NEGATION:
                continue
            if toks[i] == "do" and toks[i + 1 : i + 2] == ["not"]:
                continue  # "do not change": the verb is the next word
            negated = any(tuple(toks[max(0, i - len(n)) : i]) == n for n in _NEGATIONS)
            for strength, phrase in _VERBS:
                key = stem_phrase(phrase)
                if tuple(toks[i : i + len(key)]) == key:
                    if key in _VAGUE_READS:
                        strength = 0.2
                    verb = _object(r, phrase, strength, toks, ws, i, i + len(key))
                    found.append(_marked(verb, toks, i + len(key), negated, r.asking[n]))
                    break
            else:
                if i == start and _imperative(r, toks, i):
                    verb = _object(r, ws[i], UNKNOWN_VERB, toks, ws, i, i + 1)
                    found.append(_marked(verb, toks, i + 1, negated, r.asking[n]))
    return found


def actions(r: Reading) -> list[Verb]:
    """The request's verbs, without the ones it takes back ("don't change the API")."""
    return [v for v in verbs(r) if not v.negated]


def _marked(verb: Verb, toks: list[str], end: int, negated: bool, asked: bool) -> Verb:
    verb.negated = negated
    verb.asked = asked
    verb.after = toks[end] if end < len(toks) else ""
    return verb


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
    key = stem_phrase(phrase)
    reads = key in _READS or (key in _READ_AFTER and j < len(toks) and toks[j] in _READ_AFTER[key])
    if reads and j < len(toks) and toks[j] in _TO_ME:  # "show me which", "give us the list"
        j += 1
    if reads and toks[j] in _FINDABLE:  # "list the problems": what to find, not which one
        return Verb(phrase, strength, ws[j], False, None, span(j + 1))
    if toks[j] in _EMPTY_OBJECTS or toks[j] in VAGUE_WORDS:
        end = j + 2 if j + 1 < len(toks) and toks[j + 1] in VAGUE_WORDS else j + 1
        return Verb(phrase, strength, None, False, ws[j], span(end))
    # An entity within a few words ("fix in agentos/hub/store.py", "add a test for parse()").
    for k in range(j, min(j + 4, len(toks))):
        e = r.entity(toks[k])
        if e is not None:
            return Verb(phrase, strength, e.text, True, None, span(k + 1))
    if toks[j] in _WH and reads:
        # "explain how routing works", "report what fails": the question is the object.
        rest = [w for t, w in zip(toks[j + 1 : j + 4], ws[j + 1 : j + 4], strict=False)]
        if any(t not in STOP and t not in VAGUE_WORDS for t in toks[j + 1 : j + 4]):
            return Verb(phrase, strength, " ".join([ws[j], *rest]), False, None, span(j + 4))
    if toks[j] in STOP:
        return Verb(phrase, strength, None, False, None, span(j))
    obj: list[str] = []
    for t, w in zip(toks[j : j + 2], ws[j : j + 2], strict=False):
        if t in STOP or t.startswith("qqref"):
            break
        obj.append(w)
    return Verb(phrase, strength, " ".join(obj) or None, False, None, span(j + len(obj)))


# --- read-only or a change ----------------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    """Whether a request asks only for an answer (read-only) or for a change, and why."""

    read_only: bool
    reads: list[str]  # what asks for an answer: "run the tests", "which tests fail?"
    changes: list[str]  # what asks for a change: "fix", "should be removed", "tests pass"
    said: list[str]  # the request's own words for it: "don't change anything"
    answers: list[str]  # what it asks back: "report what fails", "which tests fail"
    question: str | None = None  # the question it asks, when it asks one


def read_intent(r: Reading) -> Intent:
    """A request is read-only when it asks for an answer (a read verb such as run, report,
    list, explain, review, or a question) and for no change: no change verb that is not
    negated, no "X should be fixed", no formatter or installer to run, and no criterion
    that something must hold afterwards (unless it is what to check: "check that the
    tests pass")."""
    reads: list[str] = []
    changes: list[str] = []
    answers: list[str] = []
    for v in verbs(r):
        if v.negated or v.asked:
            continue
        if _asks(v):
            reads.append(v.span)
            answers += [v.span] if v.obj else []
        else:
            changes.append(v.span or v.phrase)
    question = r.question
    if question is not None:
        reads.append(question)
        answers.append(question)
    changes += [m.group(0) for m in lex.WRITES_INTO_RE.finditer(r.masked)]
    changes += [m.group(0) for m in lex.CHANGE_WANTED_RE.finditer(r.masked)]
    if reads and _runs_a_writer(r):
        changes += [w for w in r.said(lex.WRITING_RUNS)] or ["a command that writes"]
    changes += [
        c.text
        for c in r.criteria
        if c.check is not None and not _ASKED.search(r.text[max(0, c.start - 120) : c.start])
    ]
    said = [m.group(0) for m in lex.READ_ONLY_SAID_RE.finditer(r.text)]
    return Intent(bool(reads) and not changes, reads, changes, said, answers, question)


def _asks(v: Verb) -> bool:
    key = stem_phrase(v.phrase)
    if key in _READ_AFTER:
        return v.after in _READ_AFTER[key]
    return key in _READS


def _runs_a_writer(r: Reading) -> bool:
    """The request runs something that changes files ("run black", "ruff check --fix")."""
    if not any(t in _RUN for t in r.tokens):
        return False
    commands = " ".join(e.text for e in r.entities if e.kind in ("command", "symbol", "code"))
    return any(t in _WRITING for t in r.tokens) or any(
        t in _WRITING for t in stems(commands.replace("-", " "))
    )
