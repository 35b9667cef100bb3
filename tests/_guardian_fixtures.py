"""What the guardian's tests share: agents started in real tmux panes as the orchestrator
starts them (package in the hub, wrapper, env file, exit file, log), with their run and
agent rows written straight into state.db, so a test needs no whole run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from conftest import write_package

from agentos.errors import NotFound
from agentos.hub.store import Hub
from agentos.run.launch import prepare
from agentos.run.sessions import Sessions, session_name
from agentos.run.store import RunStatus, RunStore, new_run_id
from agentos.runtimes import AgentTask
from agentos.workspace.files import AgentFiles, RunFiles
from agentos.workspace.layout import Workspace

# Small numbers so that the whole ladder takes seconds (the interval's floor is 0.05 s).
FAST = {
    "interval": 0.2,
    "stuck_after": 1,
    "max_restarts": 1,
    "kill_after": 2,
    "nudge": "Are you stuck? Continue with the task.",
}


def configure(
    ws: Workspace, guardian: dict[str, Any] | None = None, run: dict[str, Any] | None = None
) -> Workspace:
    """Write agentos.yaml's guardian (and run) settings; a fresh Workspace reads them."""
    data: dict[str, Any] = {"guardian": {**FAST, **(guardian or {})}}
    if run:
        data["run"] = run
    ws.settings_file.write_text(yaml.safe_dump(data))
    return Workspace(ws.root)


@dataclass(frozen=True)
class Launched:
    run_id: str
    agent: str
    session: str
    files: AgentFiles
    worktree: Path


def launch(
    ws: Workspace,
    tmp_path: Path,
    agent: str,
    script: str,
    *,
    run_id: str | None = None,
    **manifest: Any,
) -> Launched:
    """Install a shell agent running ``script`` and start it in its pane, as a run would."""
    src = write_package(tmp_path / "src" / agent, name=agent, files={"run.sh": script}, **manifest)
    hub = Hub(ws.hub_dir)
    hub.install(str(src))
    info, pkg = hub.get(agent)
    run_id = run_id or new_run_id()
    worktree = tmp_path / "worktrees" / run_id / agent
    worktree.mkdir(parents=True)
    files = RunFiles.of(ws, run_id).agent(agent)
    task = AgentTask(
        run_id=run_id,
        agent=agent,
        manifest=pkg,
        package_dir=info.path,
        worktree=worktree,
        repo=tmp_path,
        workspace=ws.root,
        request="a test",
        files=files,
    )
    pane, _env = prepare(task, files)
    session = session_name(run_id, agent)
    store = RunStore(ws)
    try:
        try:
            store.get(run_id)  # a second agent of the same run
        except NotFound:
            store.create(run_id, "a test", tmp_path, status=RunStatus.RUNNING)
            store.update(run_id, started_at=time.time())
        store.add_agent(
            run_id,
            agent,
            pkg.version,
            session=session,
            worktree=str(worktree),
            branch=f"agentos/{run_id}/{agent}",
            status="running",
            attempts=1,
            started_at=time.time(),
        )
    finally:
        store.close()
    Sessions(ws.root).start(session, pane, worktree)
    return Launched(run_id, agent, session, files, worktree)


def interventions(ws: Workspace, run_id: str | None = None) -> list[tuple[str, str, str]]:
    """(agent, action, receipt) of every intervention in state.db, oldest first."""
    store = RunStore(ws)
    try:
        sql = "SELECT agent, action, receipt FROM interventions"
        args: tuple[str, ...] = ()
        if run_id:
            sql += " WHERE run_id = ?"
            args = (run_id,)
        return [tuple(r) for r in store.query(sql + " ORDER BY id", args)]
    finally:
        store.close()
