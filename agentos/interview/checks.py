"""Success criteria in a request, and the gate's checks they map onto.

Each criterion the request states is found with its words and either the check that holds
it or why no check can (:class:`Criterion`):

- "tests pass", "tests/test_api.py passes", "`pytest tests/x.py` passes": the tests (every
  such proposal goes through :func:`_tests_check`);
- "ruff check passes", "mypy --strict passes": the lint and type commands;
- "`make docs` exits 0", "pip install -e . succeeds", "`cmd` prints 'ok'": that command;
- "README.md must exist", "create docs/cli.md", "legacy/auth.py is gone": the file is there,
  or is not;
- "CHANGES.md contains 'Fixed typo'", "'Fixed typo' appears in CHANGES.md", "X must not
  mention 'Y'": the text is in the file, or is not;
- "only change app/", "keep the diff under 50 lines": the change stays in bounds.

"returns 404", "CI passes", "`cmd` exits 0 when the cache is empty" are criteria too, but
no check run in the worktree holds them: they come with ``why_not``. The interview credits
a criterion only through its check. Only what the request says is proposed; nothing is
guessed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentos.interview.entities import Entity
from agentos.shared.checks import CheckSpec, FileContains

LINT_COMMAND = "ruff check ."
_NEAR = 120  # how far around a path its criterion is looked for, in characters


@dataclass(frozen=True)
class Criterion:
    """A success criterion or limit the request states, and the check that holds it."""

    text: str  # the request's words for it
    start: int
    end: int
    check: CheckSpec | None
    why_not: str = ""  # when no check holds it: why


def _tests_check(name: str, paths: Sequence[str]) -> CheckSpec | None:
    """The check that the tests pass: the whole suite (no ``paths``) or the tests named.

    Every proposal to run tests goes through here, so that it becomes the repository's own
    test command by changing this one line. None when the command cannot run the tests.
    """
    if not all(_pytest_runs(p) for p in paths):
        return None
    return _check(name=name, tests=list(paths))


def criteria(text: str, entities: list[Entity]) -> list[Criterion]:
    """The criteria ``text`` states, in order of appearance."""
    paths = [e for e in entities if e.kind == "path"]
    found = [
        *_bounds(text, paths),
        *_named_tests(text, paths),
        *_whole_suite(text),
        *_tools(text),
        *_commands(text, entities),
        *_bare_commands(text, entities),
        *_files_there(text, paths),
        *_file_texts(text, entities),
        *_elsewhere(text),
    ]
    found.sort(key=lambda c: (c.start, c.end))  # stable: bounds first at a tie
    return found


def checks_of(found: list[Criterion]) -> list[CheckSpec]:
    """The checks of ``found``, each once (the first name wins)."""
    checks: list[CheckSpec] = []
    seen: set[str] = set()
    for c in found:
        if c.check is None:
            continue
        key = c.check.model_dump_json(exclude={"name"})
        if key not in seen:
            seen.add(key)
            checks.append(c.check)
    return checks


def _check(**fields: Any) -> CheckSpec | None:
    """The check, or None when the request names something a check may not hold (an
    absolute path, a path climbing out of the worktree)."""
    try:
        return CheckSpec(**fields)
    except ValidationError:
        return None


def _criterion(
    text: str, start: int, end: int, check: CheckSpec | None, why_not: str = ""
) -> Criterion:
    if check is None and not why_not:
        why_not = "it names a path outside the worktree"
    return Criterion(text[start:end].strip(), start, end, check, "" if check else why_not)


def _stated(
    text: str, start: int, end: int, check: CheckSpec | None, why_not: str = ""
) -> Criterion:
    """The criterion at ``text[start:end]``, without its check when the words describe
    today's behaviour ("currently X exits 0") or hold only in a situation the check does
    not set up ("X exits 0 when the cache is empty")."""
    if _NOW.search(text[max(0, start - _NEAR) : start]):
        return _criterion(text, start, end, None, "it describes today's behaviour")
    if _CONDITION.match(text, end):
        return _criterion(text, start, end, None, "it holds only in a situation no check sets up")
    return _criterion(text, start, end, check, why_not)


# --- shared pieces of the patterns ----------------------------------------------------------

_MODALS = r"(?:(?:must|should|will|shall|still|also|now|then|all|both|to|has\s+to|needs\s+to)\s+)*"
_PASS = (
    _MODALS + r"(?:pass|passes|passing|passed|succeed|succeeds|is\s+green|are\s+green|green|"
    r"keep\s+passing|continue\s+to\s+pass)\b"
)
_CONDITION = re.compile(
    r"\s+(?:even|when(?!\s+(?:done|finished|complete|completed|you\s+are\s+done)\b)|whenever|if|"
    r"unless|although|though|whereas|while|against|under)\b",
    re.IGNORECASE,
)
_NOW = re.compile(
    r"(?:\b(?:currently|today|right\s+now|at\s+the\s+moment|actual(?:ly)?)\b|\bbug\s*:)"
    r"[^.;!?\n]*$",
    re.IGNORECASE,
)
_LIST_GLUE = re.compile(r"^\s*(?:,|and|or|,\s*and|,\s*or)\s*$", re.IGNORECASE)
_TIMEOUT = re.compile(
    r"\s+(?:in\s+)?(?:under|within|in\s+less\s+than|below)\s+(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)\b",
    re.IGNORECASE,
)
_LITERALS = ("quote", "symbol", "command")  # what a text criterion may name


def _seconds(m: re.Match[str]) -> float:
    value, unit = float(m.group(1)), m.group(2).lower()
    if unit == "ms" or unit.startswith("milli"):
        return value / 1000
    return value * 60 if unit.startswith("m") else value


# --- tests ----------------------------------------------------------------------------------

_TESTS_PASS = re.compile(
    r"\b(?:tests?|test\s+suite|suite|pytest)\s+(?:\w+\s+)?" + _PASS, re.IGNORECASE
)
_TESTS_GREEN = re.compile(r"\b(?:all\s+)?(?:\w+\s+)?tests\s+green\b", re.IGNORECASE)
_NO_TEST_FAILS = re.compile(
    r"\bno\s+(?:\w+\s+)?tests?\s+(?:fail|fails|failing|failures?)\b", re.IGNORECASE
)
_AFTER_PASSES = re.compile(r"\s+" + _PASS, re.IGNORECASE)
_BEFORE_TESTS = re.compile(
    r"(?:\b(?:python3?\s+-m\s+)?pytest(?:\s+-q)?\s+"
    r"|\b(?:tests?|suite|specs?)\s+(?:in|from|under|of|at)\s+"
    r"|\b(?:tests?|specs?)\s+)$",
    re.IGNORECASE,
)
_PYTEST = re.compile(r"^(?:python3?\s+-m\s+)?pytest(?:\s+-q)?((?:\s+[\w./:\[\]-]+)*)\s*$")


def _names_tests(path: str) -> bool:
    """``path`` names tests: a test file, a test directory or a test's node id."""
    base = path.split("::")[0].rstrip("/")
    parts = base.split("/")
    name = parts[-1].lower()
    return (
        "::" in path
        or "test" in name
        or "spec" in name
        or parts[0].lower() in ("tests", "test", "spec", "specs", "e2e")
    )


