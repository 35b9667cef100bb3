"""Line-addressed chunks of a text file, following its structure where that is cheap.

- Python: one chunk per top-level function or class (with its decorators and the
  comments just above it); the module header (docstring, imports) is a chunk of its own.
  A class too long for one chunk is cut at its methods.
- Markdown: one chunk per heading section (headings inside code fences do not count).
- Anything else: windows of about ``WINDOW`` lines, cut at a blank line where possible.

Small neighbouring pieces are merged up to ``MERGE_LINES``; nothing is longer than
``MAX_LINES`` lines (or about ``MAX_CHARS`` characters, unless one line alone is longer).
Lines are numbered from 1 and ranges are inclusive. Each chunk carries ``symbols``: the
names it defines (functions, classes, headings), which the index weighs above body text.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate, pairwise
from pathlib import PurePath

MAX_LINES = 80
MAX_CHARS = 4000
MERGE_LINES = 30
WINDOW = 50

_LANGUAGES = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".adoc": "asciidoc",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".swift": "swift",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".cs": "csharp",
    ".rb": "ruby",
    ".php": "php",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".sql": "sql",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".scss": "css",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".ini": "ini",
    ".cfg": "ini",
    ".xml": "xml",
    ".lua": "lua",
    ".r": "r",
    ".scala": "scala",
    ".ex": "elixir",
    ".exs": "elixir",
    ".erl": "erlang",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".clj": "clojure",
    ".vim": "vim",
    ".tex": "latex",
}
_NAMES = {"makefile": "make", "dockerfile": "docker", "readme": "text", "license": "text"}


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    symbols: str


def language_of(path: PurePath) -> str:
    """A short language name from the file name (``python``, ``markdown``, ``text``...)."""
    return _LANGUAGES.get(path.suffix.lower()) or _NAMES.get(path.stem.lower(), "text")


def chunk_text(text: str, language: str) -> list[Chunk]:
    """Split ``text`` into chunks (see the module docstring); an empty text has none."""
    split = text.split("\n")
    if split and split[-1] == "":
        split.pop()
    if not split:
        return []
    lines = _Lines(split)
    if language == "python":
        spans, symbols = _python(text, lines)
    elif language == "markdown":
        spans, symbols = _markdown(lines)
    else:
        spans, symbols = _plain(lines, language)
    # Line n starts at offset ends[n - 1] + n - 1: each chunk's text is one slice.
    ends = lines.ends
    return [
        Chunk(s, e, text[ends[s - 1] + s - 1 : ends[e] + e - 1], symbols(s, e)) for s, e in spans
    ]


# --- shared -------------------------------------------------------------------------------

Span = tuple[int, int]  # first and last line, 1-based, inclusive


class _Lines(list[str]):
    """The lines of a text, with their cumulative lengths: a span's size costs O(1)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        self.ends = [0, *accumulate(map(len, lines))]

    def chars(self, span: Span) -> int:
        return self.ends[span[1]] - self.ends[span[0] - 1] + span[1] - span[0] + 1

    def blank(self, n: int) -> bool:
        line = self[n - 1]
        return not line or line.isspace()


def _trim(lines: _Lines, start: int, end: int) -> Span | None:
    """The span without blank lines at either edge; None when it is all blank."""
    while start <= end and lines.blank(start):
        start += 1
    while end >= start and lines.blank(end):
        end -= 1
    return (start, end) if start <= end else None


def _spans_between(lines: _Lines, cuts: list[int], start: int, end: int) -> list[Span]:
    """Trimmed spans from ``start`` to ``end``, cut before each line in ``cuts``."""
    bounds = [start, *(c for c in cuts if start < c <= end), end + 1]
    out = []
    for a, b in pairwise(bounds):
        span = _trim(lines, a, b - 1)
        if span:
            out.append(span)
    return out


def _too_big(lines: _Lines, span: Span) -> bool:
    n = span[1] - span[0] + 1
    return n > MAX_LINES or (n > 1 and lines.chars(span) > MAX_CHARS)


def _merge(lines: _Lines, spans: list[Span], limit: int = MERGE_LINES) -> list[Span]:
    """Merge neighbouring spans while the merged span stays within ``limit`` lines."""
    out: list[Span] = []
    for span in spans:
        if out and span[1] - out[-1][0] + 1 <= limit and not _too_big(lines, (out[-1][0], span[1])):
            out[-1] = (out[-1][0], span[1])
        else:
            out.append(span)
    return out


