"""Success criteria in a request that map onto Stormbreaker checks.

"tests pass" becomes the test command, "README.md must exist" a ``file_exists`` check,
"ruff check passes" the lint command, "only change app/" a ``no_changes_outside`` check.
Only what the request says is proposed; nothing is guessed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from agentos._interview_lexicon import Entity
from agentos.checks import CheckSpec, FileContains

TEST_COMMAND = "python -m pytest -q"
LINT_COMMAND = "ruff check ."
_NEAR = 120  # how far around a path its criterion is looked for, in characters

_PASS = (
    r"(?:must\s+|should\s+|still\s+|to\s+|will\s+|all\s+)?(?:pass|passes|passing|passed|"
    r"succeed|succeeds|is\s+green|are\s+green|green)\b"
)
_TESTS_PASS = re.compile(
    r"\b(?:tests?|test\s+suite|suite|pytest)\s+(?:\w+\s+)?" + _PASS, re.IGNORECASE
)
_TESTS_GREEN = re.compile(r"\b(?:all\s+)?(?:\w+\s+)?tests\s+green\b", re.IGNORECASE)
_LINT = re.compile(
    r"\bruff(?:\s+check)?(?:\s+\.)?(?:\s+(?:and|,)\s+(?:mypy|pytest|the\s+tests|tests?))?\s+"
    r"(?:must\s+|should\s+|still\s+)?(?:pass|passes|is\s+clean|are\s+clean|clean)\b"
    r"|\blint(?:er|ing)?\s+(?:is\s+|stays\s+|must\s+be\s+|should\s+be\s+)?"
    r"(?:clean|passes|pass|green)\b|\bno\s+lint\s+(?:errors|warnings)\b",
    re.IGNORECASE,
)
_MYPY = re.compile(
    r"\bmypy(\s+--strict)?(?:\s+[\w./-]+)?\s+(?:must\s+|should\s+|still\s+)?"
    r"(?:pass|passes|is\s+clean|clean)\b",
    re.IGNORECASE,
)
_AFTER_PASSES = re.compile(r"\s+" + _PASS, re.IGNORECASE)
_AFTER_EXISTS = re.compile(
    r"\s+(?:must|should|has\s+to|needs\s+to|will)\s+(?:exist|be\s+created)\b"
    r"|\s+(?:exists|is\s+created)\b",
    re.IGNORECASE,
)
_BEFORE_CREATE = re.compile(
    r"\b(?:create|add|write)\s+(?:a\s+|an\s+|the\s+)?(?:new\s+)?(?:file\s+)?$", re.IGNORECASE
)
_NOT_A_FILE_OF_ITS_OWN = re.compile(
    r"\s+(?:section|entry|heading|paragraph|line|example|badge)\b", re.IGNORECASE
)
_AFTER_CONTAINS = re.compile(
    r"\s+(?:must|should|has\s+to|needs\s+to)\s+(?:contain|include|mention|have|list|show)"
    r"\s+(?:the\s+|a\s+|an\s+)?(?:\w+\s+)?$",
    re.IGNORECASE,
)
_ONLY_CHANGE = re.compile(
    r"\bonly\s+(?:change|changes|edit|edits|touch|touches|modify|modifies|add|adds|update)\s+"
    r"(?:files?\s+)?(?:in\s+|under\s+)?$"
    r"|\b(?:nothing|no\s+files?|anything|everything)\s+outside\s+(?:of\s+)?$",
    re.IGNORECASE,
)
_PATH_ONLY = re.compile(r"\s+only\b", re.IGNORECASE)
_IN_BEFORE = re.compile(r"\b(?:in|to|under|inside)\s+$", re.IGNORECASE)
_LIST_GLUE = re.compile(r"^\s*(?:,|and|or|,\s*and)\s*$", re.IGNORECASE)
_DIFF_LIMIT = re.compile(
    r"\b(?:diff|patch|change(?:s|set)?)\b[^.;\n]{0,30}?\b(?:under|below|at\s+most|"
    r"no\s+more\s+than|less\s+than|within|max(?:imum)?(?:\s+of)?)\s+(\d+)\s+(?:changed\s+)?lines"
    r"|\b(?:at\s+most|no\s+more\s+than|under|less\s+than)\s+(\d+)\s+(?:changed\s+)?lines?\s+"
    r"(?:changed|of\s+diff)",
    re.IGNORECASE,
)
_COMMAND_OK = re.compile(
    r"\s+(?:must\s+|should\s+)?(?:exits?\s+(?:with\s+)?(?:code\s+)?0\b|succeeds\b|passes\b|"
    r"works\b|runs\s+cleanly\b)",
    re.IGNORECASE,
)


def propose_checks(text: str, entities: list[Entity]) -> list[CheckSpec]:
    """The checks the request's own success criteria and limits map onto, in order."""
    found: list[tuple[int, CheckSpec | None]] = []
    paths = [e for e in entities if e.kind == "path"]

    for e in paths:
        after, before = text[e.end : e.end + _NEAR], text[max(0, e.start - _NEAR) : e.start]
        if _is_python_test(e.text) and _AFTER_PASSES.match(after):
            found.append((e.start, _check(name=f"{e.text} passes", run=f"{TEST_COMMAND} {e.text}")))
        if _is_file(e.text) and (
            _AFTER_EXISTS.match(after)
            or (_BEFORE_CREATE.search(before) and not _NOT_A_FILE_OF_ITS_OWN.match(after))
        ):
            found.append((e.start, _check(name=f"{e.text} exists", file_exists=e.text)))
        if _is_file(e.text):
            quote = _next_literal(text, e, entities)
            if quote is not None:
                found.append(
                    (
                        e.start,
                        _check(
                            name=f'{e.text} contains "{quote}"',
                            file_contains=FileContains(path=e.text, pattern=_literal(quote)),
                        ),
                    )
                )

    allowed = _allowed_paths(text, paths)
    if allowed:
        globs = [p.rstrip("/") + "/**" if p.endswith("/") else p for p in allowed]
        found.append(
            (0, _check(name="changes stay in " + ", ".join(allowed), no_changes_outside=globs))
        )

    for m in [*_TESTS_PASS.finditer(text), *_TESTS_GREEN.finditer(text)]:
        found.append((m.start(), _check(name="tests pass", run=TEST_COMMAND)))
        break
    for m in _LINT.finditer(text):
        found.append((m.start(), _check(name="lint clean", run=LINT_COMMAND)))
        break
    for m in _MYPY.finditer(text):
        strict = " --strict" if m.group(1) else ""
        found.append((m.start(), _check(name="types check", run=f"mypy{strict} .")))
        break
    for m in _DIFF_LIMIT.finditer(text):
        n = int(m.group(1) or m.group(2))
        found.append((m.start(), _check(name=f"at most {n} changed lines", max_diff_lines=n)))
        break
    for e in entities:
        if e.kind == "command" and _COMMAND_OK.match(text[e.end :]):
            found.append((e.start, _check(name=f"{e.text} succeeds", run=e.text)))

    found.sort(key=lambda item: item[0])
    checks: list[CheckSpec] = []
    seen: set[str] = set()
    for _, check in found:
        if check is None:
            continue
        key = check.model_dump_json(exclude={"name"})
        if key not in seen:
            seen.add(key)
            checks.append(check)
    return checks


