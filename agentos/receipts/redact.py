"""Redaction (``receipts: {redact: true}``): what could give a run's request away, taken
out of a receipt's fields before it is written."""

from __future__ import annotations

import re
from collections.abc import Mapping

# Fields whose values are free text, where a request's words can reappear: what an agent
# or a check printed, check names and definitions derived from the request, the
# interview's reasons, questions and evidence, messages. Under them, every string is
# redacted when it holds a word of the request; output is redacted always.
_FREE_TEXT = frozenset(
    {
        "name",
        "definition",
        "message",
        "summary",
        "reasons",
        "questions",
        "proposed_checks",
        "evidence",
        "rewrite",
        "rewrite_error",
        "detail",
        "reason",
        "fired",
        "conflicts",
        "ignored_files_removed",
        "git_admin_restored",
        "paths",
        "named",
        "test_changes",
    }
)
_OUTPUT = frozenset({"output_tail", "output", "tail"})
_WORD_RE = re.compile(r"[^\s\"'`,;:!?()\[\]{}<>]+")
_MIN_WORD = 4


def redact(fields: Mapping[str, object], request: str | None) -> dict[str, object]:
    """``fields`` with what could give the request away replaced by its length
    (``receipts: {redact: true}``): output always, and under free-text fields every string
    that holds one of the request's words of four characters or more (file names, derived
    checks, an agent's echo of the request)."""
    found = _WORD_RE.findall(request or "")
    # A path's parts too: src/quixotic/module.py gives away quixotic in src/quixotic/util.py.
    words = {p.strip(".").lower() for w in found for p in (w, *re.split(r"[/\\.]", w))}
    terms = sorted(w for w in words if len(w) >= _MIN_WORD)
    return {
        key: _redacted(value, terms, key in _FREE_TEXT, key in _OUTPUT)
        for key, value in fields.items()
    }


def _redacted(value: object, terms: list[str], free: bool, output: bool) -> object:
    if isinstance(value, Mapping):
        return {
            k: _redacted(v, terms, free or k in _FREE_TEXT, output or k in _OUTPUT)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redacted(v, terms, free, output) for v in value]
    if isinstance(value, str) and value and (output or (free and _holds(value, terms))):
        return f"[redacted: {len(value)} characters]"  # no digest: a short one is guessed
    return value


def _holds(text: str, terms: list[str]) -> bool:
    lowered = text.lower()
    return any(term in lowered for term in terms)