def _pytest_runs(path: str) -> bool:
    """pytest can run ``path``: a Python test file (or node id), or a tests directory."""
    base = path.split("::")[0]
    if base.endswith(".py"):
        return "test" in base.rsplit("/", 1)[-1]
    return base.endswith("/") and base.split("/")[0] in ("tests", "test")


def _named_tests(text: str, paths: list[Entity]) -> list[Criterion]:
    """ "tests/test_api.py passes", "the tests in tests/api/ and tests/cli/ pass"."""
    found: list[Criterion] = []
    i = 0
    while i < len(paths):
        run = [paths[i]]
        while i + len(run) < len(paths) and _LIST_GLUE.match(
            text[run[-1].end : paths[i + len(run)].start]
        ):
            run.append(paths[i + len(run)])
        passes = _AFTER_PASSES.match(text, run[-1].end)
        if passes is None or not all(_names_tests(e.text) for e in run):
            i += len(run)
            continue
        before = _BEFORE_TESTS.search(text[max(0, run[0].start - 40) : run[0].start])
        start = run[0].start - (len(before.group(0)) if before else 0)
        names = [e.text for e in run]
        name = f"{names[0]} passes" if len(names) == 1 else f"{', '.join(names)} pass"
        why = f"the test command is pytest, which cannot run {', '.join(names)}"
        found.append(_stated(text, start, passes.end(), _tests_check(name, names), why))
        i += len(run)
    return found


