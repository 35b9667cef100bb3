"""The AgentOS MCP server: tools and resources over the same library calls the CLI makes.

``build_server(ws, repos)`` returns a FastMCP server; :func:`serve` runs it over stdio or
streamable HTTP. Every tool has a description, a typed input schema (with a description
per argument) and structured output (a pydantic model, so clients get an outputSchema);
read-only tools are annotated ``readOnlyHint``. Resources: ``agentos://receipts/{id}``
and ``agentos://cards/{id}``.

Errors never crash the server: an :class:`~agentos.errors.AgentOSError`, a bad or unknown
argument, or anything unexpected comes back as a tool error (``isError``) whose text is one
line. Paths a client passes are confined to the workspace and the allowed repositories
(:mod:`agentos.mcp_server.paths`). Every string argument has a length limit, in the input schema,
and a longer one is refused naming the argument and the limit. Over HTTP, a request needs
the workspace's token and must name this server in its Host and Origin headers
(:mod:`agentos.mcp_server.transport`).

Start-up stays light: the library modules behind the tools (router, knowledge store,
orchestrator, hub...) are imported on first use, so nothing heavy runs before
``initialize``. The server logs to stderr only; with stdio, file descriptor 1 is moved
aside for the protocol and pointed at stderr, so a stray print (ours, a library's, a
child process's) cannot corrupt the protocol stream.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import weakref
from collections.abc import Callable, Collection, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import (
    CallToolResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    LoggingLevel,
    PromptReference,
    ResourceTemplateReference,
    ToolAnnotations,
)
from pydantic import Field, ValidationError

from agentos import __version__
from agentos.errors import REQUEST_MAX_BYTES, AgentOSError, BadInput, NotFound
from agentos.guardian import SUPERVISOR
from agentos.mcp_server import models as m
from agentos.mcp_server import transport
from agentos.mcp_server.auth import token_file, workspace_token
from agentos.mcp_server.paths import PATH_MAX, Confinement
from agentos.shared.address import host_name, listen, serving_address
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

log = logging.getLogger(__name__)

SERVER_NAME = "agentos"
TOOL_NAMES = (
    "route",
    "interview",
    "run_task",
    "task_status",
    "runs_list",
    "run_events",
    "run_log",
    "run_cancel",
    "kb_search",
    "kb_add",
    "receipts_list",
    "receipt_show",
    "hub_list",
    "hub_install",
    "guardian_status",
    "eval_run",
    "eval_report",
    "evolve_start",
    "evolve_status",
    "hub_search",
    "synthesize_capability",
    "create_task",
    "get_tasks",
    "submit_result",
    "save_memory",
)
LOG_TAIL = 2000
FOLLOW_POLL = 0.25  # seconds between looks at a run that run_task(wait=true) follows
# The longest argument each kind of string may be: a request or query is text a person wrote
# (and a run's request must fit one command-line argument); a path is what the file system
# takes; a name or id is short. Longer ones are refused with the argument and the limit.
# A request's limit is the library's (in characters here, a first bound the schema checks;
# agentos.errors.check_request then counts its bytes).
REQUEST_MAX = REQUEST_MAX_BYTES
NAME_MAX = 256
PATHS_MAX = 1000
INSTRUCTIONS = (
    "AgentOS runs versioned AI agents on a git repository. `interview` says whether a request "
    "is clear enough to work on, `route` which agents would take it (and writes a receipt), "
    "`run_task` starts a run and returns its id at once: poll `task_status`. The knowledge "
    "store (`kb_search`, `kb_add`) holds the indexed code; `receipts_list`/`receipt_show` "
    "give the audit trail; `hub_list`/`hub_install` manage agent packages. Paths must lie in "
    "the workspace or an allowed repository."
)

T = TypeVar("T")

# What the library calls the arguments of `agentos run`, and what run_task calls them.
_CLI_NAMES = {"REQUEST": "request", "--repo": "repo", "--agent": "agent"}

READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


F = TypeVar("F", bound=Callable[..., Any])


# What _registrar returns: ``@tool(title, **hints)``.
Registrar = Callable[..., Callable[[Callable[..., Any]], Any]]


def _registrar(server: FastMCP[Any]) -> Callable[..., Callable[[F], F]]:
    """``@tool(title, **hints)``: register with a clean description and annotations."""

    def tool(title: str, **hints: bool) -> Callable[[F], F]:
        def register(fn: F) -> F:
            server.add_tool(
                fn,
                title=title,
                description=inspect.cleandoc(fn.__doc__ or ""),
                annotations=ToolAnnotations(title=title, **hints),
                structured_output=True,
            )
            return fn

        return register

    return tool


# RFC 5424 severities, as MCP's logging names them, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class AgentOSServer(FastMCP[Any]):
    """FastMCP whose tool errors are one clear line, and which refuses unknown arguments.

    It has MCP's logging capability: a session that sets a level (``logging/setLevel``)
    gets a log message at that level or above, e.g. one for each tool that fails; a session
    that never does gets none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log_levels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._ws: Workspace | None = None  # whose tool packages are offered as tools
        self._packaged: set[str] = set()  # the tools made from tool packages
        self._hub_revision: str | None = None
        # Clients are told the tool list can change (tool packages come and go).
        low = self._mcp_server
        plain = low.create_initialization_options

        def options(
            notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        ) -> Any:
            return plain(
                notification_options or NotificationOptions(tools_changed=True),
                experimental_capabilities,
            )

        low.create_initialization_options = options  # type: ignore[method-assign]

        @self._mcp_server.set_logging_level()  # type: ignore[no-untyped-call,untyped-decorator]
        async def set_level(level: LoggingLevel) -> None:
            self._log_levels[self._mcp_server.request_context.session] = level

    async def log(self, level: LoggingLevel, message: str) -> None:
        """A log message to the session of the request being served, if its level lets
        it through; nothing outside a request."""
        try:
            session = self._mcp_server.request_context.session
        except LookupError:
            return
        wanted = self._log_levels.get(session)
        if wanted is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(wanted):
            with suppress(Exception):  # a client gone away must not fail the tool's answer
                await session.send_log_message(level=level, data=message, logger=SERVER_NAME)

    def offer_tool_packages(self, ws: Workspace) -> None:
        """Offer the workspace's tool packages (agentos synth) as tools of their own."""
        self._ws = ws
        self.sync_tool_packages()

    def sync_tool_packages(self) -> bool:
        """Make the offered tool packages those installed now; whether anything changed."""
        if self._ws is None:
            return False
        from agentos.hub.store import Hub

        revision = Hub(self._ws.hub_dir).revision()
        if revision == self._hub_revision:
            return False
        self._hub_revision = revision
        from agentos.synthesis.tools import installed_tools

        for name in self._packaged:
            with suppress(ToolError):
                self.remove_tool(name)
        self._packaged = set()
        for found in installed_tools(self._ws):
            if self._tool_manager.get_tool(found.name) is not None:
                continue  # never shadow a tool of AgentOS's own
            try:
                self._offer(found)
            except Exception:  # one odd package never takes the listing down
                log.warning("tool package %s cannot be offered", found.name, exc_info=True)
                continue
            self._packaged.add(found.name)
        return True

    def _offer(self, found: Any) -> None:
        assert self._ws is not None
        self.add_tool(
            _package_tool(self._ws, found),
            name=found.name,
            title=f"{found.spec.function_name} ({found.name}@{found.version})",
            description=found.spec.docstring,
            annotations=ToolAnnotations(
                title=found.spec.function_name,
                readOnlyHint=True,
                destructiveHint=False,
                idempotentHint=True,
                openWorldHint=False,
            ),
            structured_output=False,
        )

    async def announce_tools(self) -> None:
        """After a tool package came or went: tell the session the tool list changed."""
        if not self.sync_tool_packages():
            return
        with suppress(Exception):  # outside a request, or a client gone: nothing to tell
            await self._mcp_server.request_context.session.send_tool_list_changed()

    async def list_tools(self) -> list[Any]:
        self.sync_tool_packages()
        return await super().list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if self._tool_manager.get_tool(name) is None:
            self.sync_tool_packages()
        try:
            return await self._call_tool(name, arguments)
        except ToolError as exc:
            await self.log("error", str(exc))
            raise

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}")
        known = tool.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise ToolError(
                f"{name}: unknown argument {unknown[0]!r} (it takes: "
                f"{', '.join(known) or 'no arguments'})"
            )
        try:
            result: Any = await super().call_tool(name, arguments)  # a tuple when structured
        except ToolError as exc:
            raise ToolError(_one_line(name, exc.__cause__ or exc)) from None
        if isinstance(result, tuple) and len(result) == 2:
            # The structured half is the model_dump() of the tool's declared pydantic return
            # model, so it fits the outputSchema made from that model. Returning the result
            # whole skips the low-level server's jsonschema re-validation of it, which cost
            # more than most tools themselves (5-15 ms a call).
            content, structured = result
            return CallToolResult(
                content=list(content), structuredContent=structured, isError=False
            )
        return result


