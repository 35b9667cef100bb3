"""The MCP server one agent of a run gets (agentos.mcp_server.agents,
agentos.runtimes.agent_tools), met as the agent meets it: through its pipe
(agentos/runtimes/mcp_pipe.py) with the real MCP client, and as an adversary on its Unix socket."""

from __future__ import annotations

import contextlib
import functools
import json
import marshal
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Lines, make_repo, wait_until

from agentos.hub.manifest import Manifest
from agentos.receipts import write_receipt
from agentos.runtimes.agent_tools import AgentToolServer, bridge_argv, forkserver_socket
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
        wait_until(lambda: _listens(files), what="the agent's MCP server listens")
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


def _listens(files: AgentFiles) -> bool:
    """Whether the agent's MCP server takes connections: its socket's file is there from
    the bind on, before it listens (anyio binds in a worker thread, then listens)."""
    if not files.mcp_socket.exists():
        return False
    try:
        _connect(files).close()
    except ConnectionRefusedError:
        return False
    return True


def _peer_pid(sock: socket.socket) -> int:
    """The pid of the process serving ``sock`` (the kernel's word, not a guess)."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", cred)[0])


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
    sock = _connect(served)
    pid = _peer_pid(sock)

    def rss() -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1])

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


# --- the fork server (agentos.mcp_server.forkserver) -----------------------------------


def _agent(ws: Workspace, name: str, tools: list[str]) -> tuple[AgentFiles, Manifest]:
    files = AgentFiles(ws.state_dir / "runs" / name / "agent", ws.logs_dir / name / "agent.log")
    files.io.mkdir(parents=True)
    manifest = Manifest(name="agent", version="1.0.0", description="d", runtime="claude-code",
                        entry="prompt.md", mcp=tools)  # fmt: skip
    return files, manifest


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _tools_listed(files: AgentFiles) -> list[str]:
    sock = _connect(files)
    for message in (
        {"id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
         "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"method": "notifications/initialized"},
        {"id": 1, "method": "tools/list"},
    ):  # fmt: skip
        sock.sendall(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    return [t["name"] for t in _lines(sock, 2)[1]["result"]["tools"]]


def test_the_agents_of_a_workspace_are_forked_from_one_server_each_with_only_its_tools(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    servers = []
    try:
        for name, tools in (("a", ["create_task"]), ("b", ["kb_search"]), ("c", ["create_task"])):
            files, manifest = _agent(ws, name, tools)
            server = AgentToolServer.start(ws, repo, manifest, files)
            assert server is not None
            servers.append((server, files))
        for _, files in servers:
            wait_until(functools.partial(_listens, files), what="the agent's MCP server listens")
        pids = [_peer_pid(_connect(files)) for _, files in servers]
        parents = {_parent(pid) for pid in pids}
        listed = [_tools_listed(files) for _, files in servers]
    finally:
        for server, _ in servers:
            server.stop()

    assert listed == [["create_task"], ["kb_search"], ["create_task"]]
    assert len(set(pids)) == 3
    (forkserver,) = parents  # one server forked all three
    assert b"agentos.mcp_server.forkserver" in Path(f"/proc/{forkserver}/cmdline").read_bytes()
    assert all(_gone(pid) for pid in pids)  # stop() returns once each has ended
    assert not any(files.mcp_socket.exists() for _, files in servers)


def test_a_run_killed_takes_its_agents_server_with_it(ws: Workspace, tmp_path: Path) -> None:
    """The server's life is its connection to the run: SIGKILL the run, the server ends."""
    repo = make_repo(tmp_path / "repo")
    files, _ = _agent(ws, "a", ["create_task"])
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from agentos.hub.manifest import Manifest\n"
        "from agentos.runtimes.agent_tools import AgentToolServer\n"
        "from agentos.workspace.files import AgentFiles\n"
        "from agentos.workspace.layout import Workspace\n"
        "ws, repo, run_dir, log = map(Path, sys.argv[1:])\n"
        "m = Manifest(name='agent', version='1.0.0', description='d', runtime='claude-code',"
        " entry='prompt.md', mcp=['create_task'])\n"
        "server = AgentToolServer.start(Workspace(ws), repo, m, AgentFiles(run_dir, log))\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-c", code, str(ws.root), str(repo), str(files.run_dir), str(files.log)],
        stdout=subprocess.PIPE,
    )
    try:
        assert Lines(run.stdout).next(30) == b"started\n"
        wait_until(lambda: _listens(files), what="the agent's MCP server listens")
        pid = _peer_pid(_connect(files))
        run.kill()
        run.wait()
        wait_until(lambda: _gone(pid), timeout=10, what="the server ends with its run")
    finally:
        run.kill()
        run.wait()


