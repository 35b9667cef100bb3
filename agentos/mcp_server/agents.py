"""The MCP server one agent of a run gets (see :mod:`agentos.runtimes.agent_tools`): the tools its
package lists in ``mcp``, served on a Unix socket for as long as its attempt lasts.

The tools are the MCP server's own (same schemas, same library calls), less every one the
package did not ask for; ``create_task``, ``submit_result`` and ``save_memory`` post to the
agent's outbox instead of the workspace, as ``agentos tasks create`` does inside a run, so
that what the agent asks for is decided when its run ends, never by its word.

Each server is forked from the workspace's :mod:`agentos.mcp_server.forkserver`, which asks
for it with an :class:`AgentRequest`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket as stdlib_socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import Field

from agentos.hub.agent_tools import AGENT_TOOLS
from agentos.mcp_server.server import AgentOSServer, build_server
from agentos.mcp_server.tools.common import NAME_MAX, REQUEST_MAX
from agentos.run.outbox import MAX_BYTES
from agentos.shared.fs import append_regular
from agentos.workspace.layout import Workspace

log = logging.getLogger(__name__)

MAX_LINE = 256 << 10  # the longest JSON-RPC message an agent may send
IN_FLIGHT = 4  # requests of one session served at once
MAX_SESSIONS = 4  # sessions at once
MAX_INVALID = 20  # messages that are not JSON-RPC before a session ends
LOG_BUDGET = 256 << 10  # bytes the server logs in all
PARSE_ERROR = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}\n'
OUTBOX_TOOLS = ("create_task", "submit_result", "save_memory")


def agent_server(ws: Workspace, repo: Path, tools: list[str], outbox: Path) -> AgentOSServer:
    """The MCP server with only ``tools``, those that change anything posting to
    ``outbox``."""
    unknown = [t for t in tools if t not in AGENT_TOOLS]
    if unknown:
        raise SystemExit(f"agentos mcp: {unknown[0]!r} is not a tool an agent may be given")
    server = build_server(ws, [repo], only=[t for t in tools if t not in OUTBOX_TOOLS])
    _outbox_tools(server, [t for t in tools if t in OUTBOX_TOOLS], outbox)
    said = [f"AgentOS's tools for you, an agent of a run: {', '.join(tools)}."]
    if "kb_search" in tools:
        said.append("kb_search searches the knowledge store (the indexed code and docs).")
    if any(t in OUTBOX_TOOLS for t in tools):
        said.append(
            "create_task, submit_result and save_memory post to your outbox: AgentOS decides "
            "on them when your run ends (a result counts only if your gate passes)."
        )
    server._mcp_server.instructions = " ".join(said)
    return server


def _outbox_tools(server: AgentOSServer, tools: list[str], outbox: Path) -> None:
    def post(entry: dict[str, Any]) -> str:
        # The outbox lies in the agent's own folder: what it left there is never followed.
        problem = append_regular(outbox, (json.dumps(entry) + "\n").encode(), MAX_BYTES)
        if problem is not None:
            raise ToolError(f"your outbox {outbox} was not written: {problem}")
        return "posted: AgentOS decides on it when this run ends"

    def create_task(
        description: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the task is to do.")
        ],
        phase: Annotated[int, Field(ge=1, description="The phase it is for.")],
    ) -> str:
        """Ask for a task in a phase of the workflow execution this run works for; it is
        added (deduplicated) when this run ends."""
        return post({"kind": "task", "description": description, "phase": phase})

    def submit_result(
        summary: Annotated[str, Field(max_length=REQUEST_MAX, description="The result.")],
    ) -> str:
        """Submit the execution's result; it counts only if this run's gate passes and the
        workflow's result checks pass."""
        return post({"kind": "result", "summary": summary})

    def save_memory(
        text: Annotated[str, Field(max_length=REQUEST_MAX, description="The note.")],
        title: Annotated[str | None, Field(max_length=NAME_MAX, description="Its title.")] = None,
    ) -> str:
        """Leave a note for later tasks (indexed in the knowledge store when this run
        ends)."""
        return post({"kind": "memory", "text": text, "title": title})

    offered = {f.__name__: f for f in (create_task, submit_result, save_memory)}
    for name in tools:
        server.add_tool(offered[name], name=name, structured_output=False)