_PY_TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list[Any],
    "dict": dict[str, Any],
    "list[str]": list[str],
    "list[int]": list[int],
    "list[float]": list[float],
    "dict[str, str]": dict[str, str],
    "any": Any,
}


def _package_tool(ws: Workspace, found: Any) -> Callable[..., Any]:
    """A function with the tool's signature (FastMCP makes the schema from it) that calls
    the tool package confined, as `agentos tool call` does."""
    import json as _json

    from agentos.synthesis.tools import call_tool

    ref = f"{found.name}@{found.version}"

    async def call(**arguments: Any) -> Any:
        result = await _call(call_tool, ws, ref, _json.dumps(arguments))
        return result if isinstance(result, str) else _json.dumps(result)

    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                p.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[_PY_TYPES[p.type], Field(description=p.description or p.name)],
            )
            for p in found.spec.parameters
        ],
        return_annotation=str,
    )
    call.__name__ = found.spec.function_name
    return call


def _one_line(tool: str, exc: BaseException) -> str:
    if isinstance(exc, AgentOSError):
        return str(exc).replace("\n", " ")
    if isinstance(exc, ValidationError) and exc.title == f"{tool}Arguments":  # FastMCP's model
        err = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        where = where.removeprefix(".") or tool
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "missing required argument"
        elif err["type"] == "string_too_long":  # not the value: it is too long to repeat
            size, limit = len(err["input"]), err["ctx"]["max_length"]
            msg = f"too long ({size:,} characters; the limit is {limit:,})"
        return f"{where}: {msg}"
    if isinstance(exc, ToolError):
        return str(exc)
    log.error("tool %s failed", tool, exc_info=exc)
    return f"{tool}: internal error: {type(exc).__name__}: {exc}".replace("\n", " ")