def _whole_suite(text: str) -> list[Criterion]:
    """ "tests pass", "the test suite is green", "no test fails": the whole suite."""
    for pattern in (_TESTS_PASS, _TESTS_GREEN, _NO_TEST_FAILS):
        m = pattern.search(text)
        if m is not None:
            return [_stated(text, m.start(), m.end(), _tests_check("tests pass", []))]
    return []


# --- lint and types -------------------------------------------------------------------------

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


def _tools(text: str) -> list[Criterion]:
    found: list[Criterion] = []
    lint = _LINT.search(text)
    if lint is not None:
        check = _check(name="lint clean", run=LINT_COMMAND)
        found.append(_stated(text, lint.start(), lint.end(), check))
    mypy = _MYPY.search(text)
    if mypy is not None:
        strict = " --strict" if mypy.group(1) else ""
        check = _check(name="types check", run=f"mypy{strict} .")
        found.append(_stated(text, mypy.start(), mypy.end(), check))
    return found


# --- commands -------------------------------------------------------------------------------

_SUCCEEDS = (
    r"\s+" + _MODALS + r"(?:exits?\s+(?:with\s+)?(?:code\s+|status\s+)?0\b|returns?\s+0\b|"
    r"succeeds?\b|passes\b|works\b|runs\s+(?:cleanly|without\s+errors?)\b|is\s+clean\b|"
    r"is\s+green\b|completes\b)"
)
_COMMAND_OK = re.compile(_SUCCEEDS, re.IGNORECASE)
_COMMAND_FAILS = re.compile(
    r"\s+" + _MODALS + r"(?:exits?\s+(?:with\s+)?(?:code\s+|status\s+)?(?:[1-9]\d*|non-?zero)\b"
    r"|fails\b|returns?\s+(?:[1-9]\d*|non-?zero)\b)",
    re.IGNORECASE,
)
_COMMAND_PRINTS = re.compile(
    r"\s+" + _MODALS + r"(?P<neg>(?:does\s+not|doesn't|no\s+longer|never|must\s+not|should\s+not)"
    r"\s+)?(?:prints?|outputs?|shows?|says?|writes?|displays?|reports?|logs?)\s+(?:only\s+)?"
    r"(?:(?:the|a|an)\s+)?(?:(?:line|text|message|string|word|words|error|warning)\s+)?$",
    re.IGNORECASE,
)


def _commands(text: str, entities: list[Entity]) -> list[Criterion]:
    """Criteria on a command in backticks: it succeeds (in a time), fails, or prints a text."""
    found: list[Criterion] = []
    for i, e in enumerate(entities):
        if e.kind != "command":
            continue
        ok = _COMMAND_OK.match(text, e.end)
        if ok is not None:
            found.append(_succeeds(text, e.start, ok.end(), e.text))
            continue
        fails = _COMMAND_FAILS.match(text, e.end)
        if fails is not None:
            why = "a check passes when its command succeeds: say what must succeed"
            found.append(_stated(text, e.start, fails.end(), None, why))
            continue
        nxt = entities[i + 1] if i + 1 < len(entities) else None
        if nxt is None or nxt.kind not in _LITERALS:
            continue
        prints = _COMMAND_PRINTS.match(text[: nxt.start], e.end)
        if prints is not None:
            check = _prints_check(e.text, nxt.text, negated=prints.group("neg") is not None)
            found.append(_stated(text, e.start, nxt.end, check))
    return found


def _succeeds(text: str, start: int, end: int, command: str) -> Criterion:
    """ "COMMAND exits 0", with the time it may take when the request says it."""
    timeout = _TIMEOUT.match(text, end)
    limit = {"timeout": _seconds(timeout)} if timeout else {}
    return _stated(text, start, timeout.end() if timeout else end, _command_check(command, limit))


def _command_check(command: str, limit: dict[str, float]) -> CheckSpec | None:
    pytest = _PYTEST.match(command)
    if pytest is not None and not limit:
        paths = pytest.group(1).split()
        return _tests_check(f"{' '.join(paths)} passes" if paths else "tests pass", paths)
    return _check(name=f"{command} succeeds", run=command, **limit)


def _prints_check(command: str, literal: str, *, negated: bool) -> CheckSpec | None:
    grep = f"( {command} ) 2>&1 | grep -F -e {shlex.quote(literal)}"
    if negated:
        return _check(name=f'{command} does not print "{literal}"', run=f"! {grep}")
    return _check(name=f'{command} prints "{literal}"', run=grep)