async def _session(server: AgentOSServer, stream: ByteStream) -> None:
    """One MCP session over a socket connection: JSON-RPC messages a line each, as over
    stdio. The agent is an adversary: a message is at most MAX_LINE bytes, at most
    IN_FLIGHT requests are served at once (one that never reads its answers stops being
    read), and a message that is not JSON-RPC is answered as such, not logged; after
    MAX_INVALID of them the session ends."""
    import mcp.types as types
    from mcp.shared.message import SessionMessage

    to_server, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    lines = BufferedByteReceiveStream(stream)
    slots = anyio.Semaphore(IN_FLIGHT)
    lock = anyio.Lock()  # one writer of the socket at a time

    async def send(data: bytes) -> bool:
        async with lock:
            try:
                await stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return False
        return True

    async def read() -> None:
        invalid = 0
        async with to_server:
            while invalid < MAX_INVALID:
                try:
                    line = await lines.receive_until(b"\n", MAX_LINE)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                except anyio.DelimiterNotFound:
                    return  # over the limit: the session ends
                try:
                    message = types.JSONRPCMessage.model_validate_json(line)
                except ValueError:
                    invalid += 1
                    if not await send(PARSE_ERROR):
                        return
                    continue
                if isinstance(message.root, types.JSONRPCRequest):
                    await slots.acquire()  # released when its answer is written
                await to_server.send(SessionMessage(message))

    async def write() -> None:
        async with from_server:
            async for item in from_server:
                text = item.message.model_dump_json(by_alias=True, exclude_none=True)
                if not await send(text.encode("utf-8") + b"\n"):
                    return
                if isinstance(item.message.root, types.JSONRPCResponse | types.JSONRPCError):
                    slots.release()

    low = server._mcp_server
    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        await low.run(from_client, to_client, low.create_initialization_options())
        tg.cancel_scope.cancel()


async def _serve(server: AgentOSServer, socket: Path, control: stdlib_socket.socket) -> None:
    os.chdir(socket.parent)  # a socket address holds 108 bytes; the directory's path may not
    listener = await anyio.create_unix_listener(socket.name)
    sessions = anyio.Semaphore(MAX_SESSIONS)

    async def handle(stream: ByteStream) -> None:
        async with stream:
            if sessions.value == 0:
                return  # too many at once: this one is closed
            async with sessions:
                try:
                    await _session(server, stream)
                except Exception:  # one broken session never ends the server
                    log.warning("an agent's MCP session failed", exc_info=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        await _closed(control)
        tg.cancel_scope.cancel()


async def _closed(control: stdlib_socket.socket) -> None:
    """Returns when the run that asked for the server closed ``control`` (its teardown) or
    is gone (killed): the server's life."""
    control.setblocking(False)
    while True:
        await anyio.wait_readable(control)
        try:
            if not control.recv(4096):
                return
        except BlockingIOError:
            continue
        except OSError:
            return


class _Budget(logging.Filter):
    """Lets through at most LOG_BUDGET bytes of messages, then one saying so: what an
    agent makes the server log is kept after the run."""

    def __init__(self) -> None:
        super().__init__()
        self.left = LOG_BUDGET

    def filter(self, record: logging.LogRecord) -> bool:
        if self.left <= 0:
            return False
        self.left -= len(record.getMessage()) + 100
        if self.left <= 0:
            record.msg, record.args = "log budget spent: nothing more is logged", ()
        return True


@dataclass(frozen=True)
class AgentRequest:
    """What one agent's server serves, and where (the JSON object a client sends)."""

    workspace: Path
    repo: Path
    socket: Path  # where it listens, in the agent's run files
    outbox: Path
    tools: tuple[str, ...]

    @classmethod
    def of(cls, data: dict[str, Any]) -> AgentRequest:
        """ValueError when ``data`` is not such a request."""
        paths = {k: data.get(k) for k in ("workspace", "repo", "socket", "outbox")}
        tools = data.get("tools")
        if not all(isinstance(v, str) and v.startswith("/") for v in paths.values()):
            raise ValueError("a request whose paths are not absolute")
        if not isinstance(tools, list) or not all(t in AGENT_TOOLS for t in tools):
            raise ValueError(f"a request for tools an agent may not be given: {tools!r}")
        return cls(**{k: Path(v) for k, v in paths.items()}, tools=tuple(tools))  # type: ignore[arg-type]


def serve(request: AgentRequest, control: stdlib_socket.socket) -> None:
    """Serve ``request`` until ``control`` closes (in a process forked by
    :mod:`agentos.mcp_server.forkserver`, its log on stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("agentos-mcp-agent %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_Budget())
    logging.basicConfig(level="WARNING", handlers=[handler], force=True)
    ws = Workspace(request.workspace)
    server = agent_server(ws, request.repo, list(request.tools), request.outbox)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve, server, request.socket, control)
