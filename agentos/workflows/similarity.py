"""How alike two task descriptions are, 0..1: deterministic, offline, and cheap enough to
compare a new task with thousands of live ones.

A task's **terms**, in the order it says them, are of two sorts:

- **specifics**, taken by their form, each of a kind: a number or version (``3.12``,
  ``10,000``, ``v1``), a flag (``--dry-run``), a path or file (``/users``,
  ``api/auth.py``, ``.gz``) and a name (an identifier such as ``parse_date``,
  ``getUserName``, ``orders.customer_id`` or ``tokenize()``, a quoted string, a code such
  as ``CVE-2021-23337`` or ``UTF-8``); a specific is a term prefixed with ``=``;
- **words**: the other content words' stems (stop words out), read through the synonym
  data of ``similarity_words.txt`` ("delete" is "remove", "sign in" is "login"). A word
  written as a name (``Safari``, ``CSV``, ``macOS``: capitalised inside the sentence, or
  in capitals) is also a name for the substitution rule.

Each term weighs its inverse document frequency over a collection of tasks
(:class:`Frequencies`: the calibration pairs' tasks, the live tasks a new one is compared
with, the two compared); a word of ``[wording]`` (a verb any task uses, a word that says
there is a problem or work to do) weighs a quarter of that. The score is the weighted Dice
coefficient of the two tasks' terms, lowered to :data:`SUBSTITUTED` of it when the two are
one form about two things (:func:`conflicts`):

- **specific**: each has a specific of the same kind of its own ("HTTP 429" / "HTTP 503",
  "/users" / "/orders", "Safari" / "Firefox");
- **form**: the two say the same terms in the same order but for one place, where a word
  that is not wording stands on either side ("the login endpoint" / "the logout
  endpoint", "add pagination" / "add rate limiting");
- **opposite**: each has one of a pair of opposites of its own ("upload" / "download");
- **action**: they start with two kinds of work ("Document the retry settings" /
  "Implement the retry settings").

A paraphrase that rewords (its own verbs, fillers, an issue title against an imperative)
keeps its score; one side saying more than the other lowers it by what it adds.

The labelled pairs in ``tests/data/dedup/`` calibrate :data:`DEFAULT_THRESHOLD` (the
calibration part) and measure it (the held-out part, which nothing is tuned on).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

# Calibrated on tests/data/dedup/calibration.jsonl: the lowest threshold at which
# precision stays >= 0.95 there (see docs/workflows.md for the figures).
DEFAULT_THRESHOLD = 0.68  # at or over it: a duplicate
RELATED_THRESHOLD = 0.3  # between this and the threshold: related
SUBSTITUTED = 0.4  # the factor when the two are one form about two things
WORDING_SHARE = 0.25  # what a wording word weighs, of what its frequency gives
PREFIX = 6  # a stem is read as its first letters: "config" is "configuration"
NAME_TERM = "="  # prefixes a specific among the terms (a stem never holds one)

WORDS_FILE = Path(__file__).with_name("similarity_words.txt")
FREQUENCIES_FILE = Path(__file__).with_name("similarity_frequencies.json")

_EXTENSIONS = (
    r"py|js|ts|tsx|jsx|md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|go|rs|java|c|h|cpp|sql|html"
    r"|css|lock|csv|xml|gz|zip"
)
_SPECIFIC = re.compile(
    rf"""
    (?P<flag>--[A-Za-z][\w-]*)
    | (?P<quoted>"[^"\n]{{1,40}}"|`[^`\n]{{1,40}}`)
    | (?P<path>[\w./-]*\w\.(?i:{_EXTENSIONS})\b        # a file
        | (?<![\w.])\.[A-Za-z][A-Za-z0-9]{{1,4}}\b      # an extension (.gz)
        | (?<![\w.])/[\w{{}}.-]+(?:/[\w{{}}.-]+)*       # /users, /api/v1
        | \b\w+(?:/\w+)+(?:\.\w+)?)                     # utils/strings
    | (?P<identifier>\b[A-Za-z_]\w*\(\)                 # tokenize()
        | \b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+             # orders.customer_id
        | \b[A-Za-z]\w*_\w+ | \b_\w+                     # snake_case, HTTPS_PROXY
        | \b[a-z]+(?:[A-Z][a-z0-9]+)+\b                  # camelCase
        | \b[A-Z][a-z]+(?:[A-Z][a-z0-9]+)+\b             # UnicodeDecodeError
        | \$\{{\w+\}})                                  # ${{VAR}}
    | (?P<number>\b[vV]?\d+(?:\.\d+)+\b | \bv\d+\b      # a version
        | \b\d{{1,3}}(?:,\d{{3}})+\b | \b\d+k\b | \b\d+\b)
    | (?P<code>\b[A-Za-z]+-?\d+[\w-]*\b)                # SHA-1, UTF-8, CVE-2021-23337
    """,
    re.VERBOSE,
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
_NUMBER = re.compile(r"v?\d+(?:\.\d+)*")
_FILE = re.compile(rf"\.(?:{_EXTENSIONS})$")


class Kind(StrEnum):
    """What a term is, for the substitution rule."""

    NUMBER = "number"  # a number or version
    FLAG = "flag"
    PATH = "path"  # a path, file or extension
    NAME = "name"  # an identifier, quoted string, code, or a word written as a name
    WORK = "work"  # a kind of work ([work])
    WORDING = "wording"  # names no object ([wording])
    OBJECT = "object"  # any other word: what the task is about


SPECIFIC_KINDS = frozenset({Kind.NUMBER, Kind.FLAG, Kind.PATH, Kind.NAME})


class Conflict(StrEnum):
    """Why two tasks alike in words are one form about two things (module docstring)."""

    SPECIFIC = "specific"
    FORM = "form"
    OPPOSITE = "opposite"
    ACTION = "action"


@dataclass(frozen=True)
class Lexicon:
    """``similarity_words.txt`` read."""

    same: Mapping[tuple[str, ...], str]  # the stems of a word or phrase -> the term it reads as
    longest: int  # the most words in a phrase of ``same``
    wording: frozenset[str]
    work: frozenset[str]
    opposite: Mapping[str, frozenset[str]]


_SECTIONS = ("same", "wording", "work", "opposite")


def parse_lexicon(text: str) -> Lexicon:
    """The lexicon in ``text`` (the format of ``similarity_words.txt``)."""
    from agentos.shared.text import stems

    section = ""
    same: dict[tuple[str, ...], str] = {}
    lists: dict[str, set[str]] = {"wording": set(), "work": set()}
    pairs: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            if section not in _SECTIONS:
                raise ValueError(f"line {number}: unknown section [{section}]")
            continue
        if section == "same":
            word, colon, others = line.partition(":")
            target = stems(word)
            if not colon or len(target) != 1:
                raise ValueError(f"line {number}: expected 'word: other, other words'")
            for phrase in [word, *others.split(",")]:
                key = _key(phrase)
                if key:
                    same[key] = target[0][:PREFIX]
        elif section in lists:
            lists[section].update(w.strip() for w in line.split(",") if stems(w))
        elif section == "opposite":
            for pair in filter(None, (p.strip() for p in line.split(","))):
                first, slash, second = pair.partition("/")
                if not slash or not stems(first) or not stems(second):
                    raise ValueError(f"line {number}: expected 'word/word, word/word'")
                pairs.append((first, second))
        else:
            raise ValueError(f"line {number}: words before any [section]")

    def term(word: str) -> str:  # a listed word read as the tasks' words are
        key = _key(word)
        return same.get(key, key[0][:PREFIX])

    opposite: dict[str, set[str]] = {}
    for first, second in pairs:
        a, b = term(first), term(second)
        if a != b:
            opposite.setdefault(a, set()).add(b)
            opposite.setdefault(b, set()).add(a)
    return Lexicon(
        same,
        max((len(k) for k in same), default=1),
        frozenset(map(term, lists["wording"])),
        frozenset(map(term, lists["work"])),
        {k: frozenset(v) for k, v in opposite.items()},
    )


def _key(phrase: str) -> tuple[str, ...]:
    """How a word or phrase of ``[same]`` is looked up: a word by its stem ("deletes" is
    "delete"), a phrase by its words ("logging in" is no "log in")."""
    from agentos.shared.text import stems, words

    found = words(phrase)
    return tuple(stems(phrase)) if len(found) == 1 else tuple(found)


@cache
def lexicon() -> Lexicon:
    return parse_lexicon(WORDS_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Features:
    """What :func:`similarity` compares, computed once per task: its terms in the order it
    says them (a specific prefixed with :data:`NAME_TERM`), and the words it writes as
    names."""

    order: tuple[str, ...]
    proper: frozenset[str] = frozenset()

    @property
    def words(self) -> frozenset[str]:
        return frozenset(t for t in self.order if not t.startswith(NAME_TERM))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t[len(NAME_TERM) :] for t in self.order if t.startswith(NAME_TERM))

    def terms(self) -> frozenset[str]:
        return frozenset(self.order)

    def stored(self) -> str:
        """As ``tasks.features`` holds them (JSON)."""
        return json.dumps({"order": list(self.order), "proper": sorted(self.proper)})

    @classmethod
    def from_stored(cls, text: str) -> Features:
        data = json.loads(text)
        return cls(tuple(map(str, data["order"])), frozenset(map(str, data["proper"])))

    def lead(self) -> str | None:
        """The kind of work the task starts with ("Add unit tests ..." is a test), or
        None (an issue title: "The export button is visible ...")."""
        work = lexicon().work
        if not self.order or self.order[0] not in work:
            return None
        if self.order[0] == "add":  # "add a test", "write docs": the work is the noun
            return next((t for t in self.order[1:3] if t in work), "add")
        return self.order[0]


def features(text: str) -> Features:
    from agentos.interview.lexicon import STOPWORDS
    from agentos.shared.text import stems

    found = lexicon()
    placed: list[tuple[int, str]] = []
    rest = list(text)
    for m in _SPECIFIC.finditer(text):
        placed.append((m.start(), NAME_TERM + _specific(str(m.lastgroup), m.group())))
        rest[m.start() : m.end()] = " " * (m.end() - m.start())
    tokens: list[tuple[int, str, str, bool]] = []  # place, word, stem, written as a name
    plain = "".join(rest)
    start = len(plain) - len(plain.lstrip())
    for m in _WORD.finditer(plain):
        for part in re.finditer(r"[^-']+", m.group()):
            word = part.group()
            lower = word.lower()
            stem = stems(lower)
            if not stem:
                continue
            proper = (word.isupper() and len(word) > 1) or any(c.isupper() for c in word[1:])
            proper |= word[0].isupper() and m.start() != start
            tokens.append((m.start() + part.start(), lower, stem[0], proper))
    proper_terms = set()
    i = 0
    while i < len(tokens):  # a phrase may hold stop words ("get rid of", "log in")
        size, term = 1, tokens[i][2][:PREFIX]
        for n in range(min(found.longest, len(tokens) - i), 1, -1):
            key = tuple(t[1] for t in tokens[i : i + n])
            if key in found.same:
                size, term = n, found.same[key]
                break
        else:
            if tokens[i][1] in STOPWORDS or len(tokens[i][1]) < 2:
                i += 1
                continue
            term = found.same.get((tokens[i][2],), term)
            if tokens[i][3] and term == tokens[i][2][:PREFIX]:
                proper_terms.add(term)
        placed.append((tokens[i][0], term))
        i += size
    placed.sort()
    return Features(tuple(t for _, t in placed), frozenset(proper_terms))


def _specific(group: str, found: str) -> str:
    """A specific as it is compared: lowercased, quotes and "()" off, a number's
    thousands written out ("10,000" and "10k" are "10000"), a code's hyphens out
    ("SHA-1" is "sha1"), "Node.js" is "node"."""
    name = found.lower().strip('"`')
    if group == "number":
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+", name):
            return name.replace(",", "")
        if re.fullmatch(r"\d+k", name):
            return str(int(name[:-1]) * 1000)
    if group == "code":
        return name.replace("-", "")
    if group == "identifier":
        return name.removesuffix("()")
    if group == "path" and re.fullmatch(r"[a-z]+\.js", name) and found[0].isupper():
        return name.removesuffix(".js")
    if group == "quoted":
        return f'"{name}"'
    return name


def specific_kind(name: str) -> Kind:
    """The kind of a specific (without its prefix), by its form."""
    if name.startswith("--"):
        return Kind.FLAG
    if _NUMBER.fullmatch(name):
        return Kind.NUMBER
    if "/" in name or _FILE.search(name):
        return Kind.PATH
    return Kind.NAME


def kind(term: str) -> Kind:
    """What ``term`` is: a specific by its form, a word by the words file."""
    if term.startswith(NAME_TERM):
        return specific_kind(term[len(NAME_TERM) :])
    found = lexicon()
    if term in found.work:
        return Kind.WORK
    if term in found.wording:
        return Kind.WORDING
    return Kind.OBJECT


@dataclass(frozen=True)
class Frequencies:
    """In how many of ``documents`` tasks each term appears (a term not counted: none)."""

    documents: int
    counts: Mapping[str, int]

    def weight(self, term: str) -> float:
        """What a term says: its smoothed inverse document frequency, > 0; a wording
        word's :data:`WORDING_SHARE` of it."""
        idf = math.log((self.documents + 1) / (self.counts.get(term, 0) + 0.5))
        return idf * WORDING_SHARE if term in lexicon().wording else idf

    def plus_counts(self, documents: int, counts: Mapping[str, int]) -> Frequencies:
        """These frequencies and those of ``documents`` more tasks, ``counts`` holding
        theirs for every term asked about: the result knows those terms only."""
        mine = self.counts
        return Frequencies(
            self.documents + documents, {t: mine.get(t, 0) + n for t, n in counts.items()}
        )

    def plus(self, *tasks: Features) -> Frequencies:
        """These counts with ``tasks`` counted too."""
        counts = Counter(self.counts)
        for task in tasks:
            counts.update(task.terms())
        return Frequencies(self.documents + len(tasks), counts)


