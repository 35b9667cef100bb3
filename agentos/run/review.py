"""Review before merge: a run's passing work, looked at, landed or dropped after the run.

What lands on the target branch is always exactly the commit each agent's passing gate
judged, squashed into one commit per agent (or one per run, ``run.squash: run``) whose
message names the request, the run, agent@version and its gate receipts. Earlier attempts
never reach the target; they stay on the agent's branch, which is moved out of sight to
``refs/agentos/runs/<run>/<agent>`` once the run is merged or discarded, so every commit a
receipt names stays in the repository until ``runs prune`` removes it.

``agentos run --no-merge`` ends with the work on its branches (status ``ready``):
:func:`run_diff` shows it, :func:`merge_run` lands it under the same all-or-nothing rules
as a run's own merge, :func:`discard_run` drops it. :func:`prune` (``runs prune``,
``gc --branches``) removes what finished runs kept once it is older than ``run.keep_days``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import BadInput, NotFound, OperationFailed
from agentos.gate.judge import TestChanges
from agentos.receipts import write_receipt
from agentos.run.liveness import keep_alive
from agentos.run.store import (
    ACTIVE,
    AgentRecord,
    AgentStatus,
    RunRecord,
    RunStatus,
    RunStore,
    process_start,
    require_here,
)
from agentos.workspace.layout import Workspace
from agentos.worktrees import landing
from agentos.worktrees import repo as wt

if TYPE_CHECKING:
    from agentos.shared.checks import CheckSpec

DAY = 24 * 3600


@dataclass(frozen=True)
class AgentWork:
    """What one agent of a run leaves to land: the commit its passing gate judged."""

    agent: str
    version: str
    card: str
    branch: str
    commit: str
    receipts: tuple[str, ...] = ()
    gated_here: bool = True  # False: a node of a cluster gated it (agentos.cluster)


def landing_message(request: str, run_id: str, work: AgentWork) -> str:
    """The message of the commit that lands ``work``: the request's first line as the
    subject, then the whole request, the run, agent@version and its gate receipts."""
    lines = request.strip().splitlines() or [""]
    subject = lines[0] if len(lines[0]) <= 72 else lines[0][:69].rstrip() + "..."
    return (
        f"{subject}\n\n"
        f"Request: {request.strip()}\n"
        f"Run: {run_id}\n"
        f"Agent: {work.agent}@{work.version} via {work.card}\n"
        f"Receipts: {', '.join(work.receipts) or '(none)'}\n"
    )


def land(
    ws: Workspace,
    repo: Path,
    target: str,
    run_id: str,
    request: str,
    work: list[AgentWork],
    *,
    gate: landing.IntegrationGate | None = None,
) -> landing.MergeResult:
    """Land every agent's gated commit on ``target``, all or nothing, once ``gate`` passed
    the integrated tree (see :func:`agentos.worktrees.landing.land`)."""
    landings = [
        landing.Landing(
            w.branch, w.commit, landing_message(request, run_id, w), w.agent, w.gated_here
        )
        for w in work
    ]
    return landing.land(
        repo,
        target,
        landings,
        run_id,
        ws.worktrees_dir / run_id / wt.MERGE_DIR,
        squash=ws.settings.run.squash,
        gate=gate,
    )


# --- the integration gate ------------------------------------------------------------------

# Checks that judge one agent's own diff against the run's base: they stay with its gate.
_PER_AGENT = ("no_changes_outside", "max_diff_lines")


@dataclass(frozen=True)
class GateSpec:
    """What the integration gate of a run runs: the checks of its agents (those that judge
    one agent's own diff stay with its gate), the request's named things and the test
    changes it allows. Kept with the run (state.db) for ``runs merge``."""

    checks: tuple[CheckSpec, ...]
    named: tuple[str, ...] = ()
    allow: TestChanges = field(default_factory=TestChanges)

    @classmethod
    def of(
        cls, agents: list[list[CheckSpec]], named: tuple[str, ...], allow: TestChanges
    ) -> GateSpec:
        out: list[CheckSpec] = []
        seen: set[str] = set()
        names: set[str] = set()
        for checks in agents:
            for check in checks:
                key = check.model_dump_json(exclude={"name"})
                if check.kind in _PER_AGENT or key in seen:
                    continue
                seen.add(key)
                name, n = check.name, 1
                while name in names:
                    n += 1
                    name = f"{check.name} [{n}]"
                names.add(name)
                out.append(check if name == check.name else check.model_copy(update={"name": name}))
        return cls(tuple(out), named, allow)

    def as_json(self) -> dict[str, object]:
        return {
            "checks": [c.model_dump(mode="json", exclude_none=True) for c in self.checks],
            "named": list(self.named),
            "allow": self.allow.as_dict(),
        }

    @classmethod
    def from_json(cls, data: object) -> GateSpec | None:
        """The spec a run kept, or None when it kept none (a run of an older AgentOS)."""
        if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
            return None
        from agentos.shared.checks import CheckSpec

        allow = data.get("allow") if isinstance(data.get("allow"), dict) else {}
        assert isinstance(allow, dict)
        return cls(
            tuple(CheckSpec.model_validate(c) for c in data["checks"]),
            tuple(str(n) for n in data.get("named") or []),
            TestChanges(
                bool(allow.get("everything")),
                tuple(str(p) for p in allow.get("paths") or []),
                str(allow.get("why") or ""),
            ),
        )


def integration_gate(
    ws: Workspace, repo: Path, run_id: str, spec: GateSpec | None, agents: list[str]
) -> landing.IntegrationGate | None:
    """The gate :func:`agentos.worktrees.landing.land` runs on the integration commit before the
    target moves: ``spec``'s checks on that tree, confined as every check is, its tests
    judged against the target commit it was made on; a "gate" receipt says what it found.
    None when there is nothing to check."""
    if spec is None or not spec.checks:
        return None

    def gate(tree: Path, commit: str, onto: str) -> landing.IntegrationVerdict:
        from agentos.gate.environment import gate_confiner, gate_environment
        from agentos.gate.repo import repo_profile
        from agentos.gate.results import write_gate_receipt
        from agentos.gate.runner import run_gate, run_judging

        profile = repo_profile(ws, repo, at=onto, ask=False)  # its problems: not read here
        env = gate_environment(profile, tree)
        result = run_gate(
            list(spec.checks),
            tree,
            base=onto,
            env=env,
            profile=profile,
            confiner=gate_confiner(ws, tree, profile, env),
            judging=run_judging(ws, run_id, "_integration", onto, spec.named, spec.allow),
        )
        receipt = write_gate_receipt(
            ws,
            result,
            run_id=run_id,
            context={
                "via": "integration gate",
                "agents": agents,
                "commit": commit,
                "onto": onto,
            },
        )
        summary = result.summary()
        for failure in result.failures[:1]:
            first = next((line for line in failure.output_tail.splitlines() if line.strip()), "")
            summary += f"; {failure.name}: {first.strip()}"[:400]
        return landing.IntegrationVerdict(result.passed, summary, receipt.id)

    return gate


def archive_branches(repo: Path, run_id: str, agents: list[tuple[str, str]]) -> None:
    """Move each ``(agent, branch)`` of a run out of sight (see :func:`wt.archive_ref`)."""
    for agent, branch in agents:
        if branch:
            wt.archive_branch(repo, branch, wt.archive_ref(run_id, agent))


# --- after the run --------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentDiff:
    agent: str
    base: str
    commit: str | None  # None when the agent left nothing (no branch, no commit)
    stat: str
    patch: str

    def as_dict(self) -> dict[str, object]:
        return {
            "agent": self.agent,
            "base": self.base,
            "commit": self.commit,
            "stat": self.stat,
            "patch": self.patch,
        }


def _record(ws: Workspace, run_id: str) -> RunRecord:
    store = RunStore(ws)
    try:
        return store.get(run_id)
    finally:
        store.close()


def _repo(record: RunRecord, ws: Workspace | None = None) -> Path:
    if ws is not None:  # its repository and branches are on the host that ran it
        require_here(ws, record, "review and merge it")
    repo = Path(record.repo)
    if not repo.is_dir():
        raise NotFound(f"the repository of run {record.id} is gone", file=repo, field="repo")
    return repo


def _agent_commit(repo: Path, record: RunRecord, agent: str, gated: str | None) -> str | None:
    """The commit to show or land for an agent: the one its passing gate judged, else the
    tip of its branch (kept or archived)."""
    if gated:
        return gated
    for name in (
        f"refs/heads/{wt.branch_name(record.id, agent)}",
        wt.archive_ref(record.id, agent),
    ):
        found = wt.rev(repo, name)
        if found:
            return found
    return None


def run_diff(ws: Workspace, run_id: str, agent: str | None = None) -> list[AgentDiff]:
    """Each agent's work in a run against the run's base: the passing state when its gate
    passed, else the last state on its branch."""
    record = _record(ws, run_id)
    repo = _repo(record, ws)
    agents = [a for a in record.agents if agent is None or a.agent == agent]
    if agent is not None and not agents:
        known = ", ".join(a.agent for a in record.agents) or "none"
        raise NotFound(f"no agent {agent!r} in run {record.id} (agents: {known})", field="AGENT")
    base = record.base_commit or ""
    out = []
    for a in agents:
        commit = _agent_commit(repo, record, a.agent, a.gated_commit)
        if commit is None:
            out.append(AgentDiff(a.agent, base, None, "", ""))
            continue
        out.append(
            AgentDiff(
                a.agent,
                base,
                commit,
                wt.diff(repo, base, commit, stat=True),
                wt.diff(repo, base, commit),
            )
        )
    return out


@dataclass
class MergeOutcome:
    run_id: str
    status: str
    result: landing.MergeResult
    receipt: str

    def as_dict(self) -> dict[str, object]:
        return {
            "run": self.run_id,
            "status": self.status,
            "merged": self.result.merged,
            "commit": self.result.commit,
            "commits": self.result.commits,
            "conflicts": self.result.conflicts,
            "message": self.result.message,
            "receipt": self.receipt,
        }


MERGEABLE = (RunStatus.READY, RunStatus.CONFLICT)  # every gate passed, and nothing landed yet
# With --agent: also a failed run, whose named agents passed their gates.
MERGEABLE_AGENTS = (*MERGEABLE, RunStatus.FAILED)


def merge_fields(
    result: landing.MergeResult, target: str, work: list[AgentWork], via: str
) -> dict[str, object]:
    """The fields of a "merge" receipt."""
    fields: dict[str, object] = {
        "via": via,
        "merged": result.merged,
        "commit": result.commit,
        "commits": result.commits,
        "conflicts": result.conflicts,
        "conflicting_branch": result.conflicting_branch,
        "message": result.message,
        "target": target,
        "onto": result.onto,
        "landed": {w.agent: w.commit for w in work},
    }
    if result.gate is not None:
        fields["integration_gate"] = result.gate.as_dict()
    return fields


def merge_run(ws: Workspace, run_id: str, agents: Sequence[str] = ()) -> MergeOutcome:
    """Land a run whose work did not land on its target branch, as the run itself would
    have: exactly the gated commits, squashed, all or nothing, once the integration gate
    passed the tree that lands (the target may have moved since the run: then the checks
    run again on the new combination). Without ``agents``: a run whose gates all passed
    (``run --no-merge``: ready; or a conflict). With ``agents``: those agents alone, whose
    gates passed, of a ready, conflict or failed run; the others' branches are kept. The run
    is ``succeeded`` once it landed. While it merges, the run is ``merging`` under this
    process, so that neither gc nor a second merge touches it."""
    record = _record(ws, run_id)
    blocked = (record.options or {}).get("no_merge")
    if blocked:
        raise BadInput(f"run {record.id} must not be merged: {blocked}", field="ID")
    repo = _repo(record, ws)
    target = record.target_branch or ""
    if wt.head(repo)[0] == target:
        wt.refuse_uncommitted(repo, f"on {target}")
    chosen = _chosen_agents(record, agents)
    work = [_gated_work(repo, record, a) for a in chosen]
    work = [w for w in work if w.commit != _verifier_base(repo, record, w)]
    allowed = MERGEABLE_AGENTS if agents else MERGEABLE
    store = RunStore(ws)
    try:
        me = os.getpid()
        if not store.claim(
            record.id, allowed, RunStatus.MERGING, pid=me, pid_start=process_start(me)
        ):
            now = store.get(record.id).status
            which = (
                "a ready, conflict or failed run"
                if agents
                else "a run that passed its gate and "
                "was not merged (run --no-merge: ready, or a conflict)"
            )
            raise BadInput(
                f"run {record.id} has status {now}; only {which} can be merged", field="ID"
            )
        status, message = record.status, "the merge failed; nothing was merged"
        spec = GateSpec.from_json((record.options or {}).get("gate"))
        try:
            with keep_alive(ws):  # other hosts see that the merging run's host is alive
                result = land(
                    ws,
                    repo,
                    target,
                    record.id,
                    record.request,
                    work,
                    gate=integration_gate(ws, repo, record.id, spec, [w.agent for w in work]),
                )
            via = "agentos runs merge" + (f" --agent {' --agent '.join(agents)}" if agents else "")
            receipt = write_receipt(
                ws,
                "merge",
                merge_fields(result, target, work, via),
                run_id=record.id,
                about=record.request,
            )
            if result.merged:
                archive_branches(repo, record.id, [(w.agent, w.branch) for w in work])
                status, message = RunStatus.SUCCEEDED, result.message
                left = [a.agent for a in record.agents if a.agent not in {c.agent for c in chosen}]
                if left:
                    message += f"; not landed: {', '.join(left)} (their branches are kept)"
                    result.message = message
            else:
                message = result.message + "; nothing was merged"
        finally:
            store.update(record.id, status=status, message=message)
    finally:
        store.close()
    return MergeOutcome(record.id, status, result, receipt.id)


def _chosen_agents(record: RunRecord, names: Sequence[str]) -> list[AgentRecord]:
    if not names:
        return list(record.agents)
    known = {a.agent: a for a in record.agents}
    missing = [n for n in names if n not in known]
    if missing:
        have = ", ".join(known) or "none"
        raise NotFound(
            f"no agent {missing[0]!r} in run {record.id} (agents: {have})", field="--agent"
        )
    return [known[n] for n in dict.fromkeys(names)]


def _verifier_base(repo: Path, record: RunRecord, work: AgentWork) -> str | None:
    """The commit a verifier of the run started from (its work is that commit when it
    changed nothing: there is nothing of its own to land)."""
    if work.commit == wt.rev(repo, landing.integrated_ref(record.id)):
        return work.commit
    return None


def _gated_work(repo: Path, record: RunRecord, agent: AgentRecord) -> AgentWork:
    if agent.status is not AgentStatus.PASSED or not agent.gated_commit:
        raise OperationFailed(f"agent {agent.agent} of run {record.id} has no passing commit")
    if wt.rev(repo, agent.gated_commit) is None:
        raise OperationFailed(
            f"the commit {agent.gated_commit[:12]} that {agent.agent}'s gate passed is gone "
            f"from {repo} (pruned?)"
        )
    return AgentWork(
        agent.agent,
        agent.version,
        agent.card or "",
        agent.branch or wt.branch_name(record.id, agent.agent),
        agent.gated_commit,
        agent.receipts,
        gated_here=agent.agent not in ((record.options or {}).get("cluster") or {}),
    )


def landed_commits(repo: Path, run: RunRecord) -> list[str]:
    """The commits a run landed on its target since its base (found by the ``Run:`` line
    of their messages), newest first: how gc tells a merge that completed before its
    process died from one cut short."""
    if not (run.target_branch and run.base_commit):
        return []
    revs = f"{run.base_commit}..refs/heads/{run.target_branch}"
    return wt.log_grep(repo, revs, f"Run: {run.id}")


def discard_run(ws: Workspace, run_id: str) -> list[str]:
    """Drop a finished run's kept work: its branches leave the branch list (their commits
    stay under ``refs/agentos/runs/<run>/`` until ``runs prune``). A ``ready`` run becomes
    ``discarded``. Returns the branches dropped."""
    record = _record(ws, run_id)
    if record.status in ACTIVE:
        raise BadInput(f"run {record.id} is still {record.status}: cancel it first", field="ID")
    repo = _repo(record, ws)
    dropped = [a.branch for a in record.agents if a.branch and wt.branch_exists(repo, a.branch)]
    archive_branches(repo, record.id, [(a.agent, a.branch or "") for a in record.agents])
    write_receipt(
        ws, "discard", {"via": "agentos runs discard", "branches": dropped}, run_id=record.id
    )
    store = RunStore(ws)
    try:
        if record.status is RunStatus.READY:
            store.update(record.id, status=RunStatus.DISCARDED, message="discarded by the user")
    finally:
        store.close()
    return dropped


@dataclass
class PruneReport:
    removed: list[str] = field(default_factory=list)  # refs deleted, as repo: ref
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"removed": self.removed, "problems": self.problems}


def prune(ws: Workspace, *, older_than_days: float | None = None) -> PruneReport:
    """Remove what finished runs kept (their branches, the hidden refs of merged and
    discarded runs) once the run ended more than ``older_than_days`` ago (default: the
    workspace's ``run.keep_days``). A live run, or one that ended more recently, is never
    touched, whatever its branches hold."""
    days = ws.settings.run.keep_days if older_than_days is None else older_than_days
    cutoff = time.time() - days * DAY
    report = PruneReport()
    store = RunStore(ws)
    try:
        for record in store.list(limit=1_000_000):
            ended = record.ended_at or record.created_at
            if record.status in ACTIVE or ended > cutoff:
                continue
            repo = Path(record.repo)
            if not repo.is_dir():
                continue
            refs = [
                name
                for prefix in (
                    f"refs/heads/agentos/{record.id}/",
                    f"refs/agentos/runs/{record.id}/",
                )
                for name, _ in wt.refs_under(repo, prefix)
            ]
            if not refs:
                continue
            wt.delete_refs(repo, *refs)
            report.removed.extend(f"{repo}: {ref}" for ref in refs)
            if record.status is RunStatus.READY:
                store.update(
                    record.id,
                    status=RunStatus.DISCARDED,
                    message=f"not merged within {days:g} days; pruned",
                )
    finally:
        store.close()
    return report
