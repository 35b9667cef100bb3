"""The documents AgentOS shows: what each ``--json`` command prints, built in one place.

The CLI prints them, the dashboard's JSON API serves them and the terminal UI reads them,
so the three never disagree (``GET /api/runs/ID`` is ``agentos runs show ID --json``).
Each function takes the workspace and returns plain JSON-ready data; none prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.run.store import RunRecord

LOG_CHUNK = 256 * 1024  # the most of an agent's log one read hands back


def runs(ws: Workspace, limit: int = 20) -> dict[str, Any]:
    """``agentos runs list --json``: recent runs, newest first."""
    from agentos.run.store import RunStore

    store = RunStore(ws)
    try:
        return {"runs": [r.as_dict() for r in store.list(limit=limit)]}
    finally:
        store.close()


def run(ws: Workspace, run_id: str) -> dict[str, Any]:
    """``agentos runs show ID --json``: a run, its agents and its receipts' ids."""
    from agentos.run.control import status

    return run_of(ws, status(ws, run_id))


def run_of(ws: Workspace, record: RunRecord) -> dict[str, Any]:
    """:func:`run` for a run whose record the caller has already read."""
    from agentos.receipts import list_receipts

    receipts = [r.id for r in list_receipts(ws, run_id=record.id)]
    return {**record.as_dict(), "receipts": receipts}


def live(ws: Workspace) -> dict[str, Any]:
    """``agentos status --json``: the runs in progress and each agent's health from the
    guardian's last cycle."""
    from agentos.guardian.store import last_health
    from agentos.run.store import ACTIVE, RunStore

    store = RunStore(ws)
    try:
        records = store.list(statuses=ACTIVE)
    finally:
        store.close()
    health = last_health(ws) if records else {}
    out = []
    for r in records:
        agents = {a.agent: health.get(a.session or "") for a in r.agents}
        if (r.options or {}).get("cluster"):  # agents on nodes: measured there, judged here
            from agentos.guardian.remote import remote_health

            for a in r.agents:
                agents[a.agent] = agents[a.agent] or remote_health(ws, r, a)
        out.append({**r.as_dict(), "health": agents})
    return {"runs": out}


def agent_log(ws: Workspace, run_id: str, agent: str, offset: int = 0) -> dict[str, Any]:
    """What agent ``agent`` of run ``run_id`` printed from byte ``offset`` of its pane log
    (at most :data:`LOG_CHUNK`), and the offset to read from next time."""
    from agentos.errors import BadInput
    from agentos.run.control import RUN_ID
    from agentos.shared.fs import read_regular

    if not RUN_ID.fullmatch(run_id):
        raise BadInput(f"not a run id: {run_id!r}", field="run")
    if not RUN_ID.fullmatch(agent):  # an agent's name is a package name: no path in it
        raise BadInput(f"not an agent name: {agent!r}", field="agent")
    try:
        data = read_regular(ws.logs_dir / run_id / f"{agent}.log", LOG_CHUNK, offset) or b""
    except FileNotFoundError:
        data = b""  # not started yet
    return {
        "run": run_id,
        "agent": agent,
        "text": data.decode("utf-8", errors="replace"),
        "offset": offset + len(data),
    }


def packages(ws: Workspace) -> dict[str, Any]:
    """``agentos hub list --json``: every installed version, and which is active."""
    from agentos.hub.versions import hub_versions, installed_versions

    versions = installed_versions(
        ws.hub_dir, hub_versions(ws.hub_dir / "hub.lock", ws.state_dir / "cache")[1]
    )
    return {"packages": [v.as_dict() for v in versions]}


def receipts(ws: Workspace, run_id: str | None = None, last: int | None = None) -> dict[str, Any]:
    """``agentos receipts list --json``: receipts in chain order, oldest first."""
    from agentos.receipts import list_receipts

    found = list_receipts(ws, run_id=run_id)
    if last is not None:
        found = found[-last:]
    return {"receipts": [r.as_dict() for r in found]}