def count(groups: Iterable[Iterable[str]]) -> Frequencies:
    """The document frequencies of groups of task descriptions, a group being one task in
    its several wordings: a term counts once per group (a task said three ways is one)."""
    counts: Counter[str] = Counter()
    documents = 0
    for group in groups:
        documents += 1
        counts.update(frozenset().union(*(features(text).terms() for text in group)))
    return Frequencies(documents, dict(sorted(counts.items())))


@cache
def background() -> Frequencies:
    """The frequencies every comparison starts from: those of the calibration pairs' tasks
    (``similarity_frequencies.json``, written by ``benchmarks/workflow_bench.py
    --write-frequencies``; a test checks it is what the calibration part gives)."""
    data = json.loads(FREQUENCIES_FILE.read_text(encoding="utf-8"))
    return Frequencies(int(data["documents"]), dict(data["counts"]))


def frequencies_json(frequencies: Frequencies) -> str:
    """``frequencies`` as ``similarity_frequencies.json`` holds them."""
    counts = dict(sorted(frequencies.counts.items()))
    return json.dumps({"documents": frequencies.documents, "counts": counts}, indent=0) + "\n"


def conflicts(a: Features, b: Features, *, names_only: bool = False) -> list[Conflict]:
    """Why ``a`` and ``b`` are one form about two things (the module docstring), in the
    order of :class:`Conflict`; ``names_only``: the specifics alone."""
    own_a, own_b = a.terms() - b.terms(), b.terms() - a.terms()
    found = []
    if _kinds(own_a, a.proper) & _kinds(own_b, b.proper):
        found.append(Conflict.SPECIFIC)
    if names_only:
        return found
    ops = [
        op
        for op in difflib.SequenceMatcher(None, a.order, b.order, autojunk=False).get_opcodes()
        if op[0] != "equal"
    ]
    if len(ops) == 1 and ops[0][0] == "replace":
        _, i1, i2, j1, j2 = ops[0]
        wording = lexicon().wording  # "fails" / "breaks": one task
        if any(t not in wording for t in (*a.order[i1:i2], *b.order[j1:j2])):
            found.append(Conflict.FORM)
    opposite = lexicon().opposite
    if any(opposite.get(t, frozenset()) & own_b for t in own_a):
        found.append(Conflict.OPPOSITE)
    lead_a, lead_b = a.lead(), b.lead()
    if lead_a and lead_b and lead_a != lead_b:
        found.append(Conflict.ACTION)
    return found