def test_a_fork_server_whose_code_changed_is_replaced_by_a_new_one(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade (or an edit) of what the fork server imported is never served: the next
    agent's request finds it stale and a new fork server serves it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("")  # a module every new interpreter imports
    monkeypatch.setenv("PYTHONPATH", str(site))
    repo = make_repo(tmp_path / "repo")
    parents = []
    for name in ("a", "b", "c"):
        files, manifest = _agent(ws, name, ["create_task"])
        server = AgentToolServer.start(ws, repo, manifest, files)
        assert server is not None
        try:
            wait_until(functools.partial(_listens, files), what="the agent's MCP server listens")
            parents.append(_parent(_peer_pid(_connect(files))))
        finally:
            server.stop()
        if name == "a":
            (site / "sitecustomize.py").write_text("# upgraded\n")

    assert parents[0] != parents[1] == parents[2]
    wait_until(lambda: _gone(parents[0]), timeout=10, what="the stale fork server ends")


def test_a_fork_server_whose_code_changed_says_so_to_a_request_it_cannot_read(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client of another request format (a newer AgentOS) is told ``stale`` by a server
    whose code changed, and starts a new one, rather than being refused until it idles."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("")  # a module every new interpreter imports
    monkeypatch.setenv("PYTHONPATH", str(site))
    repo = make_repo(tmp_path / "repo")
    files, manifest = _agent(ws, "a", ["create_task"])
    server = AgentToolServer.start(ws, repo, manifest, files)
    assert server is not None
    server.stop()
    (site / "sitecustomize.py").write_text("# upgraded\n")
    path = forkserver_socket(ws)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _OPENED.append(sock)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)
    sock.settimeout(10)
    body = b"\xff not a request of this format"
    sock.sendall(len(body).to_bytes(4, "big") + body)

    assert sock.recv(100) == b"stale\n"


def test_only_its_own_user_reaches_the_fork_server(ws: Workspace, tmp_path: Path) -> None:
    """A request the server takes from its own user (it answers with its child's pid) is
    closed unanswered when it comes from another user, past the socket file's permissions."""
    repo = make_repo(tmp_path / "repo")
    files, manifest = _agent(ws, "a", ["create_task"])
    server = AgentToolServer.start(ws, repo, manifest, files)
    assert server is not None
    server.stop()
    path = forkserver_socket(ws)
    path.chmod(0o777)  # past the file's permissions: the server itself must refuse
    code = (
        "import ctypes, marshal, os, socket, sys\n"
        "d = os.open(sys.argv[1], os.O_RDONLY)\n"  # opened before the uid is dropped
        "if sys.argv[4] == 'nobody':\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "    ctypes.CDLL(None).prctl(4, 1)\n"  # PR_SET_DUMPABLE: /proc/self/fd is its own again
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(f'/proc/self/fd/{d}/{sys.argv[2]}')\n"
        "log = os.open('/dev/null', os.O_WRONLY)\n"
        "s.settimeout(10)\n"
        "body = bytes.fromhex(sys.argv[3])\n"
        "try:\n"
        "    socket.send_fds(s, [len(body).to_bytes(4, 'big') + body], [log])\n"
        "    print(repr(s.recv(4)))\n"
        "except (BrokenPipeError, ConnectionResetError):\n"  # closed, the request unread
        "    print(repr(b''))\n"
    )

    def ask(other: AgentFiles, who: str) -> subprocess.CompletedProcess[str]:
        other.run_dir.chmod(0o777)
        request = {"workspace": str(ws.root), "repo": str(repo), "socket": str(other.mcp_socket),
                   "outbox": str(other.outbox), "tools": ["create_task"],
                   "process": {"env": dict(os.environ), "cwd": "/", "umask": 0o022}}  # fmt: skip
        body = marshal.dumps(request).hex()
        return subprocess.run(
            [sys.executable, "-c", code, str(path.parent), path.name, body, who],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    own = ask(_agent(ws, "b", ["create_task"])[0], "itself")
    assert own.returncode == 0, own.stderr
    assert own.stdout == "b'pid '\n"  # taken: its child says its pid
    other, _ = _agent(ws, "c", ["create_task"])
    out = ask(other, "nobody")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "b''\n"  # closed, unanswered
    assert not other.mcp_socket.exists()


def test_an_idle_fork_server_ends_and_so_does_one_whose_socket_is_gone(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")

    def forkserver_of(name: str) -> int:
        files, manifest = _agent(ws, name, ["create_task"])
        server = AgentToolServer.start(ws, repo, manifest, files)
        assert server is not None
        try:
            wait_until(lambda: _listens(files), what="the agent's MCP server listens")
            return _parent(_peer_pid(_connect(files)))
        finally:
            server.stop()

    monkeypatch.setenv("AGENTOS_FORKSERVER_IDLE", "1")
    idle = forkserver_of("a")
    wait_until(lambda: _gone(idle), timeout=15, what="the idle fork server ends")
    monkeypatch.setenv("AGENTOS_FORKSERVER_IDLE", "600")
    removed = forkserver_of("b")
    forkserver_socket(ws).unlink()
    wait_until(lambda: _gone(removed), timeout=15, what="the fork server without its socket ends")
