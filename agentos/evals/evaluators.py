"""Grading one answer: the evaluators of an answer-mode eval suite.

Each evaluator turns an agent's answer and the task's expectation into a score in 0..1
and one line of feedback saying why. They are pure functions of their inputs, except
``command`` (a confined process reads the answer on stdin; exit 0 is right), which the
harness runs through the sandbox, and ``judge`` (a hub package grades the answer), whose
output :func:`judge_score` reads.

``exact`` compares after the normalisations the evaluator names: ``strip`` (outer
whitespace), ``case`` (case-insensitive), ``whitespace`` (every run of whitespace is one
space), ``punctuation`` (ASCII punctuation removed). ``contains`` asks for the expected
text inside the answer (after the same normalisations); ``regex`` searches the answer with
the expected pattern (RE2, linear time); ``numeric`` reads the first number of the answer
and compares it with ``tolerance`` (absolute) or ``relative`` tolerance; ``json_equal``
parses both and compares the values.
"""

from __future__ import annotations

import json
import math
import re
import string
from dataclasses import dataclass
from typing import Any

from agentos.shared import patterns

NORMALISATIONS = ("strip", "case", "whitespace", "punctuation")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass(frozen=True)
class Grade:
    score: float  # 0..1
    feedback: str  # one line: why

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "feedback": self.feedback}


def normalise(text: str, how: tuple[str, ...]) -> str:
    if "case" in how:
        text = text.casefold()
    if "punctuation" in how:
        text = text.translate(_PUNCTUATION)
    if "whitespace" in how:
        text = " ".join(text.split())
    if "strip" in how:
        text = text.strip()
    return text


def exact(answer: str, expected: str, normalise_with: tuple[str, ...] = ()) -> Grade:
    got, want = normalise(answer, normalise_with), normalise(expected, normalise_with)
    if got == want:
        return Grade(1.0, "exact match")
    return Grade(0.0, f"expected {_short(want)}, got {_short(got)}")


def contains(answer: str, expected: str, normalise_with: tuple[str, ...] = ()) -> Grade:
    if normalise(expected, normalise_with) in normalise(answer, normalise_with):
        return Grade(1.0, f"contains {_short(expected)}")
    return Grade(0.0, f"does not contain {_short(expected)}")


def regex(answer: str, pattern: str) -> Grade:
    if patterns.compile(pattern, multiline=True).search(answer):
        return Grade(1.0, f"matches {pattern!r}")
    return Grade(0.0, f"does not match {pattern!r}")


def numeric(answer: str, expected: float, tolerance: float = 0.0, relative: float = 0.0) -> Grade:
    found = _NUMBER.search(answer.replace(",", ""))
    if found is None:
        return Grade(0.0, "no number in the answer")
    got = float(found.group())
    if math.isclose(got, expected, abs_tol=tolerance, rel_tol=relative):
        return Grade(1.0, f"{got:g} is {expected:g} within the tolerance")
    return Grade(0.0, f"expected {expected:g}, got {got:g}")


def json_equal(answer: str, expected: Any) -> Grade:
    try:
        got = json.loads(answer)
    except json.JSONDecodeError as exc:
        return Grade(0.0, f"the answer is not JSON ({exc.msg} at {exc.pos})")
    if got == expected:
        return Grade(1.0, "the same JSON value")
    return Grade(0.0, f"expected {_short(json.dumps(expected))}, got {_short(json.dumps(got))}")


def judge_score(output: str) -> Grade:
    """What a judge package printed (its last non-empty line, or the whole output):
    ``{"score": x, "reason": ...}`` with x in 0..1 is that score; anything else is 0, and
    the feedback says why."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    for text in (lines[-1] if lines else "", output):
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict) and "score" in data:
            break
    else:
        return Grade(0.0, "judge did not return a JSON score")
    score = data["score"]
    reason = str(data.get("reason", "")).strip()
    if isinstance(score, bool) or not isinstance(score, int | float) or math.isnan(score):
        return Grade(0.0, "judge did not return a JSON score")
    if not 0 <= score <= 1:
        return Grade(0.0, f"judge score {score!r} is out of range (0..1)")
    return Grade(float(score), reason or "judged")


def _short(text: str, limit: int = 80) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(shown)
