r"""Regular expressions written in cards and checks, matched by RE2 in linear time.

A card's regex is written by one person and run on text someone else chose: a request, or
a file an agent wrote (``file_contains``). Python's ``re`` backtracks, so ``(a+)+$``
against forty a's and a b runs for hours and holds the router with it. RE2 (the
``google-re2`` binding) never backtracks: a search takes time linear in the text, times
the size of the pattern, which is capped at :data:`MAX_PROGRAM` instructions.

The syntax is what both engines read. A pattern must compile in Python's ``re`` (the
router reads the literals a match needs off Python's parse, and lint reads the pattern's
shape there) and in RE2, so lookarounds, backreferences, possessive repeats, atomic groups
and comments are refused. Where the two differ in meaning: ``\d``, ``\w``, ``\s`` and
``\b`` are ASCII; ``\Z`` is RE2's ``\z`` (the end of the text); ``$`` also matches before
a final newline, as in Python.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterable, Sequence
from re import _constants as sre_c  # type: ignore[attr-defined]  # no public parser API
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

MAX_PROGRAM = 1000  # RE2 instructions: a 10,000-character search stays within milliseconds


def encode(text: str) -> bytes:
    """``text`` as RE2 reads it (UTF-8); a lone surrogate never raises, it matches nothing."""
    return text.encode("utf-8", "surrogatepass")


class Regex:
    """A compiled card or check regex. Thread-safe: RE2 objects are immutable."""

    __slots__ = ("_before_final_newline", "_rx", "pattern")

    def __init__(self, pattern: str, compiled: Any, before_final_newline: bool) -> None:
        self.pattern = pattern
        self._rx = compiled
        self._before_final_newline = before_final_newline

    def first(self, data: bytes) -> int | None:
        """The byte offset where the first match in ``data`` (see :func:`encode`) starts."""
        start = self._rx.Match(_UNANCHORED, data, 0, len(data))[0][0]
        if start < 0 and self._before_final_newline and data.endswith(b"\n"):
            # Python's `$` also matches before a final newline
            body = data[:-1]  # RE2 reads `$` at the end of the text given, not at endpos
            start = self._rx.Match(_UNANCHORED, body, 0, len(body))[0][0]
        return None if start < 0 else int(start)

    def search(self, text: str | bytes) -> bool:
        """Whether the pattern matches anywhere in ``text``."""
        return self.first(text if isinstance(text, bytes) else encode(text)) is not None


def _python_problem(pattern: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set": RE2's [[:alpha:]] is fine
            sre_parse.parse(pattern)  # what compiling adds, RE2 checks: parsing is enough
    except re.error as exc:
        return str(exc)
    except (RecursionError, OverflowError, ValueError) as exc:  # absurd nesting or counts
        return f"too complex to read: {exc.__class__.__name__}"
    return None


def _for_re2(pattern: str) -> str:
    r"""Python's ``\Z`` (end of the text) is RE2's ``\z``; RE2 has no ``\Z``."""
    if "\\Z" not in pattern:
        return pattern
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append("\\z" if pattern[i + 1] == "Z" else pattern[i : i + 2])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


# The binding's compiled core, used directly: its re-like wrapper costs five times the
# compile itself per pattern, and keeps only the last 128 patterns.
_re2: Any = None
_OPTIONS: Any = None
_UNANCHORED: Any = None


def _re2_compile(pattern: str, multiline: bool) -> Any:
    """The RE2 object, or the error RE2 gives (a str)."""
    global _re2, _OPTIONS, _UNANCHORED
    if _re2 is None:
        from re2 import _re2 as core  # google-re2: only loaded when a regex is compiled

        options = core.RE2.Options()
        options.log_errors = False  # RE2 would print every refused pattern on stderr
        options.never_capture = True  # only whether and where it matches is ever asked
        _OPTIONS, _UNANCHORED, _re2 = options, core.RE2.Anchor.UNANCHORED, core
    source = ("(?m)" if multiline else "") + _for_re2(pattern)
    compiled = _re2.RE2(source.encode("utf-8", "surrogatepass"), _OPTIONS)
    if not compiled.ok():
        error = compiled.error()
        return error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    return compiled


def _build(pattern: str, multiline: bool) -> Regex | str:
    problem = _python_problem(pattern)
    if problem is not None:
        return problem
    compiled = _re2_compile(pattern, multiline)
    if isinstance(compiled, str):
        return (
            f"not supported by RE2, which matches in linear time ({compiled}); "
            "lookarounds, backreferences, possessive repeats and atomic groups are not"
        )
    size = compiled.ProgramSize()
    if size > MAX_PROGRAM:
        return (
            f"too large: {size} RE2 instructions, over the {MAX_PROGRAM} that keep a search "
            "fast; use smaller counted repeats ({n}) or fewer alternatives"
        )
    ends_at_newline = not multiline and "$" in pattern and "\\Z" not in pattern
    return Regex(pattern, compiled, ends_at_newline)


@functools.lru_cache(maxsize=4096)
def _cached(pattern: str, multiline: bool) -> Regex | str:
    return _build(pattern, multiline)


def problem(pattern: str, *, multiline: bool = False) -> str | None:
    """Why ``pattern`` cannot be a card or check regex, or None when it can."""
    found = _cached(pattern, multiline)
    return found if isinstance(found, str) else None


def compile(pattern: str, *, multiline: bool = False) -> Regex:
    """The compiled pattern (cached); ``ValueError`` says why when it cannot be one.
    ``multiline``: ``^`` and ``$`` match at every line, as ``re.MULTILINE``."""
    found = _cached(pattern, multiline)
    if isinstance(found, str):
        raise ValueError(found)
    return found


# --- what lint warns about: catastrophic backtracking -------------------------------------

_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)}
_ONE_CHAR = {sre_c.LITERAL, sre_c.NOT_LITERAL, sre_c.ANY, sre_c.IN, sre_c.CATEGORY}
# The characters a pattern's pieces are compared on: ASCII and a few others of each kind.
_PROBE = tuple(chr(c) for c in range(1, 128)) + tuple("éßſ\u212a\u00a0٣😀")
_MANY = 10  # a repeat up to this many times or more is treated as unbounded


class _Shape:
    """First, last and repeated characters of parsed pieces, over :data:`_PROBE`."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def chars(self, op: Any, av: Any) -> frozenset[str]:
        from re import _compiler  # type: ignore[attr-defined]

        sub = sre_parse.SubPattern(self.state, [(op, av)])
        try:
            one = _compiler.compile(sub, self.state.flags)
        except (re.error, RecursionError, ValueError, TypeError):
            return frozenset(_PROBE)
        return frozenset(c for c in _PROBE if one.fullmatch(c))

    def nullable(self, items: Iterable[tuple[Any, Any]]) -> bool:
        return all(self._nullable(op, av) for op, av in items)

    def _nullable(self, op: Any, av: Any) -> bool:
        if op in _REPEATS:
            return bool(av[0] == 0 or self.nullable(av[2]))
        if op is sre_c.SUBPATTERN:
            return self.nullable(av[3])
        if op is sre_c.BRANCH:
            return any(self.nullable(b) for b in av[1])
        return op not in _ONE_CHAR

    def edge(self, items: Sequence[tuple[Any, Any]], last: bool) -> frozenset[str]:
        """The characters a match of ``items`` can start with (or end with: ``last``)."""
        out: set[str] = set()
        for op, av in reversed(items) if last else items:
            out |= self._edge(op, av, last)
            if not self._nullable(op, av):
                break
        return frozenset(out)

    def _edge(self, op: Any, av: Any, last: bool) -> frozenset[str]:
        if op in _REPEATS:
            return self.edge(av[2], last)
        if op is sre_c.SUBPATTERN:
            return self.edge(av[3], last)
        if op is sre_c.BRANCH:
            return frozenset().union(*(self.edge(b, last) for b in av[1]))
        if op in _ONE_CHAR:
            return self.chars(op, av)
        return frozenset()

    def ambiguous(self, body: Sequence[tuple[Any, Any]]) -> bool:
        """Whether repeating ``body`` lets one text split into iterations in many ways:
        a repeat inside it can take over characters that end one iteration and start the
        next (``(a+)+``, ``(\\w+\\s?)*``, ``(.*a){20}``), an optional part at its end can
        start like the next iteration (``(a|aa)+``), or two alternatives match alike
        (``(a|a)*``, ``(ab|cd|ab)*``)."""
        while len(body) == 1 and body[0][0] is sre_c.SUBPATTERN:
            body = body[0][1][3]
        if len(body) == 1 and body[0][0] is sre_c.BRANCH:
            starts = [self.edge(b, False) for b in body[0][1][1]]
            if any(a & b for i, a in enumerate(starts) for b in starts[i + 1 :]):
                return True
        first, last = self.edge(body, False), self.edge(body, True)
        for k, (op, av) in enumerate(body):
            if op in _REPEATS and av[1] > 1:
                inner = self.edge(av[2], False) | self.edge(av[2], True)
                if inner & first & last:
                    return True
            if op is sre_c.BRANCH and sum(self.nullable(b) for b in av[1]) > 1:
                return True
            if self._nullable(op, av):  # an optional part
                if self.nullable(body[k + 1 :]) and self._edge(op, av, False) & first:
                    return True
                if self.nullable(body[:k]) and self._edge(op, av, True) & last:
                    return True
        return False

    def find(self, items: Sequence[tuple[Any, Any]]) -> bool:
        for op, av in items:
            if op in _REPEATS:
                if (av[1] >= _MANY or av[1] == sre_c.MAXREPEAT) and self.ambiguous(av[2]):
                    return True
                if self.find(av[2]):
                    return True
            elif op is sre_c.SUBPATTERN:
                if self.find(av[3]):
                    return True
            elif op is sre_c.BRANCH and any(self.find(b) for b in av[1]):
                return True
        return False


def hazard(pattern: str) -> str | None:
    """Why ``pattern`` would backtrack catastrophically in Python's ``re`` (or any
    backtracking engine), or None. AgentOS itself matches it with RE2, in linear time."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(pattern)
        found = _Shape(tree.state).find(list(tree))
    except (re.error, RecursionError, ValueError, OverflowError):
        return None
    if not found:
        return None
    return (
        "repeats a part that can split the same text in many ways (like (a+)+ or (a|ab)*): "
        "exponential time in a backtracking engine such as Python's re; AgentOS matches "
        "it with RE2 in linear time, but simplify it"
    )