def _literal(text: str) -> str:
    """``text`` as a regular expression matching itself (readable: only metacharacters
    are escaped)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


def _check(**fields: Any) -> CheckSpec | None:
    """The check, or None when the request names something a check may not hold (an
    absolute path, a path climbing out of the worktree)."""
    try:
        return CheckSpec(**fields)
    except ValidationError:
        return None


def _is_python_test(path: str) -> bool:
    base = path.split("::")[0]
    name = base.rsplit("/", 1)[-1]
    return (base.endswith(".py") and ("test" in name)) or base.rstrip("/") == "tests"


def _is_file(path: str) -> bool:
    return not path.endswith("/") and "::" not in path and "*" not in path


def _next_literal(text: str, path: Entity, entities: list[Entity]) -> str | None:
    """The quoted text after "PATH must contain ...", when there is one."""
    later = [e for e in entities if e.start >= path.end and e.kind in ("quote", "symbol")]
    if not later:
        return None
    nxt = later[0]
    return nxt.text if _AFTER_CONTAINS.match(text[path.end : nxt.start]) else None


def _allowed_paths(text: str, paths: list[Entity]) -> list[str]:
    """Paths the request limits the change to: "only change X and Y", "in X only"."""
    allowed: list[str] = []
    for i, e in enumerate(paths):
        before, after = text[max(0, e.start - _NEAR) : e.start], text[e.end : e.end + _NEAR]
        starts_list = _ONLY_CHANGE.search(before) is not None
        in_only = _IN_BEFORE.search(before) is not None and _PATH_ONLY.match(after) is not None
        if not (starts_list or in_only):
            continue
        run = [e.text]
        for nxt in paths[i + 1 :]:
            if not _LIST_GLUE.match(text[paths[i + len(run) - 1].end : nxt.start]):
                break
            run.append(nxt.text)
        for p in run:
            if p not in allowed:
                allowed.append(p)
    return allowed
