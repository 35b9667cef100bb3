"""How alike two task descriptions are, 0..1: deterministic, offline, and cheap enough to
compare a new task with thousands of live ones.

Two parts, from the same stems the knowledge store and the router use:

- **words**: the content words' stems (stop words out), a few verbs and nouns folded onto
  one word that says the same thing ("write"/"create"/"implement" are "add"; "repair" and
  "resolve" are "fix"; "delete" is "remove"; "bug"/"error"/"issue" one word), compared
  with the Dice coefficient;
- **names**: what a task is *about*: identifiers (``parse_date``, ``getUserName``,
  ``orders.customer_id``), file paths, flags, version numbers and other numbers. Two tasks
  about different things are different tasks however alike their wording ("add tests for
  ``parse_date``" / "... for ``format_date``"): the score is the words' score times how
  much of the names the two share (Jaccard); a task that names something and one that
  names nothing meet part way;
- **substitution**: when each of the two has a word of its own that is not a generic one
  (add, fix, test...), they read as the same form about other objects ("the login
  endpoint" / "the logout endpoint"), and the score is lowered.

The labelled pairs in ``tests/data/dedup_pairs.jsonl`` (paraphrases, near-misses,
different tasks) calibrate :data:`DEFAULT_THRESHOLD`; their precision and recall are
asserted by the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_THRESHOLD = 0.75  # over it: a duplicate
RELATED_THRESHOLD = 0.5  # between this and the threshold: related
ONE_SIDED_NAMES = 0.7  # the factor when only one of the two names something
SUBSTITUTED = 0.7  # the factor when each has a word of its own: same form, other object
# Words any task may say: a word of its own that is one of these makes no other object.
_GENERIC = frozenset(
    {"add", "fix", "updat", "remov", "make", "get", "set", "do", "handl", "verifi", "replac",
     "refactor", "test", "fail", "pass"}
)  # fmt: skip

# Stems folded onto one: the same request in other words.
_SAME = {
    "write": "add",
    "creat": "add",
    "implement": "add",
    "introduc": "add",
    "give": "add",
    "repair": "fix",
    "resolv": "fix",
    "correct": "fix",
    "delet": "remov",
    "drop": "remov",
    "chang": "updat",
    "modifi": "updat",
    "bump": "updat",
    "upgrad": "updat",
    "bug": "bug",
    "error": "bug",
    "issu": "bug",
    "problem": "bug",
    "defect": "bug",
    "crash": "bug",
    "broken": "fail",
    "failur": "fail",
    "check": "verifi",
    "valid": "verifi",
    "ensur": "verifi",
    "sanitis": "sanit",
    "sanitiz": "sanit",
    "cover": "test",
    "log": "log",
    "document": "doc",
    "docs": "doc",
    "annot": "hint",
    "type": "hint",
    "faster": "speed",
    "quicker": "speed",
    "move": "refactor",
    "split": "refactor",
    "separ": "refactor",
    "find": "investig",
    "instead": "replac",
    "use": "replac",
}
_NAME = re.compile(
    r"""
    --[a-z][\w-]*                               # a flag
    | [\w./-]*\w\.(?:py|js|ts|tsx|jsx|md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|go|rs
                     |java|c|h|cpp|sql|html|css)\b  # a file
    | \w+(?:/\w+)+(?:\.\w+)?                    # a path
    | [A-Za-z_]\w*\.[A-Za-z_]\w*                # a dotted name (orders.customer_id)
    | [A-Za-z]\w*_\w+ | _\w+                    # snake_case
    | [a-z]+[A-Z]\w*                            # camelCase
    | \d+(?:\.\d+)*                             # a number or version
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Features:
    """What :func:`similarity` compares, computed once per task."""

    words: frozenset[str]
    names: frozenset[str]


def features(text: str) -> Features:
    from agentos.interview.lexicon import STOPWORDS
    from agentos.shared.text import stems, words

    names = frozenset(m.group().lower().rstrip("()") for m in _NAME.finditer(text))
    name_words = {w for n in names for w in re.split(r"[^a-z0-9]+", n) if w}
    content = set()
    for word, stem in zip(words(text), stems(text), strict=False):
        if word in STOPWORDS or word in name_words or word.isdigit():
            continue
        content.add(_SAME.get(stem, stem))
    return Features(frozenset(content), names)


def similarity(a: Features, b: Features) -> float:
    """0..1: how alike (see the module docstring)."""
    if not (a.words or a.names) or not (b.words or b.names):
        return 0.0
    both = len(a.words) + len(b.words)
    words = 2 * len(a.words & b.words) / both if both else 1.0
    if (a.words - b.words - _GENERIC) and (b.words - a.words - _GENERIC):
        words *= SUBSTITUTED  # "the login endpoint" / "the logout endpoint"
    if a.names and b.names:
        return words * len(a.names & b.names) / len(a.names | b.names)
    if a.names or b.names:
        return words * ONE_SIDED_NAMES
    return words


def text_similarity(a: str, b: str) -> float:
    return similarity(features(a), features(b))