def _windows(lines: _Lines, span: Span) -> list[Span]:
    """Cut a long span into windows of about WINDOW lines, at a blank line when one is near."""
    out: list[Span] = []
    start, end = span
    while start <= end:
        stop, size = start, 0
        while stop <= end and stop - start < WINDOW:
            size += len(lines[stop - 1]) + 1
            if size > MAX_CHARS and stop > start:
                break
            stop += 1
        stop -= 1  # last line of this window
        if stop < end and stop - start + 1 >= WINDOW:
            for cut in range(stop, start + (2 * WINDOW) // 3, -1):
                if lines.blank(cut):
                    stop = cut
                    break
        piece = _trim(lines, start, stop)
        if piece:
            out.append(piece)
        start = stop + 1
    return out


Symbols = Callable[[int, int], str]  # the symbols of the chunk spanning these lines


# --- Python -------------------------------------------------------------------------------

_PY_NAME = re.compile(r"[ \t]*([A-Za-z_]\w*)")


def _python_defs(text: str) -> list[tuple[int, int, str]]:
    """Every ``def`` and ``class`` statement as (line, indentation, name), in order.

    ``str.find`` for the keywords, then a look at the start of the line, is several times
    faster than one regular expression over the whole text."""
    found: list[tuple[int, int, str]] = []
    find, rfind, match = text.find, text.rfind, _PY_NAME.match
    for keyword in ("def ", "class "):
        i = find(keyword)
        while i >= 0:
            start = rfind("\n", 0, i) + 1
            if start == i:
                indent = 0
            else:
                prefix = text[start:i]
                if not prefix.isspace():
                    head = prefix.lstrip()
                    if head.rstrip() != "async" or not head[5:].isspace():
                        i = find(keyword, i + 1)  # inside a line: not a statement
                        continue
                    prefix = prefix[: len(prefix) - len(head)]
                indent = len(prefix.expandtabs()) if "\t" in prefix else len(prefix)
            m = match(text, i + len(keyword))
            if m:
                found.append((i, indent, m.group(1)))
            i = find(keyword, i + 1)
    found.sort()
    out: list[tuple[int, int, str]] = []
    line, pos = 1, 0
    for i, indent, name in found:
        line += text.count("\n", pos, i)
        pos = i
        out.append((line, indent, name))
    return out


_DOCSTRING = re.compile(r"""\A(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*[rRuU]?("{3}|'{3}|"|')\s*([^\n]*)""")


def _python(text: str, lines: _Lines) -> tuple[list[Span], Symbols]:
    defs = _python_defs(text)
    # The first line of the module docstring names the module, as a heading would.
    doc = _DOCSTRING.match(text)
    summary = doc.group(2).split(doc.group(1))[0].strip() if doc else ""
    summary_line = text.count("\n", 0, doc.start(2)) + 1 if doc else 0
    at = [n for n, _, _ in defs]
    top = [(n, name) for n, i, name in defs if i == 0]
    top_at = [n for n, _ in top]

    def head(n: int, indent: int, floor: int) -> int:
        """Move a cut at line ``n`` up over the decorators and comments just above it."""
        while n - 1 > floor:
            above = lines[n - 2]
            stripped = above.lstrip()
            if stripped.startswith(("@", "#")) and len(above) - len(stripped) == indent:
                n -= 1
            else:
                break
        return n

    cuts: list[int] = []
    for n in top_at:
        cuts.append(head(n, 0, cuts[-1] if cuts else 0))
    spans: list[Span] = []
    for unit in _spans_between(lines, cuts, 1, len(lines)):
        if not _too_big(lines, unit):
            spans.append(unit)
            continue
        inner = [
            (n, i)
            for n, i, _ in defs[bisect_right(at, unit[0]) : bisect_right(at, unit[1])]
            if i > 0
        ]
        level = min((i for _, i in inner), default=0)
        inner_cuts: list[int] = []
        for n, i in inner:
            if i == level:
                inner_cuts.append(head(n, i, inner_cuts[-1] if inner_cuts else unit[0]))
        small: list[Span] = []
        for piece in _spans_between(lines, inner_cuts, unit[0], unit[1]):
            small.extend(_windows(lines, piece) if _too_big(lines, piece) else [piece])
        spans.extend(_merge(lines, small))
    spans = _merge(lines, spans)

    def symbols(s: int, e: int) -> str:
        names = [name for _, _, name in defs[bisect_left(at, s) : bisect_right(at, e)]]
        if summary and s <= summary_line <= e:
            names.insert(0, summary)
        # A piece of a long class that holds no top-level name is named after the class.
        first_top = bisect_left(top_at, s)
        if first_top > 0 and (first_top == len(top_at) or top_at[first_top] > e):
            names.insert(0, top[first_top - 1][1])
        return " ".join(dict.fromkeys(names))

    return spans, symbols


# --- Markdown -----------------------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _markdown(lines: _Lines) -> tuple[list[Span], Symbols]:
    cuts: list[int] = []
    titles: dict[int, str] = {}
    trail: list[tuple[int, str]] = []
    fence: str | None = None
    for n, line in enumerate(lines, start=1):
        f = _FENCE.match(line)
        if f:
            mark = f.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is not None:
            continue
        h = _HEADING.match(line)
        if h:
            level = len(h.group(1))
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, h.group(2))]
            titles[n] = " ".join(t for _, t in trail)
            cuts.append(n)
    spans: list[Span] = []
    for unit in _spans_between(lines, cuts, 1, len(lines)):
        spans.extend(_windows(lines, unit) if _too_big(lines, unit) else [unit])
    spans = _merge(lines, spans)

    def symbols(s: int, e: int) -> str:
        inside = [t for n, t in titles.items() if s <= n <= e]
        if not inside:
            before = [t for n, t in titles.items() if n < s]
            inside = before[-1:]
        return " ".join(inside)

    return spans, symbols


# --- anything else ------------------------------------------------------------------------

# Languages where a window has no definitions worth looking for.
_PROSE_OR_DATA = frozenset(
    {"text", "rst", "asciidoc", "json", "yaml", "toml", "ini", "xml", "html", "css", "latex"}
)
_GENERIC_DEF = re.compile(
    r"\b(?:function|func|fn|def|class|struct|interface|trait|enum|impl|module|type|sub)"
    r"[ \t]+\*?[ \t]*([A-Za-z_$][\w$]*)"
)


def _plain(lines: _Lines, language: str) -> tuple[list[Span], Symbols]:
    spans = _windows(lines, (1, len(lines)))

    def symbols(s: int, e: int) -> str:
        if language in _PROSE_OR_DATA:
            return ""
        text = "\n".join(lines[s - 1 : e])
        return " ".join(dict.fromkeys(m.group(1) for m in _GENERIC_DEF.finditer(text)))

    return spans, symbols