_BARE_TOOL = (
    r"(?:pip3?\s+install|python3?\s+-[mc]|npm\s+(?:run|test|ci)|yarn|pnpm|cargo|"
    r"go\s+(?:test|build|vet)|docker\s+(?:build|compose)|tox|nox|uv\s+run|"
    r"terraform\s+(?:validate|plan|fmt)|"
    r"make(?=\s+(?!(?:the|it|sure|a|an|this|that|them|all|everything|these|those|tests?|"
    r"things?|stuff|ci|lint|build|every|each|our|my|your|its|their|some|more|less|no)\b)"
    r"[a-z]))"
)
_ARG = (
    r"(?:\s+(?!(?:and|or|both|then|must|should|still|also|on|in|with|without|when|if|"
    r"succeeds?|passes|pass|works|exits?|runs|returns?|is|are|completes)\b)"
    r"(?:'[^'\n]*'|\"[^\"\n]*\"|[\w./:=@+*-]+))"
)
_BARE_COMMAND = re.compile(
    r"\b(" + _BARE_TOOL + _ARG + r"{0,8})(?=" + _SUCCEEDS + r")", re.IGNORECASE
)


def _bare_commands(text: str, entities: list[Entity]) -> list[Criterion]:
    """ "pip install -e . succeeds", "make docs exits 0": a command written without
    backticks, when it starts with a known tool."""
    commands = [(e.start, e.end) for e in entities if e.kind == "command"]
    found: list[Criterion] = []
    for m in _BARE_COMMAND.finditer(text):
        if any(s < m.end(1) and m.start(1) < e for s, e in commands):
            continue
        ok = _COMMAND_OK.match(text, m.end(1))
        assert ok is not None  # the lookahead matched it
        found.append(_succeeds(text, m.start(), ok.end(), m.group(1)))
    return found


# --- files ----------------------------------------------------------------------------------

_AFTER_EXISTS = re.compile(
    r"\s+" + _MODALS + r"(?:exist|exists|be\s+(?:created|present|there)|is\s+(?:created|present|"
    r"there))\b",
    re.IGNORECASE,
)
_AFTER_GONE = re.compile(
    r"\s+" + _MODALS + r"(?:(?:does|do)\s+not\s+exist|doesn't\s+exist|not\s+exist|"
    r"no\s+longer\s+exists?|(?:is|are|be)\s+(?:gone|deleted|removed))\b",
    re.IGNORECASE,
)
_BEFORE_CREATE = re.compile(
    r"\b(?:create|add|write)\s+(?:a\s+|an\s+|the\s+)?(?:new\s+)?(?:file\s+)?$", re.IGNORECASE
)
_BEFORE_DELETE = re.compile(r"\b(?:delete|remove)\s+(?:the\s+)?(?:file\s+)?$", re.IGNORECASE)
_NOT_A_FILE_OF_ITS_OWN = re.compile(
    r"\s+(?:section|entry|heading|paragraph|line|example|badge)\b", re.IGNORECASE
)
_NOT_THE_FILE_DELETED = re.compile(r"\s+(?:from|in|of|inside|within)\b", re.IGNORECASE)
_WHICH_README = "which file: README.md, README.rst?"


def _is_file(path: str) -> bool:
    return not path.endswith("/") and "::" not in path and "*" not in path


def _imprecise(path: str) -> bool:
    """A name that is not the file's: "the README" is README.md, README.rst, ..."""
    return path == "README"


def _files_there(text: str, paths: list[Entity]) -> list[Criterion]:
    """ "README.md must exist", "create docs/cli.md", "legacy/auth.py is gone"."""
    found: list[Criterion] = []
    for e in paths:
        before = text[max(0, e.start - _NEAR) : e.start]
        exists = _AFTER_EXISTS.match(text, e.end)
        gone = _AFTER_GONE.match(text, e.end)
        own = _NOT_A_FILE_OF_ITS_OWN.match(text, e.end) is None
        said = exists or gone
        if _imprecise(e.text):
            if said is not None:
                found.append(_criterion(text, e.start, said.end(), None, _WHICH_README))
            continue
        if _is_file(e.text) and exists is not None:
            check = _check(name=f"{e.text} exists", file_exists=e.text)
            found.append(_stated(text, e.start, exists.end(), check))
        elif _is_file(e.text) and own and gone is None and _BEFORE_CREATE.search(before):
            check = _check(name=f"{e.text} exists", file_exists=e.text)
            found.append(_criterion(text, e.start, e.end, check))
        if "::" in e.text or "*" in e.text:
            continue
        if gone is not None:
            found.append(_stated(text, e.start, gone.end(), _absent_check(e.text)))
        elif own and _BEFORE_DELETE.search(before) and not _NOT_THE_FILE_DELETED.match(text, e.end):
            found.append(_criterion(text, e.start, e.end, _absent_check(e.text)))
    return found