async def _call(func: Callable[..., T], *args: Any) -> T:
    """Run a blocking library call in a worker thread, so HTTP clients are served meanwhile."""
    return await anyio.to_thread.run_sync(func, *args)


def build_server(
    ws: Workspace,
    repos: Sequence[Path] = (),
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    transport_security: TransportSecuritySettings | None = None,
    only: Collection[str] | None = None,
) -> AgentOSServer:
    """The MCP server of workspace ``ws``; ``repos`` are the repositories clients may name;
    ``transport_security`` says which Host and Origin headers HTTP requests may carry.
    With ``only``, just those tools: no resources, no completions, no tool packages (the
    server an agent of a run gets, :mod:`agentos.mcp_server.agents`)."""
    ws.ensure()
    fence = Confinement(ws.root, repos)
    server = AgentOSServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        host=host,
        port=port,
        log_level="WARNING",
        transport_security=transport_security,
    )
    server._mcp_server.version = __version__  # shown to clients in serverInfo
    tool = _registrar(server)

    _routing_tools(tool, ws)
    _run_tools(server, tool, ws, fence)
    _run_followers(tool, ws)
    _knowledge_tools(tool, ws, fence)
    _receipt_tools(tool, ws)
    _hub_tools(tool, ws, fence)
    _guardian_tools(tool, ws)
    _eval_tools(tool, ws)
    _evolve_tools(tool, ws)
    _synthesis_tools(server, tool, ws)
    _workflow_tools(tool, ws)
    if only is not None:
        for registered in server._tool_manager.list_tools():
            if registered.name not in only:
                server.remove_tool(registered.name)
        return server
    _resources(server, ws)
    _completions(server, ws)
    server.offer_tool_packages(ws)
    return server


