"""What the gate found: each check's result, the gate's, and what is written of them (the
agent's feedback file, the ``gate`` receipt's fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.receipts import Receipt, write_receipt
from agentos.shared import process
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    pass


FEEDBACK_FILE = "AGENTOS_FEEDBACK.md"


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    name: str
    kind: str
    passed: bool
    duration: float  # seconds
    exit_code: int | None  # shell checks that ran to the end; None for built-ins and timeouts
    output_tail: str  # the last ~4 KB of the output
    digest: str  # sha256 of the whole output
    timed_out: bool = False
    definition: str = ""  # what the check does: its command, or the built-in and argument
    output_bytes: int = 0  # size of the whole output
    limit: str | None = None  # the sandbox limit that stopped it (memory, processes, cpu...)
    # A `tests` check's judgment (agentos.gate.judge.Verdict.as_dict): evidence, counts,
    # findings, regressions...
    evidence: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "duration": round(self.duration, 3),
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "definition": self.definition,
            "digest": self.digest,
            "output_bytes": self.output_bytes,
            "limit": self.limit,
        }
        if self.evidence is not None:  # a tests check's judgment
            out["evidence"] = self.evidence
        out["output_tail"] = self.output_tail
        return out


@dataclass(frozen=True)
class GateResult:
    results: list[CheckResult] = field(default_factory=list)
    base: str | None = None  # the commit the diff checks compared against, if any ran

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def summary(self) -> str:
        """One line: ``gate passed: 3 of 3 checks passed``, or which failed."""
        total = len(self.results)
        if total == 0:
            return "gate passed: no checks configured (nothing was verified)"
        if self.passed:
            return f"gate passed: {total} of {total} checks passed"
        names = ", ".join(r.name for r in self.failures)
        return f"gate failed: {len(self.failures)} of {total} checks failed ({names})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "summary": self.summary(),
            "base": self.base,
            "checks": [r.as_dict() for r in self.results],
        }

    def feedback(self) -> str:
        """Markdown for the agent: each failing check, what it does, and its output tail."""
        if self.passed:
            return f"# AgentOS gate\n\n{self.summary()}.\n"
        lines = [
            "# AgentOS gate: your work is not done yet",
            "",
            f"{self.summary()}.",
            "",
            "These checks are run by AgentOS, not by you: editing their definitions changes",
            "nothing. Fix the work so that every failing check below passes, then finish.",
        ]
        for r in self.failures:
            status = (
                "timed out"
                if r.timed_out
                else f"exit {r.exit_code}"
                if r.exit_code is not None
                else "failed"
            )
            lines += [
                "",
                f"## FAILED: {r.name} ({r.kind}, {status})",
                "",
                f"Check: {r.definition}",
                "",
            ]
            shown = len(r.output_tail.encode("utf-8"))
            if r.output_bytes > shown:
                lines += [f"Last {shown} of {r.output_bytes} bytes of output:", ""]
            fence = "`" * max(3, _longest_backtick_run(r.output_tail) + 1)
            tail = r.output_tail if r.output_tail.endswith("\n") else r.output_tail + "\n"
            lines += [f"{fence}text", tail.rstrip("\n") if r.output_tail else "(no output)", fence]
        return "\n".join(lines) + "\n"


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest


def environment_failure(result: GateResult) -> str | None:
    """When a failed gate is the environment's fault, not the agent's, say why: the
    repository's test command could not start (exit 126 or 127: not executable, not
    found). Such a failure is not retried; the person must fix the environment."""
    for r in result.failures:
        if r.kind == "tests" and r.exit_code in (126, 127):
            last = r.output_tail.strip().splitlines()[-1:] or ["(no output)"]
            return (
                f"the repository's test command could not start (exit {r.exit_code}: "
                f"{last[0]}); fix the test command or its environment (agentos repo show, "
                "agentos doctor --repo), then run again"
            )
    return None


def with_failure(result: GateResult, name: str, text: str) -> GateResult:
    """``result`` with one more, failed, check that AgentOS itself made (``text`` is what it
    found)."""
    outcome = process.reported(False, text)
    extra = CheckResult(
        name=name,
        kind="builtin",
        passed=False,
        duration=0.0,
        exit_code=None,
        output_tail=outcome.tail,
        digest=outcome.digest,
        definition=f"AgentOS: {name}",
        output_bytes=outcome.size,
    )
    return GateResult([*result.results, extra], result.base)


def write_feedback(worktree: Path, result: GateResult) -> Path:
    """Write ``result.feedback()`` to AGENTOS_FEEDBACK.md in the worktree.

    Root-level ``AGENTOS_*`` files are not counted by the diff checks; do not commit them.
    """
    path = Path(worktree) / FEEDBACK_FILE
    atomic_write(path, result.feedback(), durable=False)  # a worktree's: gone after a crash
    return path


def gate_receipt_fields(result: GateResult, attempt: int) -> dict[str, Any]:
    """The fields of a "gate" receipt: for each check its name, pass/fail, duration and
    output digest; failing checks and commands (what ran, and what it printed) also carry
    their definition and output tail."""
    checks: list[dict[str, Any]] = []
    for r in result.results:
        entry: dict[str, Any] = {
            "name": r.name,
            "kind": r.kind,
            "result": "pass" if r.passed else "fail",
            "duration": round(r.duration, 3),
            "digest": r.digest,
        }
        if r.exit_code is not None:
            entry["exit_code"] = r.exit_code
        if r.timed_out:
            entry["timed_out"] = True
        if r.limit:
            entry["limit"] = r.limit
        if r.evidence is not None:
            entry["evidence"] = r.evidence
        if not r.passed or r.kind in ("run", "tests"):
            entry["definition"] = r.definition
            entry["output_tail"] = r.output_tail
        checks.append(entry)
    return {
        "attempt": attempt,
        "passed": result.passed,
        "summary": result.summary(),
        "base": result.base,
        "checks": checks,
    }


def write_gate_receipt(
    ws: Workspace,
    result: GateResult,
    *,
    attempt: int = 1,
    run_id: str | None = None,
    context: Mapping[str, object] | None = None,
) -> Receipt:
    """Append a "gate" receipt: ``context`` (where the gate ran, who asked), then
    :func:`gate_receipt_fields`."""
    fields = {**(context or {}), **gate_receipt_fields(result, attempt)}
    return write_receipt(ws, "gate", fields, run_id=run_id)
