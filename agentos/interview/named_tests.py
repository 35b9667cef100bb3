"""What a request says about its tests: the ones it names, and whether it asks for the tests
themselves to change.

The gate refuses changes to the base's tests (a test deleted, skipped, rewritten) unless the
user allowed them. A request allows them in words: "update the tests for the new API",
"fix the bug in x.py and its test in tests/test_x.py", "change tests/test_api.py to expect
a 404". It does not when it asks to make failing tests pass ("fix the failing test in
tests/test_x.py") or says not to ("without changing the tests").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentos.interview.entities import Entity

_VERBS = r"update|change|adjust|rewrite|modify|edit|amend|rework|extend|correct|fix|replace"
_QUALIFIERS = (
    r"(?:(?:the|its|their|these|those|this|that|all|any|every|existing|old|affected|"
    r"related|relevant|unit|outdated|matching|corresponding|expected|failing|broken|red)\s+)*"
)
_CHANGE_TESTS = re.compile(
    rf"\b(?P<verb>{_VERBS})(?:s|es|ed|ing)?\s+(?P<obj>{_QUALIFIERS})(?P<noun>tests?|test\s+files?|"
    rf"test\s+cases?|assertions?|expectations?)(?![\w/.-])",
    re.IGNORECASE,
)
# "fix the bug in x.py and its test in tests/test_x.py": a second object of a change verb.
_AND_TESTS = re.compile(
    r"\b(?:and|as\s+well\s+as|plus|along\s+with)\s+(?:its|their|the)\s+"
    r"(?:(?:unit|matching|corresponding)\s+)?(?P<noun>tests?)(?![\w/.-])",
    re.IGNORECASE,
)
_CHANGE_VERB = re.compile(rf"\b(?:{_VERBS})(?:s|es|ed|ing)?\b", re.IGNORECASE)
_NEGATED = re.compile(
    r"(?:\b(?:not|never|no|without|nor)\b|n't|\bdont\b)\s+(?:\w+\s+){0,2}$", re.IGNORECASE
)
# "fix the failing test": make it pass by fixing the code, not by editing it.
_MAKE_PASS = re.compile(r"\b(?:failing|broken|red|erroring)\s+$", re.IGNORECASE)
_WHERE = re.compile(r"^\s+(?:in|for|at|under|of|from)\s+$", re.IGNORECASE)
_SENTENCE = re.compile(r"[.;!?]+(?=\s|$)|\n")


@dataclass(frozen=True)
class TestChangesAsked:
    """The request asks for its tests to change: those under ``paths`` (all when empty)."""

    words: str
    paths: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"words": self.words, "paths": list(self.paths)}


def _names_tests(path: str) -> bool:
    base = path.split("::")[0].rstrip("/")
    parts = base.split("/")
    return "::" in path or "test" in parts[-1].lower() or parts[0] in ("tests", "test")


def _clause_start(text: str, at: int) -> int:
    found = [m.end() for m in _SENTENCE.finditer(text, 0, at)]
    return found[-1] if found else 0


def test_changes_asked(text: str, entities: list[Entity]) -> TestChangesAsked | None:
    """Whether ``text`` asks for the tests themselves to change, and which."""
    paths = [e for e in entities if e.kind == "path"]
    asked: list[str] = []
    words: list[str] = []
    everything = False

    def follow(end: int) -> str | None:
        """The test path right after a matched object ("... test in tests/x.py")."""
        for e in paths:
            if e.start >= end and _WHERE.match(text[end : e.start]) and _names_tests(e.text):
                return e.text
            if e.start >= end and e.start - end <= 1 and _names_tests(e.text):
                return e.text
        return None

    for m in _CHANGE_TESTS.finditer(text):
        before = text[_clause_start(text, m.start()) : m.start()]
        if _NEGATED.search(before):
            continue
        verb = m.group("verb").lower()
        if verb in ("fix", "correct") and _MAKE_PASS.search(m.group("obj") + " "):
            continue
        if verb in ("fix", "correct") and m.group("noun").lower().startswith("test"):
            obj = m.group("obj").lower().split()
            if not obj or obj[-1] not in ("its", "their"):
                continue  # "fix the test in x": ambiguous, read as "make it pass"
        where = follow(m.end())
        if where:
            asked.append(where)
        else:
            everything = True
        words.append(m.group(0))
    for m in _AND_TESTS.finditer(text):
        clause = text[_clause_start(text, m.start()) : m.start()]
        verb = _CHANGE_VERB.search(clause)
        if verb is None or _NEGATED.search(clause[: verb.start()]):
            continue
        where = follow(m.end())
        if where:
            asked.append(where)
        else:
            everything = True
        words.append(text[_clause_start(text, m.start()) : m.end()].strip())
    # "update tests/test_api.py to expect ...": a change verb whose object is a test path.
    for e in paths:
        if not _names_tests(e.text):
            continue
        before = text[_clause_start(text, e.start) : e.start]
        verb = re.search(rf"\b(?:{_VERBS})(?:s|es|ed|ing)?\s+(?:the\s+)?$", before, re.I)
        if verb is None or _NEGATED.search(before[: verb.start()]):
            continue
        if verb.group(0).lower().startswith(("fix", "correct")):
            continue  # "fix tests/test_x.py": make it pass
        asked.append(e.text)
        words.append((verb.group(0) + e.text).strip())
    if not (asked or everything):
        return None
    return TestChangesAsked("; ".join(dict.fromkeys(words)), () if everything else tuple(asked))


def named_things(entities: list[Entity]) -> list[str]:
    """The paths and symbols a request names: what its known failures are judged by."""
    seen: dict[str, None] = {}
    for e in entities:
        if e.kind in ("path", "symbol"):
            seen.setdefault(e.text, None)
    return list(seen)
