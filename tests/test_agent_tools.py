"""The MCP server one agent of a run gets (agentos.mcp_server.agents,
agentos.runtimes.agent_tools), met as the agent meets it: through its pipe
(agentos/runtimes/mcp_pipe.py) with the real MCP client, and as an adversary on its Unix socket."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import make_repo, wait_until

from agentos.hub.manifest import Manifest
from agentos.receipts import write_receipt
from agentos.runtimes.agent_tools import AgentToolServer, bridge_argv
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace


@pytest.fixture
def served(ws: Workspace, tmp_path: Path) -> Iterator[AgentFiles]:
    """An agent asking for create_task only, its server up, in a workspace holding a
    receipt of another run."""
    write_receipt(ws, "route", {"decision": "route"}, run_id="other-run", about="a secret")
    files = AgentFiles(ws.state_dir / "runs" / "r1" / "agent", ws.logs_dir / "r1" / "agent.log")
    manifest = Manifest(name="agent", version="1.0.0", description="d", runtime="claude-code",
                        entry="prompt.md", mcp=["create_task"])  # fmt: skip
    files.io.mkdir(parents=True)
    server = AgentToolServer.start(ws, make_repo(tmp_path / "repo"), manifest, files)
    assert server is not None
    try:
        wait_until(files.mcp_socket.exists, what="the agent's MCP server listens")
        yield files
    finally:  # also when it never listened
        server.stop()


def test_an_agent_gets_only_the_tools_it_asked_for_and_no_resources_or_completions(
    served: AgentFiles,
) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.types import PromptReference

    argv = bridge_argv(served)

    async def session() -> tuple[list[str], list[str], list[str], str, str]:
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            init = await s.initialize()
            tools = [t.name for t in (await s.list_tools()).tools]
            templates = [
                t.uriTemplate for t in (await s.list_resource_templates()).resourceTemplates
            ]
            resources = [str(r.uri) for r in (await s.list_resources()).resources]
            try:
                await s.complete(
                    PromptReference(type="ref/prompt", name="x"), {"name": "a", "value": ""}
                )
                completed = "answered"
            except Exception as exc:  # the method is not there
                completed = str(exc)
            done = await s.call_tool("create_task", {"description": "Write the docs", "phase": 2})
            assert not done.isError, done
            return tools, templates, resources, completed, init.instructions or ""

    tools, templates, resources, completed, instructions = anyio.run(session)

    assert tools == ["create_task"]
    assert templates == [] and resources == []
    assert completed == "Method not found"
    assert "create_task" in instructions and "kb_search" not in instructions
    assert [json.loads(x) for x in served.outbox.read_text().splitlines()] == [
        {"kind": "task", "description": "Write the docs", "phase": 2}
    ]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


_OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_what_tests_open() -> Iterator[None]:
    """The sockets a test connected as an agent, closed when it ends (as the agent's go)."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def _connect(files: AgentFiles) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _OPENED.append(sock)
    fd = os.open(files.mcp_socket.parent, os.O_RDONLY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{files.mcp_socket.name}")
    finally:
        os.close(fd)
    sock.settimeout(10)
    return sock


def _lines(sock: socket.socket, count: int) -> list[dict[str, Any]]:
    data = b""
    while data.count(b"\n") < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()[:count]]


def test_what_is_not_json_rpc_is_answered_not_logged_and_the_session_ends(
    served: AgentFiles,
) -> None:
    sock = _connect(served)
    sock.sendall(b"{}\n" * 5000)

    answers = _lines(sock, 20)
    assert all(a["error"]["code"] == -32700 for a in answers)
    sock.settimeout(5)
    rest = b""
    while chunk := sock.recv(65536):  # then the server closes the session
        rest += chunk
    assert rest.count(b"\n") == 0
    log = served.log.with_suffix(".mcp.log")
    assert not log.exists() or log.stat().st_size < 1024


def test_a_message_over_the_limit_ends_the_session(served: AgentFiles) -> None:
    sock = _connect(served)
    sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (300 << 10))

    with contextlib.suppress(ConnectionResetError):  # (closed with what it did not read)
        assert sock.recv(65536) == b""  # closed, nothing answered


def test_an_agent_that_never_reads_its_answers_stops_being_read(served: AgentFiles) -> None:
    """The server runs outside the agent's limits: its memory must not grow with what the
    agent sends without reading the answers."""
    (pid,) = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit()
        and str(served.mcp_socket).encode() in _read(p / "cmdline")
        and b"agentos.mcp_server.agents" in _read(p / "cmdline")
    ]

    def rss() -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1])

    sock = _connect(served)
    for message in (
        {"id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
         "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}},
        {"method": "notifications/initialized"},
    ):  # fmt: skip
        sock.sendall(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    _lines(sock, 1)
    sock.setblocking(False)
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode() + b"\n"
    big = (
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "create_task", "arguments": {"description": "x" * (200 << 10), "phase": 1}}})
        .encode() + b"\n"
    )  # fmt: skip
    before = rss()
    sent, stalled = 0, 0.0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and stalled < 1.0:
        try:
            sent += sock.send(request * 200 + big * 20)
            stalled = 0.0
        except BlockingIOError:  # the server is not reading
            time.sleep(0.05)
            stalled += 0.05
    grown = rss() - before

    assert sent < 4 << 20  # it stopped taking what it could not answer
    assert grown < 50_000, f"the server grew by {grown} kB"
