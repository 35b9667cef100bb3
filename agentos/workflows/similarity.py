"""How alike two task descriptions are, 0..1: deterministic, offline, and cheap enough to
compare a new task with thousands of live ones.

A task's **terms** are its words and its names:

- **words**: the content words' stems (stop words out), each read through the synonym data
  of ``similarity_words.txt`` ("write", "create", "implement" are "add"; "sign in" is
  "login"): data, not code;
- **names**: what a task is *about* when it names it: identifiers (``parse_date``,
  ``getUserName``, ``orders.customer_id``), file paths, flags, version numbers and other
  numbers.

Each term weighs what it says: its inverse document frequency over a collection of tasks
(:class:`Frequencies`): the task titles of the calibration pairs, plus the live tasks a
new one is compared with, plus the two being compared. "add" or "test", in most tasks,
weighs little; "telemetry", in few, much. The score is the weighted Dice coefficient of the
two tasks' terms: twice the weight they share over the weight of both.

**Substitution**: the terms each of the two has of its own (not in the other) say whether
they are the same form about other objects ("the login endpoint" / "the logout endpoint",
"HTTP 429" / "HTTP 503", "add caching" / "remove caching"): when each side has a term of
its own of the same kind (two objects or kinds of work, two numbers, two identifiers...)
the score is lowered. A word of its own that is a filler ("properly", "again") or says
little (a word in most tasks) is no other object, so a paraphrase that adds a word is not
penalised.

The labelled pairs in ``tests/data/dedup/`` calibrate :data:`DEFAULT_THRESHOLD` (the
calibration part) and measure it (the held-out part, which nothing is tuned on).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

# Calibrated on tests/data/dedup/calibration.jsonl: precision stays >= 0.95 with the
# threshold anywhere from 0.35 to 0.74 (recall 0.43..0.45); 0.5 sits in the middle.
DEFAULT_THRESHOLD = 0.5  # at or over it: a duplicate
RELATED_THRESHOLD = 0.3  # between this and the threshold: related
SUBSTITUTED = 0.4  # the factor when each side has a term of its own of the same kind
GENERIC_SHARE = 0.3  # a word in more than this share of the tasks says little
PREFIX = 6  # a stem is read as its first letters: "config" is "configuration"
NAME_TERM = "="  # prefixes a name among the terms (a stem never holds one)

WORDS_FILE = Path(__file__).with_name("similarity_words.txt")
FREQUENCIES_FILE = Path(__file__).with_name("similarity_frequencies.json")

_NAME = re.compile(
    r"""
    --[a-z][\w-]*                               # a flag
    | [\w./-]*\w\.(?:py|js|ts|tsx|jsx|md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|go|rs
                     |java|c|h|cpp|sql|html|css)\b  # a file
    | \w+(?:/\w+)+(?:\.\w+)?                    # a path
    | [A-Za-z_]\w*\.[A-Za-z_]\w*                # a dotted name (orders.customer_id)
    | [A-Za-z]\w*_\w+ | _\w+                    # snake_case
    | \b[a-z]{2,}(?:[A-Z][a-z0-9]+)+             # camelCase (not jQuery, macOS: words)
    | \b\d+(?:[.,]\d+)*k?\b                     # a number or version (not arm64's)
    """,
    re.VERBOSE,
)
_NUMBER = re.compile(r"\d+(?:\.\d+)*")
_FILE = re.compile(
    r"\.(?:py|js|ts|tsx|jsx|md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|go|rs|java|c|h|cpp|sql"
    r"|html|css)$"
)


class Kind(StrEnum):
    """What a term is, for the substitution rule."""

    OBJECT = "object"  # a thing, or a kind of work ("test", "fix"): what the task is
    FILLER = "filler"
    NUMBER = "number"
    FLAG = "flag"
    FILE = "file"
    IDENTIFIER = "identifier"


@dataclass(frozen=True)
class Lexicon:
    """``similarity_words.txt`` read: phrases folded onto a word, and the kinds of words."""

    same: Mapping[tuple[str, ...], str]  # the stems of a word or phrase -> the stem it reads as
    longest: int  # the most stems in a phrase of ``same``
    work: frozenset[str]
    fillers: frozenset[str]


def parse_lexicon(text: str) -> Lexicon:
    """The lexicon in ``text`` (the format of ``similarity_words.txt``)."""
    from agentos.shared.text import stems

    section = ""
    same: dict[tuple[str, ...], str] = {}
    kinds: dict[str, set[str]] = {"work": set(), "fillers": set()}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            if section not in ("same", *kinds):
                raise ValueError(f"line {number}: unknown section [{section}]")
            continue
        if section == "same":
            word, colon, others = line.partition(":")
            target = tuple(stems(word))
            if not colon or len(target) != 1:
                raise ValueError(f"line {number}: expected 'word: other, other words'")
            for phrase in [word, *others.split(",")]:
                key = _key(phrase)
                if key:
                    same[key] = target[0]
        elif section in kinds:
            kinds[section].update(stems(w)[0] for w in line.split(",") if stems(w))
        else:
            raise ValueError(f"line {number}: words before any [section]")
    for section, found in kinds.items():  # read as the tasks' words are
        kinds[section] = {same.get((w,), w[:PREFIX]) for w in found}
    return Lexicon(
        same,
        max((len(k) for k in same), default=1),
        frozenset(kinds["work"]),
        frozenset(kinds["fillers"]),
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
    """What :func:`similarity` compares, computed once per task."""

    words: frozenset[str]
    names: frozenset[str]

    def terms(self) -> frozenset[str]:
        """Its words and names as one set (a name prefixed with :data:`NAME_TERM`)."""
        return self.words | {NAME_TERM + n for n in self.names}


def features(text: str) -> Features:
    from agentos.interview.lexicon import STOPWORDS
    from agentos.shared.text import stems, words

    found = lexicon()
    names = frozenset(_name(m.group()) for m in _NAME.finditer(text))
    name_words = {w for n in names for w in re.split(r"[^a-z0-9]+", n) if w}
    tokens = list(zip(words(text), stems(text), strict=False))
    content = set()
    i = 0
    while i < len(tokens):
        if tokens[i][0] in name_words or tokens[i][0].isdigit():
            i += 1
            continue
        for size in range(min(found.longest, len(tokens) - i), 0, -1):
            key = (tokens[i][1],) if size == 1 else tuple(w for w, _ in tokens[i : i + size])
            if key in found.same and (size > 1 or tokens[i][0] not in STOPWORDS):
                content.add(found.same[key])
                i += size
                break
        else:
            word, stem = tokens[i]
            if word not in STOPWORDS:
                content.add(stem[:PREFIX])
            i += 1
    return Features(frozenset(content), names)


def _name(found: str) -> str:
    """A name as it is compared: lowercased, "()" off, a number's thousands written out
    ("10,000" and "10k" are "10000")."""
    name = found.lower().rstrip("()")
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+", name):
        return name.replace(",", "")
    if re.fullmatch(r"\d+k", name):
        return str(int(name[:-1]) * 1000)
    return name


@dataclass(frozen=True)
class Frequencies:
    """In how many of ``documents`` tasks each term appears (a term not counted: none)."""

    documents: int
    counts: Mapping[str, int]

    def weight(self, term: str) -> float:
        """What a term says: its smoothed inverse document frequency, > 0."""
        return math.log((self.documents + 1) / (self.counts.get(term, 0) + 0.5))

    def generic(self, term: str) -> bool:
        """A word in so many tasks that it names no object of its own."""
        return self.counts.get(term, 0) > GENERIC_SHARE * self.documents

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


def kind(term: str, frequencies: Frequencies) -> Kind:
    """What ``term`` is, for the substitution rule: a name by its form, a word by the
    words file ([work], [fillers]) or, when it is in most tasks, a filler."""
    if term.startswith(NAME_TERM):
        name = term[len(NAME_TERM) :]
        if name.startswith("--"):
            return Kind.FLAG
        if _NUMBER.fullmatch(name):
            return Kind.NUMBER
        if "/" in name or _FILE.search(name):
            return Kind.FILE
        return Kind.IDENTIFIER
    found = lexicon()
    if term in found.work:
        return Kind.OBJECT  # however frequent: a task that adds is not one that fixes
    if term in found.fillers or frequencies.generic(term):
        return Kind.FILLER
    return Kind.OBJECT


def similarity(a: Features, b: Features, frequencies: Frequencies | None = None) -> float:
    """0..1: how alike (see the module docstring). ``frequencies``: those of the tasks
    compared with, the two included (default: the background with ``a`` and ``b``)."""
    return Scorer(frequencies or background().plus(a, b))(a, b)


def substitution(own_a: Iterable[str], own_b: Iterable[str], frequencies: Frequencies) -> float:
    """The factor for the terms each side has of its own: :data:`SUBSTITUTED` when both
    have one of the same kind (not a filler), else 1."""
    return Scorer(frequencies).substitution(own_a, own_b)


class Scorer:
    """:func:`similarity` with one set of frequencies, each term's weight and kind worked
    out once: what the store uses to score many tasks against one."""

    def __init__(self, frequencies: Frequencies) -> None:
        self.frequencies = frequencies
        self._weights: dict[str, float] = {}
        self._kinds: dict[str, Kind] = {}

    def weight(self, term: str) -> float:
        found = self._weights.get(term)
        if found is None:
            found = self._weights[term] = self.frequencies.weight(term)
        return found

    def kind(self, term: str) -> Kind:
        found = self._kinds.get(term)
        if found is None:
            found = self._kinds[term] = kind(term, self.frequencies)
        return found

    def __call__(self, a: Features, b: Features) -> float:
        ta, tb = a.terms(), b.terms()
        if not ta or not tb:
            return 0.0
        weight = self.weight
        shared = math.fsum(map(weight, ta & tb))  # fsum: the same in any order
        score = min(1.0, 2 * shared / (math.fsum(map(weight, ta)) + math.fsum(map(weight, tb))))
        return score * self.substitution(ta - tb, tb - ta)

    def substitution(
        self, own_a: Iterable[str], own_b: Iterable[str], *, names_only: bool = False
    ) -> float:
        """:func:`substitution`; ``names_only``: of names alone (another number, flag,
        file or identifier), not of words."""
        ignored = {Kind.FILLER, Kind.OBJECT} if names_only else {Kind.FILLER}
        kinds_a = {self.kind(t) for t in own_a} - ignored
        kinds_b = {self.kind(t) for t in own_b} - ignored
        return SUBSTITUTED if kinds_a & kinds_b else 1.0


def text_similarity(a: str, b: str) -> float:
    return similarity(features(a), features(b))
