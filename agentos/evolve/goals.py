"""The Goal Proposer: what to work on next, as concrete requests, from what AgentOS has
seen fail.

Three sources, in order of weight:

- **eval tasks** an agent got wrong: the newest report of each suite and agent;
- **gate checks** that fail: the newest gate receipt of each (repository, check), so a
  check that failed once and passed since is not proposed;
- **TODO and FIXME** lines in the knowledge store's chunks.

Each becomes one request that says what to fix, where, and when it is done ("Fix … in
FILE; done when CHECK passes"). Only requests the interview lets through are proposed: a
proposal is something a run can start on. The same state gives the same list: ties are
broken by source, place and text, never by time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError
from agentos.workspace.layout import Workspace

GATE_RECEIPTS = 500  # the newest gate receipts read
KB_HITS = 50  # chunks asked of the knowledge store
TEXT_MAX = 160  # characters of evidence quoted in a request
_TODO = re.compile(r"\b(TODO|FIXME)\b[:\s(]*(.*)")
_WEIGHT = {"eval": 3.0, "gate": 2.0, "todo": 1.0}


@dataclass(frozen=True)
class Goal:
    request: str
    source: str  # eval | gate | todo
    where: str  # suite/task, repo: check, file:line
    rank: float  # higher first
    ambiguity: float  # the interview's, lower is clearer

    def as_dict(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "source": self.source,
            "where": self.where,
            "rank": round(self.rank, 4),
            "ambiguity": round(self.ambiguity, 3),
        }


def propose(
    ws: Workspace, *, repo: Path | None = None, suite: str | None = None, limit: int = 20
) -> list[Goal]:
    """The ranked proposals (at most ``limit``); ``repo`` keeps those of one repository
    (its failing gate checks and TODOs), ``suite`` those of one eval suite."""
    from agentos.interview.engine import interview_in

    repo = repo.expanduser().resolve() if repo is not None else None
    evals = suite is not None or repo is None  # --repo alone: that repository's goals
    repos = repo is not None or suite is None  # --suite alone: that suite's
    found = [
        *(_from_evals(ws, suite) if evals else []),
        *(_from_gates(ws, repo) if repos else []),
        *(_from_todos(ws, repo) if repos else []),
    ]
    seen: set[str] = set()
    goals = []
    for source, where, rank, request in found:
        if request in seen:
            continue
        seen.add(request)
        verdict = interview_in(ws, request, rewrite=False)
        if verdict.passed:
            goals.append(Goal(request, source, where, rank, verdict.ambiguity))
    order = list(_WEIGHT)
    goals.sort(key=lambda g: (-g.rank, order.index(g.source), g.where, g.request))
    return goals[:limit]


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= TEXT_MAX else one[: TEXT_MAX - 1] + "…"


def _from_evals(ws: Workspace, suite: str | None) -> list[tuple[str, str, float, str]]:
    from agentos.evals.reports import list_reports, load_report

    out = []
    newest: set[tuple[str, str]] = set()
    for report in list_reports(ws):  # newest first
        agent = str(report.get("agent", "")).split(" ")[0]  # evolve labels: "NAME@V (...)"
        name = agent.split("@")[0]
        key = (str(report.get("suite")), name)
        if key in newest or (suite is not None and key[0] != suite) or " " in report["agent"]:
            continue
        newest.add(key)
        _, predictions = load_report(ws, str(report["id"]))
        for p in predictions:
            if p.get("score", 0) >= 1:
                continue
            where = f"{key[0]}/{p['task']}"
            request = (
                f"Fix the agent package {name} (hub package {agent}) so that it answers "
                f"task '{p['task']}' of the eval suite {key[0]} right "
                f"({_short(str(p.get('feedback', '')))}); done when `agentos eval run "
                f"{key[0]} --agent {name}` scores task '{p['task']}' 1."
            )
            out.append(("eval", where, _WEIGHT["eval"] + (1 - float(p["score"])), request))
    return out


def _from_gates(ws: Workspace, repo: Path | None) -> list[tuple[str, str, float, str]]:
    from agentos.receipts import list_receipts, parse_receipt, read_receipt
    from agentos.run.store import RunStore

    if not ws.state.shared and not ws.state_db.is_file():
        return []
    gates = [r for r in list_receipts(ws) if r.kind == "gate"][-GATE_RECEIPTS:]
    repos: dict[str, str | None] = {}
    decided: set[tuple[str, str]] = set()
    out = []
    store = RunStore(ws)
    try:
        for age, info in enumerate(reversed(gates)):  # newest first
            if info.run_id is None:
                continue
            if info.run_id not in repos:
                try:
                    repos[info.run_id] = store.get(info.run_id).repo
                except AgentOSError:
                    repos[info.run_id] = None
            where_repo = repos[info.run_id]
            if where_repo is None or (repo is not None and Path(where_repo) != repo):
                continue
            fields = parse_receipt(read_receipt(ws, info.id)).fields
            checks = fields.get("checks")
            for check in checks if isinstance(checks, list) else []:
                if not isinstance(check, dict) or "name" not in check:
                    continue
                key = (where_repo, str(check["name"]))
                if key in decided:
                    continue
                decided.add(key)
                if check.get("result") != "fail":
                    continue
                tail = [line for line in str(check.get("output_tail", "")).splitlines() if line]
                why = f" ({_short(tail[-1])})" if tail else ""
                request = (
                    f"Fix the failing check `{check['name']}` in {where_repo}{why}; done "
                    f"when `{check['name']}` passes."
                )
                rank = _WEIGHT["gate"] + 1 / (2 + age)  # the newer, the higher
                out.append(("gate", f"{where_repo}: {check['name']}", rank, request))
    finally:
        store.close()
    return out


def _from_todos(ws: Workspace, repo: Path | None) -> list[tuple[str, str, float, str]]:
    from agentos.knowledge.store import open_store

    if not ws.knowledge_db.is_file():
        return []
    with open_store(ws) as store:
        hits = store.search("TODO FIXME", k=KB_HITS, under=repo)
    out = []
    places: set[tuple[Path, int]] = set()
    for hit in hits:
        try:
            lines = hit.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number in range(hit.start_line, min(hit.end_line, len(lines)) + 1):
            found = _TODO.search(lines[number - 1])
            if found is None or (hit.path, number) in places:
                continue
            places.add((hit.path, number))
            shown = (
                hit.path.relative_to(repo) if repo and hit.path.is_relative_to(repo) else hit.path
            )
            what = _short(found.group(2).rstrip("*/#-> ").strip()) or "this"
            request = (
                f"Resolve the {found.group(1)} in {shown}:{number}: {what}; done when the "
                "tests pass."
            )
            out.append(("todo", f"{shown}:{number}", _WEIGHT["todo"], request))
    return out
