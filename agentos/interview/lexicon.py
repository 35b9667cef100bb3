"""Word lists and patterns the interview engine reads a request with.

Phrases are written as plain English and compared as Porter stems (through
:mod:`agentos.shared.text`), so "tests pass", "test passes" and "testing passed" meet. Patterns
that need punctuation (paths, symbols, quoted messages) are regular expressions on the raw
text. Everything here is data: the scoring lives in :mod:`agentos.interview.engine`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from agentos.shared.text import stem_phrase, stems

# --- entities: what the request names ------------------------------------------------------

_EXT = (
    "py|pyi|md|rst|txt|yaml|yml|json|toml|cfg|ini|lock|csv|tsv|sql|sh|bash|zsh|ps1|js|mjs|cjs|"
    "ts|tsx|jsx|vue|svelte|html|htm|css|scss|less|rs|go|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|"
    "m|scala|lua|pl|r|ipynb|xml|proto|graphql|tf|env|conf|log|spec\\.ts|test\\.ts"
)
_NAMED_FILES = "Dockerfile|Makefile|Procfile|Jenkinsfile|Vagrantfile|Gemfile|LICENSE|README"

# Order matters: earlier kinds claim their span first.
ENTITY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("code", re.compile(r"`([^`\n]+)`")),
    (
        "quote",
        re.compile(
            r"\"([^\"\n]{2,})\"|(?<![\w'])'([^'\n]+?)'(?![\w])"
            r"|\u201c([^\u201d\n]{2,})\u201d|\u2018([^\u2019\n]+?)\u2019(?![\w])"  # curly quotes
        ),
    ),
    (
        "endpoint",
        re.compile(
            r"\b(?:GET|POST|PUT|PATCH|DELETE|HEAD)\s+/[\w{}:./-]*|(?<![\w./])/(?:api|v\d)[\w{}:./-]*"
        ),
    ),
    (
        "path",
        re.compile(
            rf"(?<![\w/.-])(?:\.{{0,2}}/)?(?:[\w.-]+/)+(?:[\w.*-]+(?:::\w+)?)?/?(?![\w])"
            rf"|(?<![\w/.-])[\w-]*\.?[\w-]+\.(?:{_EXT})(?:::\w+)?(?![\w])"
            rf"|\b(?:{_NAMED_FILES})\b"
        ),
    ),
    ("error", re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)\b|\bTraceback\b")),
    (
        "symbol",
        re.compile(
            r"\b[A-Za-z_][\w.]*\(\)?"  # route(), Orchestrator.run(
            r"|\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b"  # logging.getLogger, Settings.interval
            r"|\b[a-z]\w*_\w+\b|\b_\w+\b"  # snake_case, _private
            r"|\b[A-Z][a-z0-9]+[A-Z]\w*\b"  # CamelCase
            r"|\b[A-Z]{2,}[a-z]\w*\b"  # FTS5tokenizer-ish, HTTPServer
            r"|(?<![\w-])--?[a-z][\w-]*"
        ),
    ),  # --json, -k
    (
        "version",
        re.compile(
            r"\b[vV]?\d+\.\d+(?:\.\d+)?(?:\.x)?\b|\b(?:python|py|node|go|java)\s*\d+(?:\.\d+)*\b",
            re.IGNORECASE,
        ),
    ),
    (
        "quantity",
        re.compile(
            r"\b\d+(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|minutes?|mins?|hours?|h|"
            r"lines?|%|percent|kb|mb|gb|k|items?|rows?|attempts?|retries|times|runs|chars?|"
            r"characters|requests?|calls?|bytes?|x)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "status",
        re.compile(
            r"(?:\b(?:returns?|returning|respond(?:s|ing)?(?: with)?|status(?: code)?|http|"
            r"get|gets|got|with|a|an)\s+)([1-5]\d\d)\b|\b([45]\d\d)\s+(?:error|response|status)",
            re.IGNORECASE,
        ),
    ),
    (
        "exit",
        re.compile(r"\bexit(?:s|ing)?(?:\s+(?:code|status))?\s+(?:with\s+)?\d+\b", re.IGNORECASE),
    ),
)

# Words that look like symbols or paths to the patterns above but are plain prose.
NOT_SYMBOLS = frozenset(
    {
        "e.g",
        "i.e",
        "etc.",
        "e.g.",
        "i.e.",
        "vs.",
        "a.k.a",
        "and/or",
        "input/output",
        "i/o",
        "read/write",
        "on/off",
        "yes/no",
        "pass/fail",
        "true/false",
        "client/server",
        "n/a",
        "-",
        "--",
        "-e",
        "-c",
        "-m",
        "-q",
        "-k",
    }
)

# Commands whose presence in backticks marks a runnable command, not a symbol.
COMMANDS = (
    "agentos ",
    "python ",
    "python3 ",
    "pytest",
    "ruff",
    "mypy",
    "git ",
    "npm ",
    "npx ",
    "pip ",
    "docker ",
    "make",
    "cargo ",
    "go ",
    "uv ",
    "node ",
    "yarn ",
    "pnpm ",
    "curl ",
    "bash ",
    "sh ",
    "./",
    "guardian ",
)


@dataclass(frozen=True)
class Entity:
    kind: str  # code, command, quote, endpoint, path, error, symbol, version, quantity, ...
    text: str
    start: int
    end: int


def find_entities(text: str) -> list[Entity]:
    """Named things in ``text``, in order of appearance; no two spans overlap."""
    taken: list[tuple[int, int]] = []
    found: list[Entity] = []
    for kind, pattern in ENTITY_PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span()
            value = next((g for g in m.groups() if g), m.group(0)) if m.groups() else m.group(0)
            if kind == "status":  # "returns 404": only the number is the entity
                start, end = m.span(1) if m.group(1) else m.span(2)
            value = value.strip()
            if kind != "code":  # "README.md." ends a sentence; `go test ./...` keeps its dots
                value = value.rstrip(".,;:")
            if not value or value.lower() in NOT_SYMBOLS:
                continue
            if kind == "path" and not _plausible_path(value):
                continue
            if kind == "symbol" and not _plausible_symbol(value):
                continue
            if any(s < end and start < e for s, e in taken):
                continue
            named = kind
            if kind == "code":
                named = "command" if value.lower().startswith(COMMANDS) else "symbol"
                if "/" in value and " " not in value and _plausible_path(value):
                    named = "path"
            taken.append((start, end))
            found.append(Entity(named, value, start, end))
    found.sort(key=lambda e: e.start)
    return found


def _plausible_path(value: str) -> bool:
    if value.lower() in NOT_SYMBOLS or value.startswith("//"):
        return False
    if "/" in value:
        parts = [p for p in value.split("/") if p and p not in (".", "..")]
        if not parts:
            return False
        # "1s/2s/4s" or "502/503" are not paths; "and/or" is prose.
        if all(re.fullmatch(r"[\d.]+[a-z]{0,2}", p) for p in parts):
            return False
        return not (
            len(parts) == 2
            and all(p.isalpha() and p.islower() and len(p) <= 6 for p in parts)
            and not value.endswith("/")
        )
    return True


def _plausible_symbol(value: str) -> bool:
    if value.endswith(("(", "()")):
        # "hangs (infinite" is prose in parentheses; "route(" is a call.
        return value[:-1].rstrip("(") != "" and not re.fullmatch(r"[a-z]+\(", value)
    if value.startswith("-"):
        return len(value) > 2 or value in ("-k", "-q", "-o", "-n")
    return not re.fullmatch(r"\d[\w.]*", value)


# --- phrase lists -------------------------------------------------------------------------

# Action verbs by how much they say on their own.
STRONG_VERBS = (
    "add",
    "remove",
    "delete",
    "rename",
    "fix",
    "implement",
    "create",
    "write",
    "replace",
    "migrate",
    "convert",
    "extract",
    "split",
    "merge",
    "move",
    "bump",
    "upgrade",
    "downgrade",
    "validate",
    "reject",
    "raise",
    "return",
    "translate",
    "document",
    "sort",
    "order",
    "paginate",
    "retry",
    "expose",
    "deprecate",
    "introduce",
    "port",
    "revert",
    "install",
    "configure",
    "parse",
    "generate",
    "hide",
    "allow",
    "prevent",
    "forbid",
    "inline",
    "drop",
    "pin",
    "enable",
    "disable",
    "switch",
    "set",
    "quote",
    "escape",
    "encode",
    "decode",
    "serialize",
    "normalize",
    "handle",
    "show",
    "print",
    "log",
    "emit",
    "store",
    "index",
    "cache",
    "limit",
    "restrict",
    "require",
    "default",
    "test",
    "cover",
    "wrap",
    "register",
    "restore",
    "stream",
    "cap",
    "detect",
    "report",
    "persist",
    "load",
    "save",
    "send",
    "skip",
    "ignore",
    "filter",
    "group",
    "format",
    "render",
    "display",
    "center",
    "align",
    "resize",
    "redirect",
    "roll back",
    "batch",
    "dedupe",
    "deduplicate",
    "guard",
    "catch",
    "reuse",
    "inject",
    "lock",
    "flush",
    "close",
    "reset",
    "clear",
    "trim",
    "strip",
    "truncate",
    "shorten",
    "throttle",
    "debounce",
    "schedule",
    "notify",
    "warn",
    "abort",
    "cancel",
    "restart",
    "position",
    "lower",
    "shrink",
    "reorder",
    "annotate",
    "type",
    "benchmark",
    "profile",
    "measure",
    "escape",
    "sanitize",
    "encrypt",
    "hash",
    "sign",
    "verify",
    "compress",
)
MEDIUM_VERBS = (
    "change",
    "update",
    "refactor",
    "rewrite",
    "speed up",
    "reduce",
    "increase",
    "support",
    "make",
    "treat",
    "use",
    "build",
    "ship",
    "simplify",
    "harden",
    "secure",
)
WEAK_VERBS = (
    "improve",
    "optimize",
    "optimise",
    "clean",
    "clean up",
    "tidy",
    "look",
    "look into",
    "check",
    "investigate",
    "help",
    "do",
    "tweak",
    "enhance",
    "polish",
    "modernize",
    "modernise",
    "work on",
    "deal with",
    "sort out",
    "figure out",
    "touch up",
    "rework",
    "redo",
    "revamp",
    "address",
)

# Objects that point at nothing.
PRONOUNS = (
    "it",
    "this",
    "that",
    "them",
    "these",
    "those",
    "something",
    "anything",
    "everything",
    "stuff",
    "things",
    "thing",
    "whatever",
    "all",
    "everywhere",
)

# Objects so generic they name nothing in particular.
GENERIC_OBJECTS = (
    "bug",
    "bugs",
    "issue",
    "issues",
    "problem",
    "problems",
    "code",
    "app",
    "codebase",
    "project",
    "feature",
    "features",
    "change",
    "changes",
    "fix",
    "system",
    "thing",
    "things",
    "stuff",
    "part",
    "parts",
)

# Words that name no target or standard.
VAGUE = (
    "better",
    "nicer",
    "cleaner",
    "prettier",
    "good",
    "great",
    "nice",
    "stuff",
    "things",
    "thing",
    "everything",
    "somehow",
    "something",
    "whatever",
    "etc",
    "properly",
    "some",
    "maintainable",
    "robust",
    "reliable",
    "faster",
    "slow",
    "messy",
    "kind of",
    "sort of",
    "a bit",
    "issue",
    "problem",
    "modern",
    "best",
    "proper",
    "ugly",
    "weird",
    "sometimes",
    "smart",
    "pythonic",
    "asap",
    "probably",
    "maybe",
    "bunch",
    "various",
    "misc",
    "general",
    "overall",
    "smarter",
    "simpler",
    "sexy",
    "as needed",
    "if needed",
    "and so on",
    "or something",
    "work",
    "the thing",
)

DETERMINERS = (
    "the",
    "a",
    "an",
    "our",
    "my",
    "your",
    "its",
    "their",
    "this",
    "that",
    "all",
    "every",
    "each",
    "any",
    "some",
    "more",
    "new",
    "existing",
    "current",
    "please",
)

STOPWORDS = frozenset(
    (
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "we",
        "you",
        "i",
        "me",
        "my",
        "our",
        "your",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "do",
        "does",
        "did",
        "done",
        "not",
        "no",
        "so",
        "than",
        "too",
        "very",
        "just",
        "also",
        "please",
        "about",
        "up",
        "down",
        "out",
        "over",
        "under",
        "again",
        "once",
        "all",
        "any",
        "each",
        "every",
        "some",
        "such",
        "only",
        "own",
        "same",
        "both",
        "few",
        "more",
        "most",
        "other",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "why",
        "how",
        "has",
        "have",
        "had",
        "having",
        "s",
        "t",
        "don",
        "doesn",
        "isn",
        "aren",
        "wasn",
        "won",
        "let",
        "us",
        "get",
        "got",
    )
)

# Scope: words that name an area of code, and words that name all of it.
AREA_NOUNS = (
    "module",
    "function",
    "method",
    "class",
    "handler",
    "endpoint",
    "route",
    "view",
    "page",
    "form",
    "template",
    "component",
    "command",
    "subcommand",
    "option",
    "flag",
    "job",
    "service",
    "table",
    "column",
    "schema",
    "migration",
    "script",
    "workflow",
    "pipeline",
    "file",
    "test",
    "fixture",
    "parser",
    "lexer",
    "router",
    "model",
    "config",
    "setting",
    "field",
    "package",
    "library",
    "directory",
    "folder",
    "api",
    "cli",
    "query",
    "index",
    "controller",
    "middleware",
    "daemon",
    "worker",
    "queue",
    "hook",
    "plugin",
    "screen",
    "dialog",
    "button",
    "menu",
    "header",
    "footer",
    "sidebar",
    "section",
    "docstring",
    "changelog",
    "readme",
    "dependency",
    "manifest",
    "receipt",
    "card",
    "hub",
    "guardian",
    "orchestrator",
    "gate",
    "check",
    "runtime",
    "session",
    "worktree",
    "store",
    "database",
    "db",
    "server",
    "client",
    "frontend",
    "backend",
    "signup",
    "login",
    "logout",
    "export",
    "import",
    "report",
    "dashboard",
    "cron",
    "webhook",
    "validator",
    "serializer",
    "version",
)
WHOLE_SCOPE = (
    "everything",
    "everywhere",
    "whole codebase",
    "entire codebase",
    "the codebase",
    "all the code",
    "the code",
    "the app",
    "the project",
    "the whole thing",
    "the system",
    "all files",
    "every file",
    "the repo",
    "the whole",
    "all of it",
    "the entire",
)

# Constraints: what must not change, and limits.
CONSTRAINTS = (
    "only",
    "do not",
    "don't",
    "dont",
    "must not",
    "mustn't",
    "should not",
    "shouldn't",
    "never",
    "without",
    "keep",
    "preserve",
    "unchanged",
    "untouched",
    "no other",
    "nothing else",
    "no change",
    "no changes",
    "no behaviour change",
    "no behavior change",
    "pure refactor",
    "backward compatible",
    "backwards compatible",
    "compatible",
    "at most",
    "no more than",
    "at least",
    "identical",
    "stay the same",
    "stays the same",
    "same",
    "untouched",
    "alone",
    "as they are",
    "as it is",
    "avoid",
    "must stay",
    "still",
    "byte for byte",
    "no new",
    "not change",
    "not touch",
    "outside",
    "budget",
    "maximum",
    "minimum",
)
LIMIT_RE = re.compile(
    r"\b(?:under|below|within|less than|fewer than|more than|at most|at least|max(?:imum)?|"
    r"min(?:imum)?|up to|no more than|limit(?:ed)? to)\s+\d",
    re.IGNORECASE,
)

# Context: errors seen, current versus expected behaviour, reasons, reproduction.
SYMPTOMS = (
    "crash",
    "crashes",
    "hang",
    "hangs",
    "freeze",
    "froze",
    "fail",
    "fails",
    "failing",
    "traceback",
    "exception",
    "raises",
    "raising",
    "throws",
    "error",
    "errors",
    "warns",
    "warning",
    "refuses",
    "leaks",
    "leaves",
    "timeout",
    "times out",
    "segfault",
    "flaky",
    "deadlock",
    "corrupt",
    "broken",
    "wrong",
    "incorrect",
    "missing",
    "duplicate",
    "loop",
    "stuck",
    "slow",
    "prints",
    "exits",
    "accepts",
    "ignores",
    "differs",
    "killed",
    "oom",
    "out of memory",
    "overflow",
    "overflows",
    "off-screen",
    "floods",
    "blocks",
    "loses",
    "drops",
    "breaks",
    "panics",
    "rejects",
    "times out",
)
CURRENT_EXPECTED = (
    "currently",
    "right now",
    "at the moment",
    "today",
    "now",
    "instead",
    "instead of",
    "even when",
    "even though",
    "even if",
    "expected",
    "expects",
    "actual",
    "actually",
    "used to",
    "regression",
    "since",
    "but",
    "however",
    "should",
    "whereas",
    "while",
    "nothing imports",
    "no longer",
    "still",
)
REASONS = (
    "because",
    "so that",
    "in order to",
    "since",
    "due to",
    "as",
    "which",
    "deprecated",
    "users",
    "user",
    "customers",
    "team",
    "we need",
    "we want",
    "requirement",
    "so that",
    "think",
    "complain",
    "needs",
    "expects",
    "breaks",
)
REPRODUCE = (
    "when",
    "steps",
    "step",
    "reproduce",
    "run",
    "after",
    "with input",
    "on input",
    "given",
    "whenever",
    "if",
)
BUG_WORDS = (
    "fix",
    "bug",
    "broken",
    "crash",
    "error",
    "fail",
    "issue",
    "problem",
    "wrong",
    "doesn't work",
    "does not work",
    "not working",
    "hang",
    "flaky",
)

# Success: how we will know it is done.
ACCEPTANCE = (
    "done when",
    "acceptance",
    "accept",
    "definition of done",
    "must pass",
    "should pass",
    "pass",
    "passes",
    "green",
    "succeed",
    "succeeds",
    "exit 0",
    "exits 0",
    "exit code",
    "validates",
    "must match",
    "match",
    "must exist",
    "must contain",
    "is gone",
    "are gone",
    "returns",
    "should return",
    "must return",
    "respond with",
    "responds with",
    "shows",
    "prints",
    "outputs",
    "works",
    "contains",
    "so that",
    "verified",
    "assert",
    "test checks",
    "the figure",
    "benchmark",
    "coverage",
    "no errors",
    "no warnings",
    "lint clean",
    "is clean",
    "expected",
    "must get",
    "renders",
    "displays",
    "appears",
)
TEST_WORDS = (
    "test",
    "tests",
    "regression test",
    "unit test",
    "pytest",
    "test suite",
    "spec",
    "e2e",
    "benchmark",
)
EXPECTED_WORDS = ("should", "must", "expected", "instead", "will", "needs to", "has to")

# Read-only requests: verbs that ask for an answer and change nothing by themselves. "show"
# alone is not one ("show the error under the form" changes a page); "show me" is.
READ_VERBS = (
    "run",
    "rerun",
    "report",
    "list",
    "explain",
    "review",
    "check",
    "audit",
    "find",
    "find out",
    "summarise",
    "summarize",
    "describe",
    "tell",
    "tell me",
    "tell us",
    "inspect",
    "analyse",
    "analyze",
    "investigate",
    "look",
    "look at",
    "look into",
    "look over",
    "take a look",
    "have a look",
    "read",
    "count",
    "compare",
    "diagnose",
    "identify",
    "locate",
    "trace",
    "search",
    "grep",
    "measure",
    "benchmark",
    "profile",
    "verify",
    "confirm",
    "assess",
    "evaluate",
    "examine",
    "walk me through",
    "go through",
    "point out",
    "figure out",
    "determine",
    "give me",
    "answer",
    "outline",
)
# What a read verb may ask to find without naming which: "list the problems", "find bugs".
FINDABLE = (
    "bug",
    "bugs",
    "issue",
    "issues",
    "problem",
    "problems",
    "error",
    "errors",
    "mistake",
    "mistakes",
    "typo",
    "typos",
    "failure",
    "failures",
    "warning",
    "warnings",
    "smell",
    "smells",
    "risk",
    "risks",
    "vulnerability",
    "vulnerabilities",
    "todo",
    "todos",
)
# Read verbs that say little on their own ("take a look"): weak, like "look".
VAGUE_READS = ("look at", "look over", "take a look", "have a look", "go through")
# Verbs that ask for an answer only when these words follow: "show me", "show which tests fail".
READ_ONLY_AFTER = {"show": ("me", "us", "what", "which", "how", "where", "why", "whether")}
# A read verb followed by one of these asks about what follows: "explain how routing works".
WH_WORDS = ("what", "which", "why", "how", "where", "who", "whose", "whether", "when", "if", "that")
# A sentence opening with one of these asks a question ("which tests fail?"); the auxiliary
# verbs count only in a sentence that ends with a question mark.
QUESTION_WORDS = ("what", "which", "why", "how", "where", "who", "whose", "whether")
QUESTION_AUX = ("is", "are", "does", "do", "did", "has", "have", "was", "were")
# Words right before a verb that take it back: "don't fix it", "never touch", "no need to".
NEGATIONS = ("not", "never", "dont", "no need to", "without")
# What "run" changes when it runs one of these ("run black on src/", "ruff check --fix").
WRITING_RUNS = (
    "black",
    "isort",
    "prettier",
    "autopep8",
    "autoflake",
    "pyupgrade",
    "formatter",
    "format",
    "fix",
    "migration",
    "migrate",
    "install",
    "upgrade",
    "deploy",
    "commit",
    "push",
    "apply",
    "codemod",
    "generate",
    "publish",
    "release",
)
# "X should be fixed", "the parser needs fixing", "I want it removed": a change without an
# imperative verb.
CHANGE_WANTED_RE = re.compile(
    r"\b(?:should|must|needs?\s+to|has\s+to|have\s+to|ought\s+to|to)\s+be\s+(?:\w+\s+)?"
    r"(?:fixed|changed|updated|removed|deleted|renamed|added|rewritten|refactored|replaced|"
    r"moved|implemented|created|written|corrected|cleaned(?:\s+up)?|improved|converted|"
    r"migrated|bumped|upgraded|edited|modified|patched|reverted|dropped)\b"
    r"|\bneeds?\s+(?:fixing|changing|updating|removing|renaming|rewriting|refactoring|"
    r"a\s+fix)\b"
    r"|\b(?:want|need|like)\s+(?:\w+\s+){1,3}(?:fixed|changed|updated|removed|deleted|"
    r"renamed|added|rewritten|refactored|replaced|implemented|cleaned\s+up)\b",
    re.IGNORECASE,
)
# An answer written into the code or its docs is a change: "explain the regex in a comment".
WRITES_INTO_RE = re.compile(
    r"\b(?:in|into|to|as)\s+(?:(?:a|an|the|its|their)\s+)?(?:new\s+)?(?:code\s+)?(?:comments?|"
    r"docstrings?|readme|docs|documentation|changelog|wiki|release\s+notes)\b",
    re.IGNORECASE,
)
# Words that say the request is read-only.
READ_ONLY_SAID_RE = re.compile(
    r"\bread[\s-]only\b|\bwithout\s+(?:changing|modifying|touching|editing)\s+"
    r"(?:anything|any\s+(?:code|files?)|the\s+code)\b|\b(?:do\s+not|don'?t|never)\s+(?:change|"
    r"modify|touch|edit|fix)\s+(?:anything|any\s+(?:code|files?)|the\s+code)\b"
    r"|\b(?:make|with)\s+no\s+(?:code\s+)?changes\b",
    re.IGNORECASE,
)


# --- matching -----------------------------------------------------------------------------


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
