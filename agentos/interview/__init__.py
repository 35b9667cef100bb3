"""The interview: refuse a request too vague to succeed, and ask what is missing.

Its parts: :mod:`~agentos.interview.engine` (the five axes, the verdict, the questions asked),
:mod:`~agentos.interview.reading` (named things, stems, clauses, verbs),
:mod:`~agentos.interview.lexicon` (the words it reads a request with),
:mod:`~agentos.interview.entities` (the named things of a request),
:mod:`~agentos.interview.questions` (one question per weak axis),
:mod:`~agentos.interview.checks` (success criteria, and the gate's checks they become) and
:mod:`~agentos.interview.named_tests` (the tests a request names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.interview.engine import Interview, Question, interview, interview_in

FACE = {
    "Interview": "agentos.interview.engine",
    "Question": "agentos.interview.engine",
    "interview": "agentos.interview.engine",
    "interview_in": "agentos.interview.engine",
}
__all__ = [
    "Interview",
    "Question",
    "interview",
    "interview_in",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