def _absent_check(path: str) -> CheckSpec | None:
    target = path.rstrip("/")
    if _check(name="inside", file_exists=target) is None:  # outside the worktree
        return None
    return _check(name=f"{path} is gone", run=f"test ! -e {shlex.quote(target)}")


_CONTAINS = (
    r"(?:contains?|includes?|mentions?|says?|reads?|has|have|lists?|shows?|gets?|gains?|"
    r"ends?\s+with|starts?\s+with|begins?\s+with)"
)
_TEXT_NOUNS = (
    r"(?:(?:the|a|an|one)\s+)?(?:(?:new|exact|literal|following)\s+)?(?:(?:line|lines|text|"
    r"string|word|words|phrase|heading|entry|section|sentence|note|title|header|message|key|"
    r"value|name|comment|marker|link|row|item)\s+)?(?:(?:with|reading|saying|containing|"
    r"that\s+says|that\s+reads)\s+)?"
)
_FILE_THEN_TEXT = re.compile(
    r"^\s+(?:file\s+)?" + _MODALS + r"(?P<neg>(?:(?:does|do|must|should|will)\s+not|doesn't|"
    r"don't|no\s+longer|never|not)\s+)?(?:still\s+)?" + _CONTAINS + r"\s+" + _TEXT_NOUNS + r"$",
    re.IGNORECASE,
)
_TEXT_THEN_FILE = re.compile(
    r"^\s+(?:(?:is|are|must|should|will|now|also|still|then|does|do)\s+)*"
    r"(?:(?P<neg>(?:not|no\s+longer|never)\s+)?(?:appears?|shows?\s+up|occurs?|"
    r"(?:is|are|be)\s+(?:written|listed|mentioned|present|added|included|found))\s+"
    r"(?:in|inside|within|to)"
    r"|(?:is|are|be)\s+(?:in|inside|within)"
    r"|(?P<gone>(?:is|are|be)\s+(?:gone|removed|missing|deleted))\s+from)"
    r"\s+(?:the\s+)?(?:file\s+)?$",
    re.IGNORECASE,
)


def _file_texts(text: str, entities: list[Entity]) -> list[Criterion]:
    """ "CHANGES.md contains 'Fixed typo'", "'Fixed typo' appears in CHANGES.md", and
    "X must not mention 'Y'"."""
    found: list[Criterion] = []
    for i, e in enumerate(entities):
        if e.kind != "path" or not _is_file(e.text):
            continue
        for lit, negated in _texts_after(text, entities, i) + _texts_before(text, entities, i):
            start, end = min(e.start, lit.start), max(e.end, lit.end)
            if _imprecise(e.text):
                found.append(_criterion(text, start, end, None, _WHICH_README))
            else:
                check = _contains_check(e.text, lit.text, negated=negated)
                found.append(_stated(text, start, end, check))
    return found


def _texts_after(text: str, entities: list[Entity], i: int) -> list[tuple[Entity, bool]]:
    """The texts "PATH contains 'a' and 'b'" names after the path, and whether negated."""
    path, later = entities[i], entities[i + 1 :]
    if not later or later[0].kind not in _LITERALS:
        return []
    m = _FILE_THEN_TEXT.match(text[path.end : later[0].start])
    if m is None:
        return []
    texts = [later[0]]
    for nxt in later[1:]:  # "contains 'a' and 'b'", not "'b' appears in Y" nor "`cmd` prints"
        glued = _LIST_GLUE.match(text[texts[-1].end : nxt.start]) is not None
        if nxt.kind != "quote" or not glued or _OWN_VERB.match(text, nxt.end):
            break
        texts.append(nxt)
    return [(t, m.group("neg") is not None) for t in texts]


_OWN_VERB = re.compile(
    r"\s+(?:must|should|will|is|are|appears?|shows?|prints?|exists?|occurs?)\b", re.IGNORECASE
)


