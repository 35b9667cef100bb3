"""What the recorder (``agentos/gate/site/_agentos_gate.py``) wrote about one test run, read back.

Each process that ran tests left ``<runner>-<pid>.jsonl``: a start line, the tests it
collected, each test's outcome, what it found tampered with, and a seal whose HMAC proves
it came from a process of this run. A file without a valid seal is a process that did not
end as a test run ends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

# How good an outcome is, for "at least as good as at the base".
OUTCOMES = ("passed", "xpassed", "skipped", "xfailed", "failed", "error")
PASSING = frozenset({"passed", "xpassed"})
FAILING = frozenset({"failed", "error"})


def new_nonce() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Collected:
    id: str
    file: str | None
    kind: str = ""  # the runner's item type: Function, TestCaseFunction, DoctestItem, TestCase
    code: str | None = None  # the file (in the tree) of the function the test runs


@dataclass
class ProcessRecord:
    """One process's records."""

    path: Path
    runner: str = ""
    mode: str = ""
    cwd: str = ""
    collected: list[Collected] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)  # import hooks and tracers of the tree
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)  # what pytest's reports said
    tampered: list[str] = field(default_factory=list)
    # what changed in the runner while it ran (compared with the base's by the judge)
    changed: list[str] = field(default_factory=list)
    sealed: bool = False
    seal_problem: str = ""  # why the seal is missing or does not hold
    exitstatus: int | None = None
    runner_counts: dict[str, int] = field(default_factory=dict)  # the runner's own tally


@dataclass
class Records:
    """Every process of one test run, merged: the tests' outcomes and what went wrong."""

    processes: list[ProcessRecord] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.processes)

    @property
    def outcomes(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for proc in self.processes:
            for test, outcome in proc.outcomes.items():
                old = out.get(test)
                # A test run twice (a rerun plugin, two processes): its worst outcome counts.
                if old is None or OUTCOMES.index(outcome) > OUTCOMES.index(old):
                    out[test] = outcome
        return out

    @property
    def collected(self) -> list[Collected]:
        seen: dict[str, Collected] = {}
        for proc in self.processes:
            for item in proc.collected:
                seen.setdefault(item.id, item)
        return list(seen.values())

    @property
    def plugins(self) -> list[str]:
        return sorted({p for proc in self.processes for p in proc.plugins})

    @property
    def changed(self) -> list[str]:
        out: list[str] = []
        for proc in self.processes:
            out += [c for c in proc.changed if c not in out]
        return out

    @property
    def hooks(self) -> list[str]:
        return sorted({h for proc in self.processes for h in proc.hooks})

    @property
    def collect_errors(self) -> list[tuple[str, str]]:
        return [e for proc in self.processes for e in proc.collect_errors]

    @property
    def tampered(self) -> list[str]:
        out: list[str] = []
        for proc in self.processes:
            out += [t for t in proc.tampered if t not in out]
        return out

    @property
    def unsealed(self) -> list[ProcessRecord]:
        return [p for p in self.processes if not p.sealed]


def read_records(directory: Path, nonce: str) -> Records:
    """The records under ``directory`` (files the recorder wrote; anything else ignored)."""
    records = Records()
    if not directory.is_dir():
        return records
    for path in sorted(directory.glob("*.jsonl")):
        if path.is_symlink() or not path.is_file():
            continue
        records.processes.append(_read(path, nonce))
    return records


def _read(path: Path, nonce: str) -> ProcessRecord:
    proc = ProcessRecord(path)
    digest = hashlib.sha256()
    count = 0
    try:
        data = path.read_bytes()
    except OSError as exc:
        proc.seal_problem = f"cannot be read: {exc.strerror or exc}"
        return proc
    for raw in data.splitlines(keepends=True):
        try:
            line = json.loads(raw)
        except ValueError:
            proc.seal_problem = "holds a line that is not the recorder's"
            return proc
        if not isinstance(line, dict):
            proc.seal_problem = "holds a line that is not the recorder's"
            return proc
        kind = line.get("t")
        if kind == "end":
            expected = hmac.new(
                nonce.encode(), digest.hexdigest().encode("ascii"), hashlib.sha256
            ).hexdigest()
            if line.get("lines") != count or line.get("digest") != digest.hexdigest():
                proc.seal_problem = "its seal does not match its lines"
            elif not hmac.compare_digest(str(line.get("mac", "")), expected):
                proc.seal_problem = "its seal was not made by this gate"
            else:
                proc.sealed = True
            status = line.get("exitstatus")
            proc.exitstatus = status if isinstance(status, int) else None
            _hooks(proc, line)
            reported = line.get("reported")
            if isinstance(reported, dict):
                proc.runner_counts = {
                    str(k): int(v) for k, v in reported.items() if isinstance(v, int)
                }
            continue
        digest.update(raw)
        count += 1
        if proc.sealed:  # lines after the seal were not the recorder's
            proc.sealed = False
            proc.seal_problem = "has lines after its seal"
        _apply(proc, kind, line)
    if not proc.sealed and not proc.seal_problem:
        proc.seal_problem = "ended without its seal"
    return proc


def _hooks(proc: ProcessRecord, line: dict[str, object]) -> None:
    hooks = line.get("hooks")
    for hook in hooks if isinstance(hooks, list) else []:
        if str(hook) not in proc.hooks:
            proc.hooks.append(str(hook))


def _apply(proc: ProcessRecord, kind: object, line: dict[str, object]) -> None:
    if kind == "start":
        proc.runner = str(line.get("runner", ""))
        proc.mode = str(line.get("mode", ""))
        proc.cwd = str(line.get("cwd", ""))
    elif kind == "collected":
        tests = line.get("tests")
        for item in tests if isinstance(tests, list) else []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                where, kind, code = item.get("file"), item.get("kind"), item.get("code")
                proc.collected.append(
                    Collected(
                        item["id"],
                        where if isinstance(where, str) else None,
                        kind if isinstance(kind, str) else "",
                        code if isinstance(code, str) else None,
                    )
                )
        plugins = line.get("plugins")
        proc.plugins = [str(p) for p in plugins] if isinstance(plugins, list) else []
        _hooks(proc, line)
    elif kind == "collect_error":
        proc.collect_errors.append((str(line.get("path", "")), str(line.get("message", ""))))
    elif kind == "test":
        test, outcome = line.get("id"), line.get("outcome")
        if isinstance(test, str) and outcome in OUTCOMES:
            proc.outcomes[test] = str(outcome)
            reported = line.get("reported")
            if isinstance(reported, str):
                proc.reported[test] = reported
    elif kind in ("tamper", "changed"):
        what = str(line.get("what", ""))
        found = proc.tampered if kind == "tamper" else proc.changed
        if what and what not in found:
            found.append(what)