def _kinds(own: Iterable[str], proper: frozenset[str]) -> set[Kind]:
    """The kinds of specifics among a task's own terms (its words written as names too)."""
    out = set()
    for term in own:
        if term.startswith(NAME_TERM):
            out.add(specific_kind(term[len(NAME_TERM) :]))
        elif term in proper:
            out.add(Kind.NAME)
    return out


def similarity(a: Features, b: Features, frequencies: Frequencies | None = None) -> float:
    """0..1: how alike (see the module docstring). ``frequencies``: those of the tasks
    compared with, the two included (default: the background with ``a`` and ``b``)."""
    return Scorer(frequencies or background().plus(a, b))(a, b)


class Scorer:
    """:func:`similarity` with one set of frequencies, each term's weight worked out once:
    what the index uses to score many tasks against one."""

    def __init__(self, frequencies: Frequencies) -> None:
        self.frequencies = frequencies
        self._weights: dict[str, float] = {}

    def weight(self, term: str) -> float:
        found = self._weights.get(term)
        if found is None:
            found = self._weights[term] = self.frequencies.weight(term)
        return found

    def __call__(self, a: Features, b: Features) -> float:
        ta, tb = a.terms(), b.terms()
        if not ta or not tb:
            return 0.0
        weight = self.weight
        shared = math.fsum(map(weight, ta & tb))  # fsum: the same in any order
        if not shared:
            return 0.0
        score = min(1.0, 2 * shared / (math.fsum(map(weight, ta)) + math.fsum(map(weight, tb))))
        return score * substitution(a, b)


def substitution(a: Features, b: Features, *, names_only: bool = False) -> float:
    """The factor for two tasks' conflicts: :data:`SUBSTITUTED` when they have one, else 1
    (``names_only``: of their specifics alone, what a cosine of embeddings misses)."""
    return SUBSTITUTED if conflicts(a, b, names_only=names_only) else 1.0


def text_similarity(a: str, b: str) -> float:
    return similarity(features(a), features(b))