def receipts_verified(
    ws: Workspace, hashes_only: bool = False, directory: Path | None = None
) -> dict[str, Any]:
    """``agentos receipts verify --json``: whether the chain is intact, what is not, and
    what else is true of it (signing off, macs not checked, a replaced key); of the chain
    exported to ``directory``, with it."""
    from agentos.receipts import verify_directory, verify_receipts

    if directory is not None:
        signing = bool(ws.settings_data["receipts"]["sign"])
        found = verify_directory(directory, ws.state_dir, hashes_only=hashes_only, signing=signing)
        return found.as_dict()
    return verify_receipts(ws, hashes_only=hashes_only).as_dict()


def guardian(ws: Workspace) -> dict[str, Any]:
    """``agentos guardian status --json``."""
    from agentos.guardian.daemon import status

    return status(ws)


def knowledge(ws: Workspace, query: str, k: int = 10, under: Path | None = None) -> dict[str, Any]:
    """``agentos kb search QUERY --json``: ranked chunks with their marked snippets."""
    from agentos.knowledge.store import open_store

    with open_store(ws) as store:
        hits = store.search(query, k=k, under=under)
    return {"query": query, "hits": [h.as_dict() for h in hits]}


def evals(ws: Workspace) -> dict[str, Any]:
    """``agentos eval reports --json``: the kept eval reports, newest first."""
    from agentos.evals.reports import list_reports

    return {"evals": list_reports(ws)}


def evolutions(ws: Workspace) -> list[dict[str, Any]]:
    """``agentos evolve list --json``: every evolution, newest first, without archives."""
    from agentos.evolve.archive import list_evolutions
    from agentos.evolve.control import summary

    return [{k: v for k, v in summary(e).items() if k != "archive"} for e in list_evolutions(ws)]


def evolution(ws: Workspace, evo_id: str | None = None) -> dict[str, Any]:
    """``agentos evolve status EVO --json``: an evolution with every generation."""
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.control import summary

    return summary(find_evolution(ws, evo_id))


def workflows(ws: Workspace) -> list[dict[str, Any]]:
    """``agentos workflows list --json``: the workspace's and the bundled workflows (one
    that does not load is left out: ``workflows lint`` names its problem), each with its
    launch template's parameters."""
    from agentos.errors import AgentOSError
    from agentos.workflows.definitions import BUNDLED, load_workflow, workflow_files

    rows: list[dict[str, Any]] = []
    for path in workflow_files(ws):
        try:
            found = load_workflow(path)
        except AgentOSError:
            continue
        template = found.launch_template
        rows.append(
            {
                "id": found.id,
                "name": found.name,
                "description": found.description,
                "phases": [p.name for p in found.phases],
                "parameters": []
                if template is None
                else [p.model_dump(mode="json") for p in template.parameters],
                "bundled": path.parent == BUNDLED,
                "path": str(path),
            }
        )
    return rows


def execution(ws: Workspace, execution_id: str) -> dict[str, Any]:
    """``agentos executions show EXECUTION --json``: a workflow execution and its tasks."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(ws)
    try:
        found = store.execution(execution_id)
        tasks = store.tasks(found.id)
    finally:
        store.close()
    return {**found.as_dict(), "tasks": [t.as_dict() for t in tasks]}


def events(
    ws: Workspace, after: int | None = None, *, run: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """``agentos events --json`` (one object per line there): the stream's events with an
    id over ``after``, oldest first; without ``after``, the newest ``limit`` (of run
    ``run``: its first ``limit``, the run's story from its start)."""
    from agentos.run.store import RunStore

    store = RunStore(ws)
    try:
        if after is None:
            after = 0 if run else max(0, store.last_event_id() - limit)
        return store.events_after(after, run=run, limit=limit)
    finally:
        store.close()
