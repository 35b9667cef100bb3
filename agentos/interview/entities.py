"""What a request names: paths, symbols, commands, quoted messages, errors, endpoints,
versions, quantities, HTTP statuses and exit codes, found by regular expressions on the raw
text.

The interview masks them before it stems the rest (:mod:`agentos.interview.reading`); its
checks and named tests are made from them (:mod:`agentos.interview.checks`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
