"""The AgentOS MCP server: tools and resources over the same library calls the CLI makes.

``build_server(ws, repos)`` returns a FastMCP server; :func:`serve` runs it over stdio or
streamable HTTP. Every tool has a description, a typed input schema (with a description
per argument) and structured output (a pydantic model, so clients get an outputSchema);
read-only tools are annotated ``readOnlyHint``. Resources: ``agentos://receipts/{id}``
and ``agentos://cards/{id}``. The tools are :mod:`agentos.mcp_server.tools`, one module per
family; the resources and completions are :mod:`agentos.mcp_server.resources`.

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

import importlib
import inspect
import json
import logging
import os
import sys
import weakref
from collections.abc import Callable, Collection, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import (
    CallToolResult,
    LoggingLevel,
    ToolAnnotations,
)
from pydantic import Field, ValidationError

from agentos import __version__
from agentos.errors import AgentOSError
from agentos.mcp_server import resources, transport
from agentos.mcp_server.auth import token_file, workspace_token
from agentos.mcp_server.paths import Confinement
from agentos.mcp_server.tools import common
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

# The tool families (agentos.mcp_server.tools), in the order their tools are listed. Each is
# imported and its tools built (a pydantic model per tool, 3-15 ms a family) the first time
# one of its tools is called; until then tools/list answers from TOOLS_FILE, what the
# families list, written by `python -m agentos.cli._docs` (tests/test_mcp_server.py compares
# the two, so they cannot drift).
FAMILIES = (
    "routing",
    "runs",
    "knowledge",
    "receipts",
    "hub",
    "guardian",
    "evals",
    "evolve",
    "synthesis",
    "workflows",
)
TOOLS_FILE = Path(__file__).with_name("tools.json")


def stored_tools() -> list[tuple[str, dict[str, Any]]] | None:
    """(family, the tool as tools/list gives it) of every tool of AgentOS's own, as
    :data:`TOOLS_FILE` keeps them; None when the file is missing or not of this shape."""
    try:
        data = json.loads(TOOLS_FILE.read_bytes())
        stored = [(str(e["family"]), dict(e["tool"])) for e in data["tools"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(family in FAMILIES and isinstance(t.get("name"), str) for family, t in stored):
        return None
    return stored


INSTRUCTIONS = (
    "AgentOS runs versioned AI agents on a git repository. `interview` says whether a request "
    "is clear enough to work on, `route` which agents would take it (and writes a receipt), "
    "`run_task` starts a run and returns its id at once: poll `task_status`. The knowledge "
    "store (`kb_search`, `kb_add`) holds the indexed code; `receipts_list`/`receipt_show` "
    "give the audit trail; `hub_list`/`hub_install` manage agent packages. Paths must lie in "
    "the workspace or an allowed repository."
)


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
        # The families whose tools are listed from TOOLS_FILE and not built yet, what
        # their `register` is given, and which family each tool of AgentOS's own is of.
        self._pending: list[str] = []
        self._family_args: dict[str, Any] = {}
        self._family_of: dict[str, str] = {}
        self._stored: list[dict[str, Any]] = []
        self._only: frozenset[str] | None = None
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
        from agentos.hub.versions import hub_versions
        from agentos.synthesis.package import is_tool_package

        hub_dir = self._ws.hub_dir
        revision, versions = hub_versions(hub_dir / "hub.lock", self._ws.state_dir / "cache")
        if revision == self._hub_revision:
            return False
        self._hub_revision = revision
        if not self._packaged and not any(
            active and is_tool_package(hub_dir / name / active)
            for name, (active, _) in versions.items()
        ):
            return False  # none offered, none to offer: the hub's manifests are not read
        from agentos.synthesis.tools import installed_tools

        for name in self._packaged:
            with suppress(ToolError):
                self.remove_tool(name)
        self._packaged = set()
        for found in installed_tools(self._ws):
            if found.name in self._family_of or self._tool_manager.get_tool(found.name):
                continue  # never shadow a tool of AgentOS's own, built yet or not
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

    def build_families(self, families: Sequence[str] | None = None) -> None:
        """Build the tools of ``families`` (all of them by default) not built yet."""
        for family in list(self._pending if families is None else families):
            if family not in self._pending:
                continue
            self._pending.remove(family)
            module = importlib.import_module(f"agentos.mcp_server.tools.{family}")
            wants = inspect.signature(module.register).parameters
            module.register(**{name: self._family_args[name] for name in wants})

    def offers(self, name: str) -> bool:
        """Whether ``name`` is one of AgentOS's own tools this server offers."""
        return name in self._family_of and (self._only is None or name in self._only)

    async def list_tools(self) -> list[Any]:
        self.sync_tool_packages()
        built = await super().list_tools()
        if not self._family_of:
            return built
        from mcp.types import Tool as MCPTool

        by_name = {t.name: t for t in built}
        listed = [
            by_name.pop(spec["name"]) if spec["name"] in by_name else MCPTool.model_validate(spec)
            for spec in self._stored
            if self.offers(spec["name"])
        ]
        return listed + list(by_name.values())  # then tool packages, an agent's outbox tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if self.offers(name):
            self.build_families([self._family_of[name]])
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
        result = await common.call(call_tool, ws, ref, _json.dumps(arguments))
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
    server = unbuilt_server(
        ws, repos, host=host, port=port, transport_security=transport_security, only=only
    )
    stored = stored_tools()
    if stored is None:  # not kept (a checkout before the docs were made): built now
        server.build_families()
    else:
        server._stored = [spec for _, spec in stored]
        server._family_of = {spec["name"]: family for family, spec in stored}
    if only is not None:
        return server
    resources.register(server, ws)
    server.offer_tool_packages(ws)
    return server


def unbuilt_server(
    ws: Workspace,
    repos: Sequence[Path] = (),
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    transport_security: TransportSecuritySettings | None = None,
    only: Collection[str] | None = None,
) -> AgentOSServer:
    """The server of :func:`build_server` with no tool of its own yet: each family is
    built by :meth:`AgentOSServer.build_families`."""
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
    register = common.registrar(server)
    allowed = None if only is None else frozenset(only)

    def tool(title: str, **hints: bool) -> Callable[[Any], Any]:
        """The registrar, building only the tools this server offers."""
        add = register(title, **hints)
        return lambda fn: add(fn) if allowed is None or fn.__name__ in allowed else fn

    server._only = allowed
    server._family_args = {"server": server, "tool": tool, "ws": ws, "fence": fence}
    server._pending = list(FAMILIES)
    return server


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
