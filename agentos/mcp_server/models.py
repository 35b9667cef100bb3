"""The structured output of every MCP tool: pydantic models, so each tool has an outputSchema.

They mirror the ``as_dict()`` of the library's results. Models that mirror a library result
still growing (interview, runs) allow extra keys, so a new field in the library shows up
in the output instead of breaking the tool.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- route --------------------------------------------------------------------------------


class SelectedCard(_Out):
    card: str = Field(description="The routing card that selected the agent.")
    agent: str
    version: str = Field(description="The agent version the hub resolved.")
    score: int
    fired: list[str] = Field(description="The triggers that fired.")
    priority: int
    group: str
    checks: list[dict[str, Any]] = Field(
        default_factory=list, description="The card's extra gate checks."
    )


class RejectedCard(_Out):
    card: str
    reason: str


class RouteResult(_Out):
    decision: Literal["route", "clarify", "no_match"]
    selected: list[SelectedCard] = Field(description="The task force, strongest card first.")
    rejected: list[RejectedCard] = Field(description="Cards that fired but were ruled out.")
    tied: list[str] = Field(description="With decision=clarify: the cards that tie.")
    cards_revision: str
    hub_revision: str
    dry_run: bool = Field(default=False, description="True when asked to decide only.")
    receipt: str | None = Field(
        description="The id of the route receipt written for this decision; null in a dry run."
    )


# --- interview ----------------------------------------------------------------------------


class Question(_Out):
    axis: str
    text: str


class InterviewResult(_Open):
    request: str
    passed: bool = Field(description="True when the request is clear enough to start work.")
    ambiguity: float = Field(description="1 - the weighted sum of the axes.")
    threshold: float
    axes: dict[str, float] = Field(description="goal, constraints, scope, context, success.")
    reasons: list[str] = Field(default_factory=list, description="Why it is blocked.")
    questions: list[Question] = Field(
        default_factory=list, description="One question per weak axis."
    )
    rewrite: str | None = None


# --- runs ---------------------------------------------------------------------------------


class RunStarted(_Out):
    run_id: str
    status: str = Field(
        description="started; with wait, the status the run ended with (succeeded, ready, "
        "failed, ...)."
    )
    repo: str
    log: str = Field(description="The orchestrator's log file.")
    message: str | None = Field(default=None, description="With wait: how the run ended.")


class RunSummary(_Out):
    run_id: str
    status: str
    request: str
    repo: str
    created_at: float
    ended_at: float | None = None
    message: str | None = None


class RunList(_Out):
    runs: list[RunSummary] = Field(description="Newest first.")


class RunLog(_Out):
    run_id: str
    agent: str | None = Field(description="Whose log: an agent's pane, or None for the run's.")
    text: str = Field(description="The log from `offset` on (at most `limit` bytes).")
    next_offset: int = Field(description="Ask from here next time to follow the log.")
    finished: bool = Field(description="The run ended: the log grows no more.")


class RunEventOut(_Open):
    seq: int
    at: float
    kind: Literal["phase", "agent", "note"]
    message: str
    status: str | None = None
    agent: str | None = None


class RunEvents(_Out):
    run_id: str
    events: list[RunEventOut]
    next_offset: int = Field(description="Ask from here next time to follow the run.")
    finished: bool


class RunCancelled(_Out):
    run_id: str
    status: str = Field(description="The status the run ended with: cancelled, or aborted.")


class FailingCheck(_Open):
    name: str
    kind: str
    exit_code: int | None = None
    timed_out: bool = False
    definition: str = ""
    output_tail: str = Field(default="", description="The end of its output, ANSI removed.")


class AgentStatus(_Open):
    agent: str
    version: str
    status: str
    attempts: int = 0
    branch: str | None = None
    gate_summary: str | None = Field(default=None, description="The last gate, in one line.")
    failing_checks: list[FailingCheck] = Field(
        default_factory=list, description="The checks that failed in the last gate."
    )
    gated_commit: str | None = Field(
        default=None, description="The commit the passing gate judged (what merges)."
    )
    output_tail: str = Field(default="", description="The end of the agent's latest output.")


class TaskStatus(_Open):
    run_id: str
    status: str = Field(
        description="starting, pending, running, gating, merging, or final: "
        "succeeded, ready (passed, waiting for review), discarded, failed, conflict, "
        "blocked, no_match, clarify, cancelled, aborted."
    )
    finished: bool
    request: str | None = None
    repo: str | None = None
    decision: str | None = None
    message: str | None = None
    agents: list[AgentStatus] = Field(default_factory=list)
    receipts: list[str] = Field(default_factory=list, description="The run's receipt ids.")
    log_tail: str = Field(default="", description="The end of the orchestrator's log.")


# --- knowledge store ----------------------------------------------------------------------


class KbHit(_Out):
    path: str
    start_line: int
    end_line: int
    score: float = Field(description="bm25 with column weights; higher is better.")
    snippet: str = Field(description="The matched terms are marked «like this».")
    language: str


class KbSearchResult(_Out):
    query: str
    hits: list[KbHit]


class KbAddResult(_Out):
    paths: list[str] = Field(description="The resolved paths that were added.")
    seen: int
    read: int
    added: int
    updated: int
    removed: int
    skipped: int
    chunks: int
    seconds: float
    errors: list[str]


# --- receipts -----------------------------------------------------------------------------


class ReceiptSummary(_Out):
    id: str
    kind: str
    time: str
    run_id: str | None
    path: str


class ReceiptList(_Out):
    total: int = Field(description="How many receipts match, before the limit.")
    receipts: list[ReceiptSummary] = Field(description="The newest ones, in chain order.")


class ReceiptText(_Out):
    id: str
    kind: str
    time: str
    run_id: str | None
    fields: dict[str, Any] = Field(
        default_factory=dict, description="The receipt's fields, parsed (after the header)."
    )
    text: str = Field(description="The receipt exactly as written.")


# --- hub ----------------------------------------------------------------------------------


class HubPackage(_Out):
    name: str
    version: str
    active: bool
    sha256: str
    source: str
    installed: str
    path: str


class HubList(_Out):
    packages: list[HubPackage]


class HubInstallResult(_Out):
    name: str
    version: str
    sha256: str
    source: str
    changed: bool = Field(description="False when the same content was already installed.")


# --- guardian -----------------------------------------------------------------------------


class GuardianStatus(_Out):
    installed: bool = Field(description="Whether the guardian is part of this installation.")
    running: bool | None = Field(default=None, description="Whether a guardian process is running.")
    message: str
    status: dict[str, Any] = Field(
        default_factory=dict, description="What the guardian reports about itself."
    )


# --- evals --------------------------------------------------------------------------------


class EvalPrediction(_Open):
    task: str
    answer: str
    score: float = Field(description="0..1.")
    feedback: str = Field(description="Why, in one line.")
    seconds: float


class EvalReport(_Open):
    id: str
    suite: str
    split: str
    agent: str = Field(description="NAME@VERSION.")
    average: float = Field(description="The mean task score (correctness).")
    dimensions: dict[str, float]
    composite: float
    threshold: float
    passed: bool
    tasks: list[str]
    predictions: list[EvalPrediction] = Field(default_factory=list)


# --- evolve ---------------------------------------------------------------------------------


class EvolveGeneration(_Open):
    gen: int
    parent: int | None
    verdict: str = Field(description="initial, accept, refine or reject.")
    reason: str
    valid_parent: bool
    score: float | None


class EvolveStatus(_Open):
    id: str
    package: str = Field(description="NAME@VERSION it started from.")
    suite: str
    meta: str
    status: str = Field(description="Whether it runs, or why it stopped.")
    generations: dict[str, int] = Field(description="made and asked.")
    best: dict[str, Any] | None
    archive: list[EvolveGeneration]


# --- synthesis ------------------------------------------------------------------------------


class HubMatch(_Open):
    name: str
    version: str
    score: float = Field(description="0..1: how much of the query the package covers.")
    matched: list[str]


class HubSearch(_Open):
    matches: list[HubMatch]


class Synthesis(_Open):
    id: str
    request: str
    existing: bool = Field(description="True: an installed package already does it.")
    package: str | None = Field(description="NAME@VERSION found or registered.")
    steps: list[dict[str, Any]]


# --- workflows ------------------------------------------------------------------------------


class WorkflowTask(_Open):
    id: int
    execution: str
    phase: int
    description: str
    status: str = Field(
        description="pending, queued, running, done, failed, duplicated, cancelled."
    )
    parent: int | None
    duplicate_of: int | None
    similarity: float | None
    run_id: str | None


class WorkflowTasks(_Open):
    tasks: list[WorkflowTask]


class WorkflowResult(_Open):
    id: int
    execution: str
    summary: str
    validated: bool = Field(description="The workflow's result_checks passed.")
    detail: str


class Memory(_Open):
    path: str = Field(description="The note's file, indexed in the knowledge store.")
