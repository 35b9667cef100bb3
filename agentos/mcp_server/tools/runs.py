"""The MCP tools that start, follow and cancel runs: run_task, task_status, runs_list, run_events,
run_log and run_cancel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp.server.fastmcp import Context
from pydantic import Field

from agentos.errors import BadInput
from agentos.guardian import SUPERVISOR
from agentos.mcp_server import models as m
from agentos.mcp_server.paths import PATH_MAX, Confinement
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, REQUEST_MAX, Registrar, call
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.mcp_server.server import AgentOSServer


LOG_TAIL = 2000
FOLLOW_POLL = 0.25  # seconds between looks at a run that run_task(wait=true) follows

# What the library calls the arguments of `agentos run`, and what run_task calls them.
_CLI_NAMES = {"REQUEST": "request", "--repo": "repo", "--agent": "agent"}


def register(server: AgentOSServer, tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools run_task, task_status, runs_list, run_events, run_log and run_cancel."""
    _start_tools(server, tool, ws, fence)
    _run_followers(tool, ws)


def _start_tools(server: AgentOSServer, tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools run_task and task_status."""

    @tool(
        "Start a run",
        readOnlyHint=False,
        destructiveHint=True,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def run_task(
        request: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the agents should do.")
        ],
        repo: Annotated[
            str | None,
            Field(
                max_length=PATH_MAX,
                description="The git repository to work on (default: the server's first --repo).",
            ),
        ] = None,
        force: Annotated[
            bool,
            Field(
                description="Start even when the interview blocks the request (the receipt "
                "records the override)."
            ),
        ] = False,
        agent: Annotated[
            str | None,
            Field(
                max_length=NAME_MAX,
                description="NAME or NAME@VERSION: this hub package takes the request instead "
                "of the routing cards.",
            ),
        ] = None,
        merge: Annotated[
            bool,
            Field(
                description="False leaves the passing work on its branches for review "
                "(status ready) instead of merging it."
            ),
        ] = True,
        allow_test_changes: Annotated[
            bool,
            Field(
                description="Let the agents change the base's tests (update them for a new "
                "API): the gate records the changes instead of refusing them."
            ),
        ] = False,
        wait: Annotated[
            bool,
            Field(
                description="Answer when the run ends, sending each of its events meanwhile "
                "as a progress notification (with a progressToken) and an info log message."
            ),
        ] = False,
        ctx: Context[Any, Any, Any] | None = None,
    ) -> m.RunStarted:
        """Start a run in the background and return its id at once (or, with wait, when it
        ends): interview, route, agents in tmux sessions on their own git worktrees, the
        gate, then merge. A request the interview blocks is refused at once,
        with its questions (unless forced). Follow it with task_status or run_events."""

        def work() -> m.RunStarted:
            from agentos.cluster import backend_of
            from agentos.guardian import RAY_DISPATCH
            from agentos.run.control import start_detached
            from agentos.run.orchestrator import RunOptions

            if repo is None:
                target = fence.default_repo
                if target is None:
                    raise BadInput(
                        "give the repository to work on (the server was started without --repo)",
                        field="repo",
                    )
            else:
                target = fence.path(repo, "repo")
            options = RunOptions(
                force=force, agent=agent, merge=merge, allow_test_changes=allow_test_changes
            )
            try:
                run_id, log_file = start_detached(
                    ws,
                    request,
                    target,
                    options,
                    supervisor=SUPERVISOR,
                    # cluster.backend: ray runs the agents on the cluster, as `agentos run`
                    dispatch=RAY_DISPATCH if backend_of(ws) == "ray" else None,
                )
            except BadInput as exc:  # it names the CLI's arguments: name this tool's
                exc.field = _CLI_NAMES.get(exc.field or "", exc.field)
                raise
            return m.RunStarted(
                run_id=run_id, status="started", repo=str(target), log=str(log_file)
            )

        started = await call(work)
        if not wait:
            return started
        record = await _follow(server, ws, started.run_id, ctx)
        return started.model_copy(update={"status": record.status, "message": record.message})

    @tool("Status of a run", **READ_ONLY)
    async def task_status(
        run_id: Annotated[
            str,
            Field(max_length=NAME_MAX, description="The id run_task returned (or a unique part)."),
        ],
    ) -> m.TaskStatus:
        """The state of a run: its status (starting, running, ... succeeded, failed), the
        decision, each agent's status, attempts and last gate (each failing check's name and
        the tail of its output), the run's receipts and the end of the orchestrator's
        log."""

        def work() -> m.TaskStatus:
            from agentos.receipts import list_receipts
            from agentos.run.control import log_tail, status
            from agentos.run.values import tail
            from agentos.workspace.files import RunFiles

            record = status(ws, run_id)
            data = record.as_dict()
            data["run_id"] = data.pop("id")
            files = RunFiles.of(ws, record.id)
            for agent, raw in zip(record.agents, data["agents"], strict=True):
                raw["gate_summary"] = (agent.gate or {}).get("summary")
                raw["failing_checks"] = agent.failing_checks
                raw["output_tail"] = tail(files.agent(agent.agent).log, LOG_TAIL)
            data["finished"] = record.status.final
            data["receipts"] = [r.id for r in list_receipts(ws, run_id=record.id)]
            data["log_tail"] = log_tail(ws, record.id, LOG_TAIL)
            return m.TaskStatus.model_validate(data)

        return await call(work)


def _run_followers(tool: Registrar, ws: Workspace) -> None:
    """The tools that list runs, follow one (its events, its logs) and cancel it."""

    @tool("List runs", **READ_ONLY)
    async def runs_list(
        status: Annotated[
            str | None,
            Field(max_length=NAME_MAX, description="Only runs with this status (e.g. running)."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="How many, newest first.")] = 20,
    ) -> m.RunList:
        """The workspace's runs, newest first: id, status, request, repository, times."""

        def work() -> m.RunList:
            from agentos.run.store import RunStatus, RunStore

            try:
                wanted = (RunStatus(status),) if status else None
            except ValueError:
                names = ", ".join(s.value for s in RunStatus)
                raise BadInput(
                    f"not a run status: {status!r} (one of {names})", field="status"
                ) from None
            store = RunStore(ws)
            try:
                records = store.list(statuses=wanted, limit=limit)
            finally:
                store.close()
            return m.RunList(
                runs=[
                    m.RunSummary(
                        run_id=r.id,
                        status=r.status,
                        request=r.request,
                        repo=r.repo,
                        created_at=r.created_at,
                        ended_at=r.ended_at,
                        message=r.message,
                    )
                    for r in records
                ]
            )

        return await call(work)

    @tool("Events of a run", **READ_ONLY)
    async def run_events(
        run_id: Annotated[str, Field(max_length=NAME_MAX, description="The run's id.")],
        offset: Annotated[
            int, Field(ge=0, description="0, then the next_offset of the last answer.")
        ] = 0,
    ) -> m.RunEvents:
        """What the run did since `offset`: phases (its status), each agent's steps, notes.
        Ask again from next_offset to follow it; finished says it ended."""

        def work() -> m.RunEvents:
            from agentos.run import control

            record = control.status(ws, run_id)
            events, next_offset = control.events(ws, record.id, offset)
            return m.RunEvents(
                run_id=record.id,
                events=[m.RunEventOut.model_validate(e.as_dict()) for e in events],
                next_offset=next_offset,
                finished=record.status.final,
            )

        return await call(work)

    @tool("Log of a run", **READ_ONLY)
    async def run_log(
        run_id: Annotated[str, Field(max_length=NAME_MAX, description="The run's id.")],
        agent: Annotated[
            str | None,
            Field(max_length=NAME_MAX, description="An agent's pane output; none: the run's."),
        ] = None,
        offset: Annotated[
            int, Field(ge=0, description="0, then the next_offset of the last answer.")
        ] = 0,
        limit: Annotated[
            int, Field(ge=1, le=1_048_576, description="At most this many bytes.")
        ] = 65536,
    ) -> m.RunLog:
        """A log of the run from `offset`: an agent's pane output (what it printed), or the
        run's own log. Ask again from next_offset to follow it."""

        def work() -> m.RunLog:
            from agentos.run import control
            from agentos.workspace.files import RunFiles

            record = control.status(ws, run_id)
            files = RunFiles.of(ws, record.id)
            if agent is None:
                path = files.orchestrator_log
            elif agent in {a.agent for a in record.agents}:
                path = files.agent(agent).log
            else:
                raise BadInput(f"run {record.id} has no agent {agent!r}", field="agent")
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    data = fh.read(limit)
            except FileNotFoundError:
                data = b""
            return m.RunLog(
                run_id=record.id,
                agent=agent,
                text=data.decode("utf-8", errors="replace"),
                next_offset=offset + len(data),
                finished=record.status.final,
            )

        return await call(work)

    @tool(
        "Cancel a run",
        readOnlyHint=False,
        destructiveHint=True,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def run_cancel(
        run_id: Annotated[str, Field(max_length=NAME_MAX, description="The run's id.")],
        wait: Annotated[
            float, Field(gt=0, le=600, description="Seconds to wait for it to tear down.")
        ] = 30.0,
    ) -> m.RunCancelled:
        """Cancel a live run: its agents stop, their work is kept on their branches, nothing
        is merged. Answers once the run has torn down."""

        def work() -> m.RunCancelled:
            from agentos.run import control

            record = control.status(ws, run_id)
            return m.RunCancelled(run_id=record.id, status=control.cancel(ws, record.id, wait=wait))

        return await call(work)


async def _follow(
    server: AgentOSServer, ws: Workspace, run_id: str, ctx: Context[Any, Any, Any] | None
) -> Any:
    """Until the run ends: each new event as a progress notification (the request's
    progressToken, if it gave one) and an info log message; the run's final record."""
    from agentos.run import control

    offset = 0
    while True:
        record = await call(control.status, ws, run_id)
        events, offset = await call(control.events, ws, run_id, offset)
        for event in events:
            if ctx is not None:
                await ctx.report_progress(event.seq, None, event.message)
            await server.log("info", event.message)
        if record.status.final:
            return record
        await anyio.sleep(FOLLOW_POLL)