def _texts_before(text: str, entities: list[Entity], i: int) -> list[tuple[Entity, bool]]:
    """The text "'a' appears in PATH" names before the path, and whether negated."""
    if i == 0 or entities[i - 1].kind not in _LITERALS:
        return []
    lit, path = entities[i - 1], entities[i]
    m = _TEXT_THEN_FILE.match(text[lit.end : path.start])
    if m is None:
        return []
    return [(lit, m.group("neg") is not None or m.group("gone") is not None)]


def _contains_check(path: str, literal: str, *, negated: bool) -> CheckSpec | None:
    if not negated:
        return _check(
            name=f'{path} contains "{literal}"',
            file_contains=FileContains(path=path, pattern=_literal(literal)),
        )
    if _check(name="inside", file_exists=path) is None:  # outside the worktree
        return None
    quoted = shlex.quote(path)
    return _check(
        name=f'{path} does not contain "{literal}"',
        run=f"test -f {quoted} && ! grep -qF -e {shlex.quote(literal)} -- {quoted}",
    )


def _literal(text: str) -> str:
    """``text`` as a regular expression matching itself (readable: only metacharacters
    are escaped)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


# --- bounds of the change -------------------------------------------------------------------

_ONLY_CHANGE = re.compile(
    r"\bonly\s+(?:change|changes|edit|edits|touch|touches|modify|modifies|add|adds|update)\s+"
    r"(?:files?\s+)?(?:in\s+|under\s+)?$"
    r"|\b(?:nothing|no\s+files?|anything|everything)\s+outside\s+(?:of\s+)?$",
    re.IGNORECASE,
)
_PATH_ONLY = re.compile(r"\s+only\b", re.IGNORECASE)
_IN_BEFORE = re.compile(r"\b(?:in|to|under|inside)\s+$", re.IGNORECASE)
_DIFF_LIMIT = re.compile(
    r"\b(?:diff|patch|change(?:s|set)?)\b[^.;\n]{0,30}?\b(?:under|below|at\s+most|"
    r"no\s+more\s+than|less\s+than|within|max(?:imum)?(?:\s+of)?)\s+(\d+)\s+(?:changed\s+)?lines"
    r"|\b(?:at\s+most|no\s+more\s+than|under|less\s+than)\s+(\d+)\s+(?:changed\s+)?lines?\s+"
    r"(?:changed|of\s+diff)",
    re.IGNORECASE,
)


def _bounds(text: str, paths: list[Entity]) -> list[Criterion]:
    """ "only change app/ and README.md", "keep the diff under 50 lines"."""
    found: list[Criterion] = []
    allowed, (start, end) = _allowed_paths(text, paths)
    if allowed:
        globs = [p.rstrip("/") + "/**" if p.endswith("/") else p for p in allowed]
        check = _check(name="changes stay in " + ", ".join(allowed), no_changes_outside=globs)
        found.append(_criterion(text, start, end, check))
    limit = _DIFF_LIMIT.search(text)
    if limit is not None:
        n = int(limit.group(1) or limit.group(2))
        check = _check(name=f"at most {n} changed lines", max_diff_lines=n)
        found.append(_criterion(text, limit.start(), limit.end(), check))
    return found


def _allowed_paths(text: str, paths: list[Entity]) -> tuple[list[str], tuple[int, int]]:
    """Paths the request limits the change to ("only change X and Y", "in X only"), and
    where the first such list is."""
    allowed: list[str] = []
    span = (0, 0)
    for i, e in enumerate(paths):
        before = text[max(0, e.start - _NEAR) : e.start]
        starts_list = _ONLY_CHANGE.search(before) is not None
        in_only = _IN_BEFORE.search(before) is not None and _PATH_ONLY.match(text, e.end)
        if not (starts_list or in_only):
            continue
        run = [e]
        for nxt in paths[i + 1 :]:
            if not _LIST_GLUE.match(text[run[-1].end : nxt.start]):
                break
            run.append(nxt)
        if not allowed:
            span = (e.start, run[-1].end)
        for p in run:
            if p.text not in allowed:
                allowed.append(p.text)
    return allowed, span


# --- criteria no check in the worktree holds ------------------------------------------------

_CI = re.compile(
    r"\b(?:the\s+)?CI(?:'s)?(?:\s+[\w-]+){0,2}?\s+(?:must\s+|should\s+|still\s+)?"
    r"(?:passes|pass|is\s+green|succeeds|goes\s+green|green)\b"
)


def _elsewhere(text: str) -> list[Criterion]:
    why = "CI runs elsewhere: name the command it runs"
    return [_criterion(text, m.start(), m.end(), None, why) for m in _CI.finditer(text)]