def _routing_tools(tool: Registrar, ws: Workspace) -> None:
    """The tools route and interview."""

    @tool(
        "Route a request",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def route(
        request: Annotated[
            str,
            Field(max_length=REQUEST_MAX, description="What should be done, in plain words."),
        ],
        run_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Link the receipt to this run.")
        ] = None,
    ) -> m.RouteResult:
        """Match a request against the routing cards, deterministically, and return the
        decision (route, clarify or no_match), the selected agents with their scores and
        fired triggers, the rejected cards with reasons, and the id of the receipt written."""

        def work() -> m.RouteResult:
            from agentos.routing.router import route as route_request

            if not request.strip():
                raise BadInput("the request is empty", field="request")
            decision, receipt = route_request(ws, request, run_id=run_id)
            return m.RouteResult.model_validate({**decision.as_dict(), "receipt": receipt.id})

        return await _call(work)

    @tool("Interview a request", **READ_ONLY)
    async def interview(
        request: Annotated[str, Field(max_length=REQUEST_MAX, description="The request to score.")],
    ) -> m.InterviewResult:
        """Score a request on five axes (goal, constraints, scope, context, success) and say
        whether it is clear enough to start work; a blocked request gets one question per
        weak axis. Deterministic; writes nothing."""

        def work() -> m.InterviewResult:
            from agentos.interview.engine import interview_in

            return m.InterviewResult.model_validate(interview_in(ws, request).as_dict())

        return await _call(work)


def _run_tools(server: AgentOSServer, tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools that start, follow and cancel runs."""

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
        Stormbreaker gate, then merge. A request the interview blocks is refused at once,
        with its questions (unless forced). Follow it with task_status or run_events."""

        def work() -> m.RunStarted:
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
                    ws, request, target, options, supervisor=SUPERVISOR
                )
            except BadInput as exc:  # it names the CLI's arguments: name this tool's
                exc.field = _CLI_NAMES.get(exc.field or "", exc.field)
                raise
            return m.RunStarted(
                run_id=run_id, status="started", repo=str(target), log=str(log_file)
            )

        started = await _call(work)
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

        return await _call(work)


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

        return await _call(work)

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

        return await _call(work)

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

        return await _call(work)

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

        return await _call(work)


async def _follow(
    server: AgentOSServer, ws: Workspace, run_id: str, ctx: Context[Any, Any, Any] | None
) -> Any:
    """Until the run ends: each new event as a progress notification (the request's
    progressToken, if it gave one) and an info log message; the run's final record."""
    from agentos.run import control

    offset = 0
    while True:
        record = await _call(control.status, ws, run_id)
        events, offset = await _call(control.events, ws, run_id, offset)
        for event in events:
            if ctx is not None:
                await ctx.report_progress(event.seq, None, event.message)
            await server.log("info", event.message)
        if record.status.final:
            return record
        await anyio.sleep(FOLLOW_POLL)


