"""The interview engine: refuse a request too vague to succeed, and ask what is missing.

A request is read on five axes, each 0..1, from its text alone:

- **goal**: an action verb and its object ("fix the KeyError in route()"), less for vague
  words ("better", "stuff");
- **constraints**: what must not change and limits ("only", "do not", "keep", versions,
  "under 200 ms");
- **scope**: named files, paths, symbols, commands, endpoints, or at least an area of code;
- **context**: errors seen, current versus expected behaviour, the reason for the change;
- **success**: acceptance criteria ("done when", "tests pass", "returns 400"); a criterion
  counts as measurable only through the gate check it becomes, so without one the
  axis counts at most :data:`UNCHECKED_SUCCESS`.

A **read-only** request ("run the tests and report what fails", "which tests fail?",
"explain how routing works") asks for an answer and changes nothing: its constraints are
met by nature, its scope is what to look at, its success is the answer it asks for, and it
proposes no check.

``ambiguity = 1 - weighted mean of the axes``. A request passes when the ambiguity is at or
under the threshold and no axis is under its floor; a blocked request gets one specific
question per weak axis. The score is deterministic (no model, no randomness, rounded); an
LLM may only propose a rewrite (:func:`with_rewrite`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentos import install_hint
from agentos.errors import AgentOSError, BadInput, OperationFailed, check_request
from agentos.interview import lexicon as lex
from agentos.interview.named_tests import TestChangesAsked, named_things, test_changes_asked
from agentos.interview.questions import ask, first_candidates
from agentos.interview.reading import READ_VERB, STOP, VAGUE_WORDS, Reading, actions
from agentos.shared.checks import CheckSpec
from agentos.shared.text import stem_phrase, stems
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import Axis, InterviewSettings

log = logging.getLogger(__name__)

AXES: tuple[Axis, ...] = ("goal", "constraints", "scope", "context", "success")
DEFAULT_WEIGHTS: dict[str, float] = {
    "goal": 0.30,
    "constraints": 0.15,
    "scope": 0.20,
    "context": 0.15,
    "success": 0.20,
}
DEFAULT_FLOORS: dict[str, float] = {
    "goal": 0.5,
    "constraints": 0.0,
    "scope": 0.0,
    "context": 0.0,
    "success": 0.0,
}
WEAK_BELOW = 0.5  # an axis under this (or under its floor) gets a question
# The most the success axis counts without a check to hold a criterion: under WEAK_BELOW,
# so a blocked request is asked how we will know it is done.
UNCHECKED_SUCCESS = 0.45
SUCCESS_KINDS = ("run", "tests", "file_exists", "file_contains")  # the rest bound the change
_DIGITS = 3  # scores are rounded so every process prints the same numbers


@dataclass(frozen=True)
class Question:
    axis: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"axis": self.axis, "text": self.text}


@dataclass(frozen=True)
class Interview:
    axes: dict[str, float]
    ambiguity: float
    passed: bool
    questions: list[Question]
    proposed_checks: list[CheckSpec]
    request: str = ""
    read_only: bool = False  # asks for an answer and changes nothing
    threshold: float = 0.4
    floors: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # why it is blocked
    evidence: dict[str, list[str]] = field(default_factory=dict)
    rewrite: str | None = None  # a clearer request proposed by an LLM, if any
    rewrite_error: str | None = None  # why no rewrite came back, when one was asked
    # The paths and symbols the request names (which tests a failure is about), and whether
    # it asks for the tests themselves to change (the gate then allows it, and says so).
    named: list[str] = field(default_factory=list)
    test_changes: TestChangesAsked | None = None

    @property
    def weak(self) -> list[str]:
        return [q.axis for q in self.questions]

    def as_dict(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "passed": self.passed,
            "read_only": self.read_only,
            "ambiguity": self.ambiguity,
            "threshold": self.threshold,
            "axes": {a: self.axes[a] for a in AXES},
            "weights": {a: self.weights.get(a, DEFAULT_WEIGHTS[a]) for a in AXES},
            "floors": {a: self.floors.get(a, 0.0) for a in AXES},
            "reasons": list(self.reasons),
            "questions": [q.as_dict() for q in self.questions],
            "proposed_checks": [
                c.model_dump(mode="json", exclude_none=True) for c in self.proposed_checks
            ],
            "evidence": {a: list(self.evidence.get(a, [])) for a in AXES},
            "rewrite": self.rewrite,
            "rewrite_error": self.rewrite_error,
            "named": list(self.named),
            "test_changes": self.test_changes.as_dict() if self.test_changes else None,
        }


def interview(
    request: str,
    settings: InterviewSettings,
    *,
    candidates: Callable[[str], list[str]] | None = None,
) -> Interview:
    """Score ``request`` and, when it is blocked, ask one question per weak axis.

    ``candidates(request)`` returns file paths the knowledge store finds for the request;
    the scope question names them. It is called only when scope is weak.
    """
    if not request or not request.strip():
        raise BadInput("the request is empty: say what should be done", field="request")
    reading = Reading(request)
    read_only = reading.intent.read_only
    scored = {
        "goal": _goal(reading),
        "constraints": _nothing_changes(reading) if read_only else _constraints(reading),
        "scope": _scope(reading),
        "context": _context(reading),
        "success": _answer(reading) if read_only else _success(reading),
    }
    axes: dict[str, float] = {a: round(min(1.0, max(0.0, scored[a][0])), _DIGITS) for a in AXES}
    evidence: dict[str, list[str]] = {a: scored[a][1] for a in AXES}
    weights: dict[str, float] = {a: settings.weights.get(a, DEFAULT_WEIGHTS[a]) for a in AXES}
    floors: dict[str, float] = {a: settings.floors.get(a, DEFAULT_FLOORS[a]) for a in AXES}
    total = sum(weights.values())
    covered = sum(weights[a] * axes[a] for a in AXES) / total if total else 0.0
    ambiguity = round(1.0 - covered, _DIGITS)

    reasons = []
    if ambiguity > settings.threshold:
        reasons.append(f"ambiguity {ambiguity:.3f} is over the threshold {settings.threshold}")
    reasons += [
        f"{a} {axes[a]:.3f} is under its floor {floors[a]}" for a in AXES if axes[a] < floors[a]
    ]
    passed = not reasons

    questions: list[Question] = []
    if not passed:
        weak = [a for a in AXES if axes[a] < floors[a] or axes[a] < WEAK_BELOW]
        if not weak:  # blocked on the total alone: ask about the biggest gap
            weak = [max(AXES, key=lambda a: (weights[a] * (1 - axes[a]), -AXES.index(a)))]
        found = first_candidates(request, candidates) if "scope" in weak else []
        questions = [Question(a, ask(a, reading, found)) for a in weak]

    return Interview(
        axes=axes,
        ambiguity=ambiguity,
        passed=passed,
        questions=questions,
        proposed_checks=[] if read_only else reading.checks,
        request=request,
        read_only=read_only,
        threshold=settings.threshold,
        floors=floors,
        weights=weights,
        reasons=reasons,
        evidence=evidence,
        named=named_things(reading.entities),
        test_changes=None if read_only else test_changes_asked(request, reading.entities),
    )


def interview_in(ws: Workspace, request: str, *, rewrite: bool = True) -> Interview:
    """Interview ``request`` with the workspace's settings and knowledge store.

    Scope questions name the files the knowledge store finds for the request. When
    ``rewrite`` and an ``interview.rewrite_model`` is configured, a blocked request also
    gets a proposed rewrite; a model that cannot be reached leaves ``rewrite_error``
    instead and never changes the verdict.
    """
    if request.strip():  # an empty one gets the interview's own answer
        check_request(request)
    settings = ws.settings.interview
    result = interview(request, settings, candidates=knowledge_candidates(ws))
    if rewrite:
        try:
            result = with_rewrite(result, settings)
        except OperationFailed as exc:
            log.warning("%s", exc)
            result = replace(result, rewrite_error=str(exc))
    return result


def knowledge_candidates(ws: Workspace, k: int = 8) -> Callable[[str], list[str]] | None:
    """A ``candidates`` function over the workspace's knowledge store: the paths of the
    top ``k`` hits for the request. None when there is no knowledge store."""
    if not ws.knowledge_db.is_file():
        return None

    def candidates(request: str) -> list[str]:
        from agentos.knowledge.store import open_store  # apsw and FTS5: only when asked

        try:
            with open_store(ws) as store:
                hits = store.search(request, k)
        except AgentOSError as exc:
            log.warning("no candidates from the knowledge store: %s", exc)
            return []
        return [_shown(Path(hit.path)) for hit in hits]

    return candidates


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def amend(request: str, answers: Mapping[str, str]) -> str:
    """The request with the answers to its questions appended, ready to score again."""
    extra = [a.strip() for a in answers.values() if a and a.strip()]
    lines = [request.rstrip()]
    lines += [a if a.endswith((".", "!", "?")) else a + "." for a in extra]
    return "\n".join(lines)


# --- the five axes: each returns (score, evidence) ----------------------------------------

Scored = tuple[float, list[str]]


def _steps(n: int, steps: tuple[float, ...]) -> float:
    """Diminishing credit for the n-th distinct signal: steps[0] + steps[1] + ..."""
    return sum(steps[min(i, len(steps) - 1)] for i in range(n))


def _goal(r: Reading) -> Scored:
    ev: list[str] = []
    best = max(actions(r), key=lambda v: v.score, default=None)
    question = r.intent.question if r.intent.read_only else None
    asked = 0.0
    if question is not None:  # "which tests fail?": a question with a subject is a goal
        said = {t for t in stems(question) if t not in STOP and t not in VAGUE_WORDS}
        asked = READ_VERB + (0.25 if len(said) >= 2 else 0.0)
    score = 0.0
    if best is not None and best.score >= asked:
        score = best.score
        ev.append(f"action: {best.phrase}" + (f" {best.obj}" if best.obj else ""))
    elif question is not None:
        score = asked
        ev.append(f"question: {question}")
    elif r.find(lex.BUG_WORDS) or r.find(lex.SYMPTOMS):
        # A problem described without an action: fixing it is implied, and clearer when
        # the expected behaviour is said too.
        score = 0.5 if r.find(lex.EXPECTED_WORDS) else 0.35
        ev.append("problem described: " + ", ".join(r.find(lex.BUG_WORDS) or r.find(lex.SYMPTOMS)))
    content = len(set(r.content()))  # distinct words: repeating one says nothing new
    score += 0.15 if content >= 12 else 0.1 if content >= 6 else 0.0
    vague = r.find(lex.VAGUE)
    if r.intent.read_only:  # what to look at is not vague: "how routing works", "the problems"
        looked_at = {s for v in actions(r) if v.obj for s in stems(v.obj)}
        vague = [w for w in vague if not set(stem_phrase(w)) <= looked_at]
    if vague:
        score -= min(0.45, 0.15 * len(vague))
        ev.append("vague: " + ", ".join(vague))
    return score, ev


def _scope(r: Reading) -> Scored:
    ev: list[str] = []
    paths = r.kinds("path", "endpoint")
    symbols = r.kinds("symbol", "command")
    areas = r.find(lex.AREA_NOUNS)
    score = 0.0
    if paths:
        score += min(0.9, 0.7 + 0.1 * (len(paths) - 1))
        ev.append("paths: " + ", ".join(paths))
    if symbols:
        score += min(0.5, 0.25 * len(symbols))
        ev.append("symbols: " + ", ".join(symbols))
    if areas:
        score += _steps(len(areas), (0.25, 0.1, 0.05))
        ev.append("areas: " + ", ".join(areas))
    if r.intent.read_only and not paths and r.find(("test", "test suite")):
        score += 0.35  # "run the tests": the whole suite is a definite thing to look at
        ev.append("target: the test suite")
    whole = r.find(lex.WHOLE_SCOPE)
    if whole and not (paths or symbols):
        score = max(0.0, score - 0.35 * len(whole))
        ev.append("everything-scope: " + ", ".join(whole))
    return score, ev


_NO_CHANGE = re.compile(
    r"\bno(?:\s+\w+){0,2}\s+(?:changes?|other|new)\b|\bnothing\s+else\b", re.IGNORECASE
)


def _constraints(r: Reading) -> Scored:
    ev: list[str] = []
    found = r.find(lex.CONSTRAINTS)
    found += [
        m.group(0).lower() for m in _NO_CHANGE.finditer(r.masked) if m.group(0).lower() not in found
    ]
    found += [m.group(0).lower() for m in lex.LIMIT_RE.finditer(r.text)]
    limits = r.kinds("version", "quantity")
    score = _steps(len(found), (0.45, 0.3, 0.25)) + min(0.4, 0.2 * len(limits))
    if found:
        ev.append("constraints: " + ", ".join(found))
    if limits:
        ev.append("limits: " + ", ".join(limits))
    return score, ev


def _nothing_changes(r: Reading) -> Scored:
    """A read-only request changes nothing: the strictest constraint there is."""
    ev = ["read-only: " + ", ".join(r.intent.reads[:3]) + " (nothing changes)"]
    if r.intent.said:
        ev.append("said: " + ", ".join(r.intent.said))
    return 1.0, ev


def _errors_seen(r: Reading) -> list[str]:
    seen = r.kinds("error", "exit")
    seen += [
        e.text
        for e in r.entities
        if e.kind == "status" and e.text[0] in "45" and e.text not in seen
    ]
    return seen


def _context(r: Reading) -> Scored:
    ev: list[str] = []
    errors = _errors_seen(r)
    symptoms = r.find(lex.SYMPTOMS)
    current = r.find(lex.CURRENT_EXPECTED)
    reasons = r.find(lex.REASONS)
    repro = r.find(lex.REPRODUCE)
    score = 0.0
    if errors:
        score += 0.45
        ev.append("errors: " + ", ".join(errors))
    if symptoms:
        score += 0.1 if errors else 0.25
        ev.append("symptoms: " + ", ".join(symptoms))
    score += _steps(len(current), (0.3, 0.15, 0.05)) + _steps(len(reasons), (0.25, 0.1))
    score += 0.15 if repro else 0.0
    for label, found in (
        ("current vs expected", current),
        ("reasons", reasons),
        ("reproduction", repro),
    ):
        if found:
            ev.append(f"{label}: " + ", ".join(found))
    return score, ev


_STRONG_ACCEPTANCE = ("done when", "acceptance", "definition of done", "acceptance criteria")
_MEASURABLE = ("status", "quantity", "exit", "quote")


def _success(r: Reading) -> Scored:
    """The words that say how we will know it is done, and the checks its criteria became.

    A criterion counts as measurable only through its check: without any, the axis stays
    at or under :data:`UNCHECKED_SUCCESS` and the evidence says what no check holds."""
    ev: list[str] = []
    strong = r.find(_STRONG_ACCEPTANCE)
    accept = [p for p in r.find(lex.ACCEPTANCE) if p not in strong]
    expected = r.find(lex.EXPECTED_WORDS)
    checks = [c.name for c in r.checks if c.kind in SUCCESS_KINDS]
    score = (0.5 if strong else 0.0) + _steps(len(accept), (0.35, 0.15, 0.1))
    score += 0.15 if expected else 0.0
    score += _steps(len(checks), (0.6, 0.15, 0.1))  # one check alone is not weak
    for label, found in (
        ("acceptance", strong + accept),
        ("expected", expected),
        ("checks", checks),
    ):
        if found:
            ev.append(f"{label}: " + ", ".join(found))
    unchecked = [f"{c.text} ({c.why_not})" for c in r.criteria if c.check is None]
    unchecked += _loose(r)
    if unchecked:
        ev.append("not checkable: " + "; ".join(unchecked))
    if not checks and score > 0:
        score = min(score, UNCHECKED_SUCCESS)
        ev.append(f"no check: counts at most {UNCHECKED_SUCCESS}")
    return score, ev


def _loose(r: Reading) -> list[str]:
    """Measurable things the request names (404, "200 ms", a quoted message) that no
    criterion takes up."""
    spans = [(c.start, c.end) for c in r.criteria]
    seen: dict[str, None] = {}
    for e in r.entities:
        if e.kind in _MEASURABLE and not any(s <= e.start and e.end <= t for s, t in spans):
            seen.setdefault(e.text, None)
    return list(seen)


def _answer(r: Reading) -> Scored:
    """What a read-only request asks back. The answer is its result: no check holds it, so
    it counts at most :data:`UNCHECKED_SUCCESS`, like any criterion without a check."""
    if not r.intent.answers:
        return 0.2, ["answer: not said what to report"]
    return UNCHECKED_SUCCESS, [
        "answer: " + ", ".join(r.intent.answers) + " (an answer, not a check)"
    ]


# --- an optional rewrite through Ollama ---------------------------------------------------

_REWRITE_PROMPT = """\
You help a developer turn a vague request to a coding agent into a clear one. Rewrite the
request so that it states what to do, where (files, modules), what must not change, the
current and expected behaviour, and how we will know it is done. Keep every fact of the
original; never invent file names, errors or numbers: write <...> where the developer must
fill something in. Answer with the rewritten request only."""


def with_rewrite(
    result: Interview,
    settings: InterviewSettings,
    *,
    host: str | None = None,
    timeout: float = 60.0,
) -> Interview:
    """``result`` with a clearer rewrite proposed by the configured Ollama model.

    Nothing is asked when no ``rewrite_model`` is configured or the request passed. The
    scores are not touched: the rewrite is a suggestion for the person, never the score.
    Raises :class:`OperationFailed` when the model cannot be reached.
    """
    model = settings.rewrite_model
    if not model or result.passed:
        return result
    return replace(result, rewrite=propose_rewrite(result, model, host=host, timeout=timeout))


def propose_rewrite(
    result: Interview, model: str, *, host: str | None = None, timeout: float = 60.0
) -> str:
    """Ask ``model`` (through the ``ollama`` client) for a clearer version of the request."""
    try:  # heavy and optional: only a configured rewrite pays for them
        import httpx
        import ollama
    except ImportError as exc:
        raise OperationFailed(
            f"the ollama client is not installed ({exc}): {install_hint('ollama')}",
            field="interview.rewrite_model",
        ) from exc

    asks = "\n".join(f"- {q.axis}: {q.text}" for q in result.questions)
    user = f"Request:\n{result.request}\n\nWhat is missing:\n{asks or '- nothing'}"
    client = ollama.Client(host=host, timeout=timeout)
    try:
        reply = client.chat(
            model=model,
            messages=[
                {"role": "system", "content": _REWRITE_PROMPT},
                {"role": "user", "content": user},
            ],
            options={"temperature": 0},
        )
    except (ollama.ResponseError, ConnectionError, httpx.HTTPError) as exc:
        raise OperationFailed(
            f"no rewrite from Ollama model {model}: {exc}", field="interview.rewrite_model"
        ) from exc
    text = (reply.message.content or "").strip()
    if not text:
        raise OperationFailed(
            f"Ollama model {model} returned an empty rewrite", field="interview.rewrite_model"
        )
    return text
