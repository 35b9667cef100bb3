"""The interview's questions: one per weak axis, naming what the request lacks.

Each question quotes the request's own words ("“make it better” has no object", "You mention
“router”") and, for the scope, the files the knowledge store finds for it. A read-only
request is asked where to look and what to report, never which files to change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from agentos.interview import lexicon as lex
from agentos.interview.reading import PRONOUNS, Reading, actions

MAX_CANDIDATES = 5


def first_candidates(request: str, candidates: Callable[[str], list[str]] | None) -> list[str]:
    if candidates is None:
        return []
    seen: dict[str, None] = {}
    for path in candidates(request):
        seen.setdefault(path, None)
    return list(seen)[:MAX_CANDIDATES]


def _quoted(items: list[str]) -> str:
    return ", ".join(f"“{i}”" for i in items)


def _is_are(items: list[str]) -> str:
    return "is" if len(items) == 1 else "are"


def ask(axis: str, r: Reading, found: list[str]) -> str:
    if axis == "goal":
        return _ask_goal(r)
    if axis == "scope":
        return _ask_scope(r, found)
    if axis == "constraints":
        paths, symbols = r.kinds("path", "endpoint"), r.kinds("symbol", "command")
        where = (
            f"Besides {', '.join(paths[:2])}, may other files change? "
            if paths
            else f"Besides {', '.join(symbols[:2])}, what else may change? "
            if symbols
            else ""
        )
        return (
            f"{where}What must stay as it is (public API, output format, other files, "
            "dependencies), and within which limits (versions, size, time)?"
        )
    if axis == "context":
        if r.find(lex.BUG_WORDS) or r.find(lex.SYMPTOMS):
            return (
                "What happens now, and what did you expect instead? Paste the exact "
                "error message or the command that shows it."
            )
        if r.intent.read_only:
            return (
                "What prompted the question, and what will you do with the answer? A "
                "sentence of background is enough."
            )
        return (
            "Why is this needed, and how does it behave today? A sentence of background "
            "(who needs it, what it replaces) is enough."
        )
    return _ask_success(r)


def _ask_scope(r: Reading, found: list[str]) -> str:
    whole = r.said(lex.WHOLE_SCOPE)
    areas = r.said(lex.AREA_NOUNS)
    if whole:
        head = f"{_quoted(whole)} {_is_are(whole)} not a scope: which"
    elif areas:
        head = f"You mention {_quoted(areas[:3])}: which"
    else:
        head = "Which"
    if r.intent.read_only:  # nothing is to change: ask where to look
        if found:
            return f"{head} files or modules should be looked at? Candidates: {', '.join(found)}."
        return (
            f"{head} files, modules or functions should be looked at? Name a path, a symbol "
            "or the command to run."
        )
    if found:
        return f"{head} files or modules should change? Candidates: {', '.join(found)}."
    return (
        f"{head} files, modules or functions should change? Name a path or a symbol "
        "(a function, class or command)."
    )


_BARE_VERBS = ("make", "do", "help", "look", "look into", "check", "work on", "deal with")


def _ask_goal(r: Reading) -> str:
    best = max(actions(r), key=lambda v: v.score, default=None)
    read_only = r.intent.read_only
    if best is not None and best.phrase in _BARE_VERBS:
        best = replace(best, phrase="look at" if read_only else "change")
    after = "what you want to know about it" if read_only else "what should be different afterwards"
    vague = r.said(lex.VAGUE)
    if best is None:
        return (
            "What should be done? Start with an action and its object, e.g. “fix the "
            "KeyError in route()” or “add a --json flag to hub list”."
        )
    if best.empty_object in PRONOUNS:
        return (
            f"What does “{best.empty_object}” refer to in “{best.span}”? Name the thing "
            f"to {best.phrase} and {after}."
        )
    if best.empty_object is not None:
        return (
            f"“{best.span}” does not say which {best.empty_object} or what is wrong with "
            f"it: name the part to {best.phrase} and {after}."
        )
    if best.obj is None:
        return f"“{best.span}” has no object: {best.phrase} what, exactly, and {after}?"
    if read_only:
        return (
            f"“{best.span}” is open-ended: what exactly should be looked at, and what should "
            "the answer say?"
        )
    if vague:
        return (
            f"{_quoted(vague)} {_is_are(vague)} vague: what exactly should be "
            f"different after you {best.span}, and how would you measure it?"
        )
    return (
        f"“{best.span}” is open-ended: what exactly should change in {best.obj}, and how "
        "should it behave afterwards?"
    )


def _ask_success(r: Reading) -> str:
    if r.intent.read_only:
        return (
            "What should the answer contain? Say what to report, e.g. “the failing tests "
            "with their errors” or “each problem with its file and line”."
        )
    unchecked = [c.text for c in r.criteria if c.check is None]
    if unchecked:
        return (
            f"How will we know it is done? No check can hold {_quoted(unchecked[:2])}: name "
            "tests that must pass, a command that must succeed, or a file and the text it "
            "must contain."
        )
    if r.find(("speed up", "faster", "slow", "performance", "optimize", "optimise")):
        return (
            "How will we know it is done? Name the operation, how long it takes now and "
            "the target (e.g. “under 200 ms for 10k rows”), or the benchmark to run."
        )
    if r.find(lex.TEST_WORDS):
        return (
            "How will we know it is done? Say which tests must pass (a file or test name) "
            "or which command must succeed."
        )
    return (
        "How will we know it is done? Name a check: tests that must pass, a command and "
        "its expected output or exit code, a status code, or a file that must exist."
    )