def _knowledge_tools(tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools kb_search and kb_add."""

    @tool("Search the knowledge store", **READ_ONLY)
    async def kb_search(
        query: Annotated[
            str, Field(max_length=REQUEST_MAX, description="Any text; FTS5 syntax is not needed.")
        ],
        k: Annotated[int, Field(ge=1, le=100, description="How many hits.")] = 10,
    ) -> m.KbSearchResult:
        """Full-text search of the knowledge store (the indexed code and docs): ranked
        chunks with path, line range, score and a snippet. Any text is a valid query."""

        def work() -> m.KbSearchResult:
            from agentos.knowledge.store import open_store

            with open_store(ws) as store:
                hits = store.search(query, k)
            return m.KbSearchResult(
                query=query, hits=[m.KbHit.model_validate(h.as_dict()) for h in hits]
            )

        return await _call(work)

    @tool(
        "Add files to the knowledge store",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=True,
        openWorldHint=False,
    )
    async def kb_add(
        paths: Annotated[
            list[Annotated[str, Field(max_length=PATH_MAX)]],
            Field(
                min_length=1,
                max_length=PATHS_MAX,
                description="Files or directories in the workspace or an allowed "
                "repository (relative ones are taken from the first).",
            ),
        ],
    ) -> m.KbAddResult:
        """Index files and directories into the knowledge store, incrementally: unchanged
        files cost almost nothing, changed ones are replaced, deleted ones removed."""

        def work() -> m.KbAddResult:
            from agentos.knowledge.store import open_store

            resolved = [fence.path(p, f"paths[{i}]") for i, p in enumerate(paths)]
            with open_store(ws) as store:
                stats = store.add(resolved)
            return m.KbAddResult(paths=[str(p) for p in resolved], **stats.as_dict())

        return await _call(work)


def _receipt_tools(tool: Registrar, ws: Workspace) -> None:
    """The tools receipts_list and receipt_show."""

    @tool("List receipts", **READ_ONLY)
    async def receipts_list(
        run_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Only this run's receipts.")
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=1000, description="At most this many, the newest.")
        ] = 50,
    ) -> m.ReceiptList:
        """List receipts (every routing decision, interview, gate result, guardian
        intervention and merge) in chain order: id, kind, time, run."""

        def work() -> m.ReceiptList:
            from agentos.receipts import list_receipts

            found = list_receipts(ws, run_id=run_id)
            return m.ReceiptList(
                total=len(found),
                receipts=[m.ReceiptSummary.model_validate(r.as_dict()) for r in found[-limit:]],
            )

        return await _call(work)

    @tool("Show a receipt", **READ_ONLY)
    async def receipt_show(
        id: Annotated[
            str, Field(max_length=NAME_MAX, description="A receipt id, like 00000042 or 42.")
        ],
    ) -> m.ReceiptText:
        """The full text of one receipt, exactly as written (also the resource
        agentos://receipts/{id})."""
        return await _call(_receipt, ws, id)


def _hub_tools(tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools hub_list and hub_install."""

    @tool("List agent packages", **READ_ONLY)
    async def hub_list() -> m.HubList:
        """Every installed agent package version, which one is active, its sha256 and
        source."""

        def work() -> m.HubList:
            from agentos.hub.store import Hub

            return m.HubList(
                packages=[
                    m.HubPackage.model_validate(v.as_dict()) for v in Hub(ws.hub_dir).versions()
                ]
            )

        return await _call(work)

    @tool(
        "Install an agent package",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=True,
        openWorldHint=True,
    )
    async def hub_install(
        source: Annotated[
            str,
            Field(
                max_length=PATH_MAX,
                description=(
                    "A package directory or a .tar.gz made by `agentos hub pack` (in the workspace "
                    "or an allowed repository), or a git URL with an optional @ref."
                ),
            ),
        ],
    ) -> m.HubInstallResult:
        """Install an agent package into the hub and make it the active version. Installing
        the same name@version with other content is refused."""

        def work() -> m.HubInstallResult:

            from agentos.routing.package_cards import install_package

            result, _cards = install_package(ws, fence.hub_source(source))
            return m.HubInstallResult(
                name=result.name,
                version=result.version,
                sha256=result.sha256,
                source=result.source,
                changed=result.changed,
            )

        return await _call(work)


def _eval_tools(tool: Registrar, ws: Workspace) -> None:
    """The tools eval_run and eval_report."""

    @tool(
        "Run an eval",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def eval_run(
        suite: Annotated[
            str,
            Field(max_length=NAME_MAX, description="A suite name (see `agentos eval list`)."),
        ],
        agent: Annotated[str, Field(max_length=NAME_MAX, description="NAME or NAME@VERSION.")],
        split: Annotated[str, Field(max_length=NAME_MAX, description="The split.")] = "tasks",
        samples: Annotated[
            int | None, Field(ge=1, description="Run this many tasks, drawn at random.")
        ] = None,
        seed: Annotated[int | None, Field(description="The draw's seed.")] = None,
        jobs: Annotated[int, Field(ge=1, le=64, description="Tasks at a time.")] = 1,
    ) -> m.EvalReport:
        """Run an agent package on an eval suite of the workspace (evals/NAME) or a bundled
        one, and score it: each task's answer graded, the dimensions, the composite, and
        whether it passed the suite's threshold. Answers when every task is done."""

        def work() -> m.EvalReport:
            from agentos.evals.harness import find_suite, run_eval

            if "/" in suite or suite.startswith("."):
                raise BadInput("give a suite's name, not a path", field="suite")
            report = run_eval(
                ws, find_suite(ws, suite), agent, split=split, samples=samples, seed=seed, jobs=jobs
            )
            return m.EvalReport.model_validate(
                {**report.as_dict(), "predictions": [p.as_dict() for p in report.predictions]}
            )

        return await _call(work)

    @tool("Show an eval's report", **READ_ONLY)
    async def eval_report(
        eval_id: Annotated[str, Field(max_length=NAME_MAX, description="The eval's id.")],
    ) -> m.EvalReport:
        """A kept eval report: its dimensions, composite and each task's answer, score and
        feedback."""

        def work() -> m.EvalReport:
            from agentos.evals.reports import load_report

            report, predictions = load_report(ws, eval_id)
            return m.EvalReport.model_validate({**report, "predictions": predictions})

        return await _call(work)


def _evolve_tools(tool: Registrar, ws: Workspace) -> None:
    """The tools evolve_start and evolve_status."""

    @tool(
        "Start an evolution",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def evolve_start(
        package: Annotated[str, Field(max_length=NAME_MAX, description="NAME or NAME@VERSION.")],
        suite: Annotated[
            str, Field(max_length=NAME_MAX, description="A suite name (see `agentos eval list`).")
        ],
        meta: Annotated[
            str, Field(max_length=NAME_MAX, description="The meta agent, a hub package.")
        ] = "evolve-meta",
        generations: Annotated[int, Field(ge=1, le=1000, description="Generations to make.")] = 5,
        children: Annotated[int, Field(ge=1, le=64, description="Children per parent.")] = 1,
        select: Annotated[
            Literal["random", "latest", "best", "score_prop", "score_child_prop"],
            Field(description="How parents are chosen."),
        ] = "score_child_prop",
        seed: Annotated[int, Field(description="Seeds every selection.")] = 0,
        staged: Annotated[bool, Field(description="The suite's staged sample first.")] = False,
        jobs: Annotated[int, Field(ge=1, le=64, description="Children made at once.")] = 1,
    ) -> m.EvolveStatus:
        """Evolve an agent package against an eval suite in the background: a meta agent
        changes it generation by generation, the suite scores each. Returns at once with the
        evolution's id: follow it with `evolve_status`; `agentos evolve promote` makes a
        generation a hub version."""

        def work() -> m.EvolveStatus:
            from agentos.evolve.control import start_detached, summary
            from agentos.evolve.loop import create

            if "/" in suite or suite.startswith("."):
                raise BadInput("give a suite's name, not a path", field="suite")
            evo = create(
                ws,
                package,
                suite,
                meta=meta,
                generations=generations,
                children=children,
                select=select,
                seed=seed,
                staged=staged,
                jobs=jobs,
            )
            start_detached(evo)
            return m.EvolveStatus.model_validate(summary(evo))

        return await _call(work)

    @tool("Evolution status", **READ_ONLY)
    async def evolve_status(
        evo_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="The evolution (default: newest).")
        ] = None,
    ) -> m.EvolveStatus:
        """An evolution: whether it runs or why it stopped, the best generation, and every
        generation with its parent, verdict, reason and score."""

        def work() -> m.EvolveStatus:
            from agentos.evolve.control import summary
            from agentos.evolve.loop import find_evolution

            return m.EvolveStatus.model_validate(summary(find_evolution(ws, evo_id)))

        return await _call(work)


def _synthesis_tools(server: AgentOSServer, tool: Registrar, ws: Workspace) -> None:
    """The tools hub_search and synthesize_capability."""

    @tool("Search the hub for a capability", **READ_ONLY)
    async def hub_search(
        query: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the package should do.")
        ],
        k: Annotated[int, Field(ge=1, le=100, description="How many to return.")] = 5,
        threshold: Annotated[
            float, Field(ge=0, le=1, description="Only packages scoring at least this.")
        ] = 0.0,
    ) -> m.HubSearch:
        """Installed packages that can do what the query says, best first, each with a 0..1
        score and the query's words it matched (in its name, capabilities, card triggers or
        description)."""

        def work() -> m.HubSearch:
            from agentos.routing.capabilities import search

            found = search(ws, query, k=k, threshold=threshold)
            return m.HubSearch(matches=[m.HubMatch.model_validate(x.as_dict()) for x in found])

        return await _call(work)

    @tool(
        "Build a missing tool, test-first",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def synthesize_capability(
        request: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the tool should do.")
        ],
        name: Annotated[
            str | None, Field(max_length=NAME_MAX, description="The tool's name (tool-NAME).")
        ] = None,
        card: Annotated[bool, Field(description="Install a routing card with it.")] = False,
    ) -> m.Synthesis:
        """Find an installed package that does the request, or build one: a spec, tests
        that must fail against a stub, an implementation verified in the sandbox, and a hub
        package tool-NAME@0.1.0 only when its tests pass. A new tool is offered as an MCP
        tool at once (the tool list changes)."""

        def work() -> m.Synthesis:
            from agentos.synthesis.engine import synthesize

            return m.Synthesis.model_validate(
                synthesize(ws, request, name=name, card=card).as_dict()
            )

        result = await _call(work)
        await server.announce_tools()
        return result


def _workflow_tools(tool: Registrar, ws: Workspace) -> None:
    """The tools create_task, get_tasks, submit_result and save_memory."""

    @tool(
        "Create a workflow task",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def create_task(
        description: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the task is to do.")
        ],
        phase: Annotated[int, Field(ge=1, description="The phase it is for.")],
        execution: Annotated[str, Field(max_length=NAME_MAX, description="The execution.")],
        parent: Annotated[int | None, Field(description="The task it comes from.")] = None,
    ) -> m.WorkflowTask:
        """Add a task to a phase of a workflow execution; a task too like a live one of the
        same phase is recorded as its duplicate and never runs. A task is done only when
        its run's gate (with the phase's checks) passes."""

        def work() -> m.WorkflowTask:
            from agentos.workflows.executions import create_task as create

            made = create(ws, description, phase, execution_id=execution, parent=parent,
                          creator="mcp")  # fmt: skip
            return m.WorkflowTask.model_validate(made.as_dict())

        return await _call(work)

    @tool("List workflow tasks", **READ_ONLY)
    async def get_tasks(
        execution: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Only this execution's.")
        ] = None,
        status: Annotated[
            Literal["pending", "queued", "running", "done", "failed", "duplicated", "cancelled"]
            | None,
            Field(description="Only tasks in this status."),
        ] = None,
    ) -> m.WorkflowTasks:
        """Tasks of workflow executions, oldest first: phase, status, parent, duplicate of,
        run."""

        def work() -> m.WorkflowTasks:
            from agentos.workflows.store import TaskStatus, WorkflowStore

            store = WorkflowStore(ws)
            try:
                found = store.tasks(execution, TaskStatus(status) if status else None)
            finally:
                store.close()
            return m.WorkflowTasks(
                tasks=[m.WorkflowTask.model_validate(t.as_dict()) for t in found]
            )

        return await _call(work)

    @tool(
        "Submit a workflow result",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def submit_result(
        execution: Annotated[str, Field(max_length=NAME_MAX, description="The execution.")],
        summary: Annotated[str, Field(max_length=REQUEST_MAX, description="The result.")],
    ) -> m.WorkflowResult:
        """Submit an execution's result: it is validated by the workflow's result_checks on
        the repository as it is now, never by its word."""

        def work() -> m.WorkflowResult:
            from agentos.workflows.results import submit_result as submit

            return m.WorkflowResult.model_validate(submit(ws, execution, summary).as_dict())

        return await _call(work)

    @tool(
        "Save a memory",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def save_memory(
        text: Annotated[str, Field(max_length=REQUEST_MAX, description="The note.")],
        title: Annotated[str | None, Field(max_length=NAME_MAX, description="Its title.")] = None,
    ) -> m.Memory:
        """Leave a note for later tasks: a Markdown file under the workspace's memory/
        folder, indexed in the knowledge store (later tasks' context finds it)."""

        def work() -> m.Memory:
            from agentos.workflows.memory import save_memory as save

            return m.Memory(path=str(save(ws, text, title)))

        return await _call(work)


def _guardian_tools(tool: Registrar, ws: Workspace) -> None:
    """The tool guardian_status."""

    @tool("Guardian status", **READ_ONLY)
    async def guardian_status() -> m.GuardianStatus:
        """Whether the guardian (the monitor that nudges, restarts or kills stuck agents) is
        running, and what it last saw."""
        return await _call(_guardian, ws)


def _resources(server: AgentOSServer, ws: Workspace) -> None:
    """The resources: receipts and cards by id."""

    @server.resource(
        "agentos://receipts/{id}",
        name="receipt",
        mime_type="text/plain",
        description="A receipt by id, exactly as written.",
    )
    async def receipt_resource(id: str) -> str:
        return (await _call(_receipt, ws, id)).text

    @server.resource(
        "agentos://cards/{id}",
        name="card",
        mime_type="application/yaml",
        description="A routing card by id: its YAML file.",
    )
    async def card_resource(id: str) -> str:
        return await _call(_card_text, ws, id)


COMPLETIONS_MAX = 100  # values in one answer; `total` and `hasMore` say how many more


def _completions(server: FastMCP[Any], ws: Workspace) -> None:
    """``completion/complete``: card ids for ``agentos://cards/{id}`` and receipt ids for
    ``agentos://receipts/{id}``, agent names for any argument named ``agent``; nothing
    for what AgentOS does not know."""

    @server.completion()  # type: ignore[no-untyped-call,untyped-decorator]
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        def candidates() -> list[str]:
            template = ref.uri if isinstance(ref, ResourceTemplateReference) else None
            if template == "agentos://cards/{id}" and argument.name == "id":
                from agentos.routing.cards import load_cards

                return sorted(c.id for c in load_cards(ws.cards_dir).cards)
            if template == "agentos://receipts/{id}" and argument.name == "id":
                from agentos.receipts import list_receipts

                return [r.id for r in reversed(list_receipts(ws))]
            if argument.name == "agent":
                from agentos.hub.store import Hub

                return sorted({v.name for v in Hub(ws.hub_dir).versions()})
            return []

        found = [v for v in await _call(candidates) if v.startswith(argument.value)]
        return Completion(
            values=found[:COMPLETIONS_MAX],
            total=len(found),
            hasMore=len(found) > COMPLETIONS_MAX,
        )


def _receipt(ws: Workspace, rid: str) -> m.ReceiptText:
    from agentos.receipts import load_receipt

    parsed = load_receipt(ws, rid)
    return m.ReceiptText(
        id=parsed.id,
        kind=parsed.kind or "?",
        time=parsed.time or "?",
        run_id=parsed.run_id,
        fields=parsed.fields,
        text=parsed.text,
    )


def _card_text(ws: Workspace, card_id: str) -> str:
    from agentos.routing.cards import load_cards

    cards = load_cards(ws.cards_dir)
    for card, path in zip(cards.cards, cards.files, strict=True):
        if card.id == card_id:
            return path.read_text(encoding="utf-8")
    raise NotFound(f"no routing card {card_id!r} in {ws.cards_dir}", field="id")


def _guardian(ws: Workspace) -> m.GuardianStatus:
    import importlib
    import importlib.util

    try:
        found = importlib.util.find_spec("agentos.guardian.daemon") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return m.GuardianStatus(installed=False, message="guardian not installed")
    daemon = importlib.import_module("agentos.guardian.daemon")
    status = getattr(daemon, "status", None)
    if status is None:
        return m.GuardianStatus(
            installed=False,
            message="guardian not installed (agentos.guardian.daemon has no status())",
        )
    data = status(ws)
    data = dict(data) if isinstance(data, dict) else {"value": data}
    running = data.get("running")
    message = str(
        data.get("message")
        or (
            "guardian running"
            if running
            else "guardian not running"
            if running is False
            else "guardian status"
        )
    )
    return m.GuardianStatus(
        installed=True,
        running=running if isinstance(running, bool) else None,
        message=message,
        status=data,
    )


# --- running ------------------------------------------------------------------------------


def serve(
    ws: Workspace,
    repos: Sequence[Path] = (),
    *,
    http: str | None = None,
    allow_remote: bool = False,
    allow_hosts: Sequence[str] = (),
) -> None:
    """Run the server until the client goes away (stdio) or until interrupted (HTTP).

    Over HTTP, clients must send the workspace's token (printed on stderr at start) and name
    the server by its address, a loopback name or one of ``allow_hosts``
    (:mod:`agentos.mcp_server.transport`)."""
    level = os.environ.get("AGENTOS_LOG", "WARNING").upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=level if level in logging.getLevelNamesMapping() else "WARNING",
        format="agentos-mcp %(levelname)s %(name)s: %(message)s",
    )
    if http is None:
        server = build_server(ws, repos)
        anyio.run(transport.run_stdio, server)
        return
    host, port = serving_address(
        http,
        allow_remote,
        "plain HTTP carries the token unencrypted, so pass --allow-remote to listen there",
    )
    token = workspace_token(ws)
    sock = listen(host, port)
    try:
        bound = sock.getsockname()[1]
        security = transport.security(host, bound, allow_hosts)
        server = build_server(ws, repos, host=host, port=bound, transport_security=security)
    except BaseException:
        sock.close()
        raise
    url = f"http://{host_name(host)}:{bound}{server.settings.streamable_http_path}"
    print(
        f"agentos mcp: serving workspace {ws.root} on {url}\n"
        f"agentos mcp: clients must send the header 'Authorization: Bearer {token}' "
        f"(the token is kept in {token_file(ws)})",
        file=sys.stderr,
        flush=True,
    )
    anyio.run(transport.run_http, server, sock, token)
