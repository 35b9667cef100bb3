"""The MCP server driven by the real `mcp` client, over stdio and streamable HTTP.

Every test spawns `python -m agentos --workspace WS mcp serve` as a real subprocess, the way
Claude Code and Gemini CLI do, and talks to it with the SDK's ClientSession.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import Lines, make_repo, needs_tmux, write_package
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, TextResourceContents

from agentos.errors import AgentOSError, BadInput
from agentos.hub.store import Hub
from agentos.mcp_server.auth import token_file
from agentos.mcp_server.paths import Confinement
from agentos.mcp_server.server import FAMILIES, TOOL_NAMES, stored_tools
from agentos.workspace.layout import Workspace

READ_ONLY_TOOLS = {
    "interview",
    "task_status",
    "kb_search",
    "receipts_list",
    "receipt_show",
    "hub_list",
    "guardian_status",
    "runs_list",
    "run_events",
    "run_log",
    "eval_report",
    "evolve_status",
    "hub_search",
    "get_tasks",
}
GUARDIAN = importlib.util.find_spec("agentos.guardian.daemon") is not None


# --- connecting ---------------------------------------------------------------------------


def server_argv(ws: Workspace, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "mcp", "serve", *extra]


def wait_for_url(proc: subprocess.Popen[bytes], errlog: Path) -> str:
    """The URL the HTTP server prints on stderr once it listens (it was given port 0)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r" on (http://\S+)$", errlog.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {errlog.read_text()}")
        time.sleep(0.05)
    raise AssertionError("the HTTP server did not listen in time")


@asynccontextmanager
async def connect(
    transport: str,
    ws: Workspace,
    *extra: str,
    env: dict[str, str] | None = None,
    errlog: Path | None = None,
    **session_options: Any,
) -> AsyncIterator[ClientSession]:
    """An initialized client session with a freshly spawned server (``session_options`` go
    to the ClientSession, e.g. ``logging_callback``)."""
    env = {**os.environ, **(env or {})}
    errlog = errlog or ws.root.parent / "mcp-server.log"  # the test's tmp_path
    if transport == "stdio":
        argv = server_argv(ws, *extra)
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        with errlog.open("w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write, **session_options) as session,
            ):
                await session.initialize()
                yield session
        return
    with errlog.open("wb") as err:
        proc = subprocess.Popen(
            server_argv(ws, *extra, "--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            env=env,
        )
    try:
        url = wait_for_url(proc, errlog)
        token = token_file(ws).read_text().strip()
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write, **session_options) as session,
        ):
            await session.initialize()
            yield session
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured output of a successful call."""
    assert not result.isError, result.content
    assert result.structuredContent is not None
    # The text content is the same document, for clients without structured output.
    assert json.loads(result.content[0].text) == result.structuredContent  # type: ignore[union-attr]
    return result.structuredContent


def error_text(result: CallToolResult) -> str:
    assert result.isError, result.structuredContent
    assert len(result.content) == 1
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text and "Traceback" not in text
    return text


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "README.md": "# target\n",
            "dates.py": 'def parse_date(text):\n    """Parse an ISO date."""\n'
            "    return text.split('-')\n",
        },
    )


@pytest.fixture
def scribe(ws: Workspace, tmp_path: Path) -> None:
    """A shell agent that writes notes.txt, and a card routing `scribe-task` to it."""
    src = write_package(
        tmp_path / "src" / "scribe",
        name="scribe",
        files={"run.sh": "echo noted > notes.txt\n"},
        checks=[{"name": "notes written", "file_exists": "notes.txt"}],
    )
    Hub(ws.hub_dir).install(str(src))
    (ws.cards_dir / "scribe.yaml").write_text(
        yaml.safe_dump(
            {
                "id": "scribe-card",
                "agent": "scribe",
                "description": "take notes",
                "group": "scribe",
                "triggers": {"keywords": ["scribe-task"]},
            }
        )
    )


# --- every tool, over both transports -----------------------------------------------------


@pytest.mark.slow
@needs_tmux
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_client_calls_every_tool_and_reads_the_resources(
    transport: str, ws: Workspace, repo: Path, scribe: None, tmux_socket: str
) -> None:
    package = write_package(ws.root / "incoming" / "greeter", name="greeter", version="2.0.0")

    async def scenario() -> None:
        async with connect(transport, ws, "--repo", str(repo)) as s:
            listed = {t.name: t for t in (await s.list_tools()).tools}
            assert sorted(listed) == sorted(TOOL_NAMES)
            for name, t in listed.items():
                assert t.description and t.inputSchema["type"] == "object", name
                assert t.outputSchema and t.outputSchema["type"] == "object", name
                assert t.annotations is not None and t.annotations.title, name
                assert t.annotations.readOnlyHint is (name in READ_ONLY_TOOLS), name
                for arg, schema in t.inputSchema.get("properties", {}).items():
                    assert schema.get("description"), f"{name}.{arg} has no description"

            added = ok(await s.call_tool("kb_add", {"paths": ["."]}))
            assert added["paths"] == [str(repo)] and added["added"] == 2
            hits = ok(await s.call_tool("kb_search", {"query": "parse date", "k": 3}))["hits"]
            assert hits[0]["path"] == str(repo / "dates.py")
            assert "«" in hits[0]["snippet"]

            asked = ok(await s.call_tool("interview", {"request": "make it better"}))
            assert asked["passed"] is False and asked["questions"]

            counted = len(ok(await s.call_tool("receipts_list", {}))["receipts"])
            asking = {"request": "scribe-task for the notes", "dry_run": True}
            dry = ok(await s.call_tool("route", asking))
            assert (dry["decision"], dry["dry_run"], dry["receipt"]) == ("route", True, None)
            assert len(ok(await s.call_tool("receipts_list", {}))["receipts"]) == counted
            routed = ok(await s.call_tool("route", {"request": "scribe-task for the notes"}))
            assert routed["decision"] == "route" and routed["dry_run"] is False
            assert [(c["card"], c["agent"]) for c in routed["selected"]] == [
                ("scribe-card", "scribe")
            ]
            receipt = routed["receipt"]

            listing = ok(await s.call_tool("receipts_list", {}))
            assert listing["receipts"][-1]["id"] == receipt
            assert listing["receipts"][-1]["kind"] == "route"
            shown = ok(await s.call_tool("receipt_show", {"id": str(int(receipt))}))
            assert shown["id"] == receipt and shown["kind"] == "route"
            assert "request: scribe-task for the notes\n" in shown["text"]
            assert shown["text"] == (ws.receipts_dir / f"{receipt}.txt").read_text()

            installed = ok(await s.call_tool("hub_install", {"source": str(package)}))
            assert (installed["name"], installed["version"], installed["changed"]) == (
                "greeter",
                "2.0.0",
                True,
            )
            again = ok(await s.call_tool("hub_install", {"source": str(package)}))
            assert again["changed"] is False
            packages = ok(await s.call_tool("hub_list", {}))["packages"]
            assert {"greeter", "scribe"} <= {p["name"] for p in packages}

            guardian = ok(await s.call_tool("guardian_status", {}))
            if GUARDIAN:  # no guardian runs for this test workspace
                assert (guardian["installed"], guardian["running"], guardian["message"]) == (
                    True,
                    False,
                    "guardian not running",
                )
                assert guardian["status"]["pidfile"].startswith(str(ws.root))
            else:
                assert guardian == {
                    "installed": False,
                    "running": None,
                    "status": {},
                    "message": "guardian not installed",
                }

            started = ok(
                await s.call_tool("run_task", {"request": "scribe-task please", "force": True})
            )
            assert started["status"] == "started" and started["repo"] == str(repo)
            status = await wait_for_run(s, started["run_id"])
            assert status["status"] == "succeeded", status
            assert [(a["agent"], a["status"]) for a in status["agents"]] == [("scribe", "passed")]
            assert len(status["receipts"]) >= 3  # route, gate, merge/run
            assert (repo / "notes.txt").read_text() == "noted\n"

            templates = {
                t.uriTemplate for t in (await s.list_resource_templates()).resourceTemplates
            }
            assert templates == {"agentos://receipts/{id}", "agentos://cards/{id}"}
            text = await read(s, f"agentos://receipts/{receipt}")
            assert text == shown["text"]
            card = yaml.safe_load(await read(s, "agentos://cards/scribe-card"))
            assert card["agent"] == "scribe"

    run(scenario)


async def wait_for_run(s: ClientSession, run_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = ok(await s.call_tool("task_status", {"run_id": run_id}))
        assert status["run_id"] == run_id
        if status["finished"] or time.monotonic() > deadline:
            return status
        await anyio.sleep(0.2)


async def read(s: ClientSession, uri: str) -> str:
    from pydantic import AnyUrl

    contents = (await s.read_resource(AnyUrl(uri))).contents
    assert len(contents) == 1 and isinstance(contents[0], TextResourceContents)
    return contents[0].text


# --- errors and bad arguments -------------------------------------------------------------


def test_bad_arguments_and_library_errors_come_back_as_one_line_tool_errors(
    ws: Workspace, repo: Path, tmp_path: Path
) -> None:
    (repo / "escape").symlink_to("/etc")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "missing argument": ("route", {}),
        "wrong type": ("kb_search", {"query": "x", "k": "many"}),
        "out of range": ("kb_search", {"query": "x", "k": 0}),
        "unknown argument": ("hub_list", {"verbose": True}),
        "unknown tool": ("rm_rf", {}),
        "empty request": ("route", {"request": "  "}),
        "empty interview": ("interview", {"request": ""}),
        "bad receipt id": ("receipt_show", {"id": "../../etc/passwd"}),
        "missing receipt": ("receipt_show", {"id": "999"}),
        "unknown run": ("task_status", {"run_id": "no-such-run"}),
        "missing package": ("hub_install", {"source": "incoming/nothing"}),
        "no paths": ("kb_add", {"paths": []}),
        "absolute outside": ("kb_add", {"paths": ["/etc/passwd"]}),
        "dot-dot escape": ("kb_add", {"paths": ["README.md", "../../../../etc"]}),
        "symlink escape": ("kb_add", {"paths": ["escape/passwd"]}),
        "state directory": ("kb_add", {"paths": [str(ws.root / ".agentos" / "runs")]}),
        "git internals": ("kb_add", {"paths": [".git/config"]}),
        "repo outside": ("run_task", {"request": "scribe-task", "repo": str(outside)}),
        "file url outside": ("hub_install", {"source": "file:///etc@main"}),
        "ext transport": ("hub_install", {"source": "ext::sh -c touch% /tmp/pwned"}),
    }
    roots = f"{ws.root}, {repo}"
    hint = "allow another with `agentos mcp serve --repo DIR` or AGENTOS_MCP_ROOTS"
    expected = {
        "missing argument": "request: missing required argument",
        "wrong type": "k: Input should be a valid integer, unable to parse string as an integer",
        "out of range": "k: Input should be greater than or equal to 1",
        "unknown argument": "hub_list: unknown argument 'verbose' (it takes: no arguments)",
        "unknown tool": f"unknown tool 'rm_rf'; the tools are: {', '.join(TOOL_NAMES)}",
        "empty request": "request: the request is empty",
        "empty interview": "request: the request is empty: say what should be done",
        "bad receipt id": "id: '../../etc/passwd' is not a receipt id (like 00000042)",
        "missing receipt": f"id: no receipt 00000999 in {ws.receipts_dir}",
        "unknown run": "run: no run 'no-such-run'",
        "missing package": f"{repo}/incoming/nothing: no such package directory, archive or "
        "git URL",
        "no paths": "paths: List should have at least 1 item after validation, not 0",
        "absolute outside": f"paths[0]: /etc/passwd is outside the workspace and the allowed "
        f"repositories ({roots}); {hint}",
        "dot-dot escape": f"paths[1]: ../../../../etc is outside the workspace and the "
        f"allowed repositories ({roots}); {hint}",
        "symlink escape": f"paths[0]: escape/passwd is outside the workspace and the allowed "
        f"repositories ({roots}); {hint}",
        "state directory": f"paths[0]: {ws.root}/.agentos/runs is inside .agentos/, which MCP "
        "clients may not read (state, agents' secrets, git internals)",
        "git internals": "paths[0]: .git/config is inside .git/, which MCP clients may not "
        "read (state, agents' secrets, git internals)",
        "repo outside": f"repo: {outside} is outside the workspace and the allowed "
        f"repositories ({roots}); {hint}",
        "file url outside": f"source: /etc is outside the workspace and the allowed "
        f"repositories ({roots}); {hint}",
        "ext transport": "source: git transport 'ext' is not allowed",
    }
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            for case, (tool, args) in cases.items():
                seen[case] = error_text(await s.call_tool(tool, args))
            # The server is still there, and nothing was indexed.
            stats = ok(await s.call_tool("kb_search", {"query": "root passwd"}))
            assert stats["hits"] == []

    run(scenario)
    assert seen == expected
    assert not Path("/tmp/pwned").exists()


@needs_tmux
def test_task_status_names_each_failing_check_with_the_end_of_its_output(
    ws: Workspace, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    src = write_package(
        tmp_path / "src" / "failer",
        name="failer",
        checks=[
            {"name": "always red", "run": r"printf '\033[31mE   boom: 1 != 2\033[0m\n'; false"}
        ],
    )
    Hub(ws.hub_dir).install(str(src))
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            vague = await s.call_tool("run_task", {"request": "improve things"})
            assert error_text(vague).startswith("the request is too vague to start")
            started = ok(
                await s.call_tool(
                    "run_task",
                    {"request": "anything at all", "force": True, "agent": "failer@1.0.0"},
                )
            )
            status = await wait_for_run(s, started["run_id"])
            assert status["status"] == "failed", status
            (agent,) = status["agents"]
            assert agent["gate_summary"] == "gate failed: 1 of 1 checks failed (always red)"
            (failing,) = agent["failing_checks"]
            assert (failing["name"], failing["exit_code"], failing["output_tail"]) == (
                "always red",
                1,
                "E   boom: 1 != 2\n",
            )

    run(scenario)


def test_run_task_without_a_repository_asks_for_one(ws: Workspace) -> None:
    async def scenario() -> None:
        async with connect("stdio", ws) as s:
            text = error_text(await s.call_tool("run_task", {"request": "scribe-task"}))
            assert text == (
                "repo: give the repository to work on (the server was started without --repo)"
            )

    run(scenario)


def test_a_repository_allowed_through_the_environment_can_be_indexed(
    ws: Workspace, repo: Path
) -> None:
    async def scenario() -> None:
        async with connect("stdio", ws, env={"AGENTOS_MCP_ROOTS": str(repo)}) as s:
            added = ok(await s.call_tool("kb_add", {"paths": [str(repo / "dates.py")]}))
            assert added["added"] == 1

    run(scenario)


@pytest.mark.parametrize("request_text", ["--help", "--detach", "-x"])
def test_a_request_that_looks_like_an_option_is_the_runs_request(
    ws: Workspace, repo: Path, request_text: str
) -> None:
    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            started = ok(await s.call_tool("run_task", {"request": request_text, "force": True}))
            status = await wait_for_run(s, started["run_id"], timeout=60)
            assert (status["status"], status["finished"], status["request"]) == (
                "no_match",
                True,
                request_text,
            ), status

    run(scenario)


def test_a_run_whose_process_ends_before_the_run_starts_is_reported_failed(
    ws: Workspace, repo: Path
) -> None:
    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            # The server has read the settings; the run's own process finds them broken.
            ws.settings_file.write_text("run: [\n")
            started = ok(await s.call_tool("run_task", {"request": "fix it", "force": True}))
            status = await wait_for_run(s, started["run_id"], timeout=60)
            with pytest.raises(AgentOSError) as broken:
                Workspace(ws.root).settings  # noqa: B018 (loading is the point)
            why = f"error: {broken.value}"
            expected = {
                "status": "failed",
                "finished": True,
                "message": f"the run's process ended before the run started: {why}",
                "log_tail": why + "\n",
            }
            shown = {
                k: status[k]
                for k in (*expected, "run_id", "request", "repo", "decision", "agents", "receipts")
            }
            assert shown == {
                **expected,
                "run_id": started["run_id"],
                "request": "fix it",
                "repo": str(repo),
                "decision": None,
                "agents": [],
                "receipts": [],
            }

    run(scenario)


def test_arguments_too_long_for_a_path_or_a_command_line_are_refused_naming_the_limit(
    ws: Workspace, repo: Path
) -> None:
    huge_path = "a" * 100_000
    request_128k = "fix the lint errors " * (128 * 1024 // 20) + "x" * (128 * 1024 % 20)
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "kb_add path": ("kb_add", {"paths": [huge_path]}),
        "kb_add long name": ("kb_add", {"paths": ["README.md", "n" * 300]}),
        "run_task repo": ("run_task", {"request": "fix it", "repo": huge_path}),
        "hub_install path": ("hub_install", {"source": huge_path}),
        "hub_install git name": ("hub_install", {"source": "git@example.invalid:" + "g" * 300}),
        "route request": ("route", {"request": request_128k}),
        "interview request": ("interview", {"request": request_128k}),
        "run_task request": ("run_task", {"request": request_128k, "force": True}),
        "run_task request bytes": ("run_task", {"request": "é" * 40_000, "force": True}),
        "create_task description bytes": (
            "create_task",
            {"description": "é" * 40_000, "phase": 1, "execution": "e1"},
        ),
        "kb_search query": ("kb_search", {"query": request_128k}),
        "task_status run id": ("task_status", {"run_id": huge_path}),
        "run_task agent": ("run_task", {"request": "fix it", "agent": huge_path}),
    }
    expected = {
        "kb_add path": "paths[0]: too long (100,000 characters; the limit is 4,096)",
        "kb_add long name": f"paths[1]: has a name of 300 bytes ({'n' * 40}...); the limit is 255",
        "run_task repo": "repo: too long (100,000 characters; the limit is 4,096)",
        "hub_install path": "source: too long (100,000 characters; the limit is 4,096)",
        "hub_install git name": "source: has a name of 320 bytes "
        "(git@example.invalid:gggggggggggggggggggg...); the limit is 255",
        "route request": "request: too long (131,072 characters; the limit is 65,536)",
        "interview request": "request: too long (131,072 characters; the limit is 65,536)",
        "run_task request": "request: too long (131,072 characters; the limit is 65,536)",
        "run_task request bytes": "request: the request is too long (80,000 bytes; the limit "
        "is 65,536)",
        "create_task description bytes": "description: the request is too long (80,000 bytes; "
        "the limit is 65,536)",
        "kb_search query": "query: too long (131,072 characters; the limit is 65,536)",
        "task_status run id": "run_id: too long (100,000 characters; the limit is 256)",
        "run_task agent": "agent: too long (100,000 characters; the limit is 256)",
    }
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            for case, (tool, args) in cases.items():
                seen[case] = error_text(await s.call_tool(tool, args))
            assert ok(await s.call_tool("kb_search", {"query": "lint"}))["hits"] == []

    run(scenario)
    assert seen == expected
    assert not ws.logs_dir.exists() or list(ws.logs_dir.iterdir()) == []  # no run started


# --- path confinement, the rule itself ----------------------------------------------------


@pytest.mark.parametrize(
    ("given", "allowed"),
    [
        ("dates.py", True),
        ("sub/../dates.py", True),
        (".", True),
        ("{repo}", True),
        ("{ws}/hub", True),
        ("{ws}/../ws-other", False),
        ("/etc/passwd", False),
        ("..", False),
        ("../repo-sibling/x", False),
        ("link-out/passwd", False),
        ("link-in/dates.py", True),
        ("~/x", False),
        ("{ws}/.agentos/state.db", False),
        (".git/config", False),
        ("sub/.git", False),
    ],
    ids=lambda v: str(v),
)
def test_only_paths_in_the_workspace_or_an_allowed_repository_are_accepted(
    ws: Workspace, repo: Path, given: str, allowed: bool
) -> None:
    (repo / "link-out").symlink_to("/etc")
    (repo / "link-in").symlink_to(repo)
    fence = Confinement(ws.root, [repo])
    raw = given.format(repo=repo, ws=ws.root)
    if allowed:
        assert fence.path(raw, "p").is_relative_to(repo) or fence.path(raw, "p").is_relative_to(
            ws.root
        )
    else:
        with pytest.raises(BadInput, match=r"is outside the workspace|which MCP clients may not"):
            fence.path(raw, "p")


@pytest.mark.parametrize(
    ("source", "result"),
    [
        (
            "https://example.invalid/agents/fixer.git@v1",
            "https://example.invalid/agents/fixer.git@v1",
        ),
        ("git@example.invalid:agents/fixer.git", "git@example.invalid:agents/fixer.git"),
        ("file://{repo}@main", "file://{repo}@main"),
        ("dates.py", "{repo}/dates.py"),
        ("ftp://example.invalid/x.tar.gz", "error: URL scheme 'ftp' is not allowed"),
        ("fd::17", "error: git transport 'fd' is not allowed"),
        ("file:///etc/passwd", "error: /etc/passwd is outside"),
    ],
    ids=lambda v: str(v),
)
def test_hub_sources_pass_remote_urls_and_confine_local_ones(
    ws: Workspace, repo: Path, source: str, result: str
) -> None:
    fence = Confinement(ws.root, [repo])
    raw, want = source.format(repo=repo), result.format(repo=repo)
    if want.startswith("error: "):
        with pytest.raises(BadInput, match=want.removeprefix("error: ")):
            fence.hub_source(raw)
    else:
        assert fence.hub_source(raw) == want


# --- a clean protocol stream and a light start --------------------------------------------


def test_stdout_carries_only_the_protocol_and_logs_go_to_stderr(
    ws: Workspace, tmp_path: Path
) -> None:
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "route", "arguments": {"request": "fix the lint errors"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "kb_add", "arguments": {"paths": ["/etc"]}},
        },
    ]
    errlog = tmp_path / "stderr.log"  # a file: a debug log could fill a pipe nobody reads
    with errlog.open("w") as err:
        proc = subprocess.Popen(
            server_argv(ws),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "AGENTOS_LOG": "DEBUG"},
        )
    with proc:
        assert proc.stdin
        out = Lines(proc.stdout)
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        lines = [out.next(timeout=60, what="a reply") for _ in range(3)]  # one per id
        proc.stdin.close()  # the client goes away: the server ends
        assert proc.wait(timeout=60) == 0
        lines += out.rest()
    stderr = errlog.read_text()
    # Every line is a JSON-RPC message; calls run concurrently, so replies come in any order.
    replies = sorted((json.loads(line) for line in lines), key=lambda r: r["id"])
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[0]["result"]["serverInfo"]["name"] == "agentos"
    assert replies[1]["result"]["structuredContent"]["decision"] in ("route", "clarify")
    assert replies[2]["result"]["isError"] is True
    assert "agentos-mcp DEBUG" in stderr  # the debug log went to stderr


def test_nothing_heavy_is_imported_before_initialize(ws: Workspace, tmp_path: Path) -> None:
    errlog = tmp_path / "importtime.log"

    async def scenario() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-X", "importtime", *server_argv(ws)[1:]],
            # What its own process imports (a fork of the mcp command server has it all).
            env={**os.environ, "AGENTOS_CLI_SERVER": "0"},
        )
        with errlog.open("w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.list_tools()

    run(scenario)
    imported = {
        line.split("|")[-1].strip()
        for line in errlog.read_text().splitlines()
        if line.startswith("import time:")
    }
    assert "agentos.mcp_server.server" in imported
    heavy = {
        "langchain",
        "langchain_core",
        "crewai",
        "ollama",
        "agentos.run.orchestrator",
        "agentos.routing.router",
        "agentos.knowledge.store",
        "agentos.interview.engine",
        "git",
    }
    assert heavy & imported == set()
    # tools/list is answered from the stored list: no family is built before it is called
    families = {f"agentos.mcp_server.tools.{family}" for family in FAMILIES}
    assert families & imported == set()


def test_the_stored_tool_list_is_what_the_families_build() -> None:
    """tools/list answers from agentos/mcp_server/tools.json until a family is built;
    `python -m agentos.cli._docs` writes it, and here it must equal what the families
    build now (so the two cannot drift)."""
    from agentos.cli._docs import tool_specs

    built = [(entry["family"], entry["tool"]) for entry in tool_specs()]
    assert stored_tools() == built
    assert [spec["name"] for _, spec in built] == list(TOOL_NAMES)


def test_a_family_is_built_when_one_of_its_tools_is_first_called(ws: Workspace) -> None:
    """Listing builds nothing; calling a tool builds its family alone, and the tool then
    lists exactly as it was listed before."""
    from mcp.server.fastmcp import FastMCP

    from agentos.mcp_server.server import build_server

    server = build_server(ws)

    async def scenario() -> None:
        before = {t.name: t for t in await server.list_tools()}
        assert sorted(before) == sorted(TOOL_NAMES)
        assert await FastMCP.list_tools(server) == []  # nothing built
        await server.call_tool("hub_list", {})
        built = {t.name for t in await FastMCP.list_tools(server)}
        assert built == {"hub_list", "hub_install"}  # the hub family, and it alone
        after = {t.name: t for t in await server.list_tools()}
        assert after == before

    run(scenario)


# --- the serve command --------------------------------------------------------------------


def test_serve_on_a_busy_port_says_so_in_one_line(
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = cli("mcp", "serve", "--http", f"127.0.0.1:{port}")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"error: --http: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--http", "0.0.0.0:8765"],
            "error: --http: 0.0.0.0 is not a loopback address: plain HTTP carries the "
            "token unencrypted, so pass --allow-remote to listen there",
        ),
        (
            ["--http", "localhost:http"],
            "error: --http: 'localhost:http' is not HOST:PORT (e.g. 127.0.0.1:8765)",
        ),
        (["--repo", "/no/such/dir"], "error: /no/such/dir: --repo: is not a directory"),
    ],
    ids=["remote", "bad-port", "missing-repo"],
)
def test_serve_refuses_bad_options_with_one_line(
    cli: Callable[..., subprocess.CompletedProcess[str]], args: list[str], message: str
) -> None:
    done = cli("mcp", "serve", *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_completions_offer_card_ids_receipt_ids_and_agent_names(ws: Workspace) -> None:
    from mcp.types import PromptReference, ResourceTemplateReference

    from agentos.routing.cards import load_cards

    cards = ResourceTemplateReference(type="ref/resource", uri="agentos://cards/{id}")
    receipts = ResourceTemplateReference(type="ref/resource", uri="agentos://receipts/{id}")
    from agentos.routing.router import route

    route(ws, "fix the lint errors")  # one receipt

    async def scenario() -> None:
        async with connect("stdio", ws) as s:
            got = (await s.complete(cards, {"name": "id", "value": "fix"})).completion
            ids = sorted(c.id for c in load_cards(ws.cards_dir).cards if c.id.startswith("fix"))
            assert got.values == ids and ids
            got = (await s.complete(receipts, {"name": "id", "value": ""})).completion
            assert got.values == ["00000001"]
            prompt = PromptReference(type="ref/prompt", name="any")
            got = (await s.complete(prompt, {"name": "agent", "value": "ruff"})).completion
            assert got.values == ["ruff-fixer"]
            got = (await s.complete(prompt, {"name": "colour", "value": ""})).completion
            assert (got.values, got.total) == ([], 0)

    run(scenario)


def test_a_failing_tool_is_a_log_message_at_the_sessions_level(ws: Workspace) -> None:
    heard: list[Any] = []

    async def on_log(params: Any) -> None:
        heard.append(params)

    async def scenario() -> None:
        async with connect("stdio", ws, logging_callback=on_log) as s:
            assert s.get_server_capabilities().logging is not None  # type: ignore[union-attr]
            assert (await s.call_tool("receipt_show", {"id": "424242"})).isError
            assert heard == []  # no log message before the session asks for them
            await s.set_logging_level("warning")
            failed = await s.call_tool("receipt_show", {"id": "424242"})
            assert failed.isError
            assert [(p.level, p.logger, p.data) for p in heard] == [
                ("error", "agentos", failed.content[0].text)  # type: ignore[union-attr]
            ]
            await s.set_logging_level("critical")
            assert (await s.call_tool("receipt_show", {"id": "424242"})).isError
            assert len(heard) == 1  # below the level the session asked for

    run(scenario)


@needs_tmux
def test_run_task_with_wait_reports_each_event_as_progress_and_as_a_log_message(
    ws: Workspace, repo: Path, scribe: None, tmux_socket: str
) -> None:
    reported: list[tuple[float, float | None, str | None]] = []
    logged: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async def on_log(params: Any) -> None:
        logged.append(params.data)

    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo), logging_callback=on_log) as s:
            await s.set_logging_level("info")
            ended = ok(
                await s.call_tool(
                    "run_task",
                    {"request": "scribe-task", "force": True, "wait": True},
                    progress_callback=on_progress,
                )
            )
            assert (ended["status"], ended["message"]) == (
                "succeeded",
                ok(await s.call_tool("task_status", {"run_id": ended["run_id"]}))["message"],
            )
            events = ok(await s.call_tool("run_events", {"run_id": ended["run_id"]}))
            said = [e["message"] for e in events["events"]]
            assert [m for _v, _t, m in reported] == said == logged
            assert [v for v, _t, _m in reported] == [e["seq"] for e in events["events"]]
            assert "scribe: attempt 1 started in tmux session" in " ".join(said)
            assert said[-1].startswith("run: succeeded")

    run(scenario)


@needs_tmux
def test_a_client_lists_runs_follows_one_and_cancels_it(
    ws: Workspace, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    src = write_package(
        tmp_path / "src" / "slow",
        name="slow",
        files={"run.sh": "echo first words\nsleep 300\n"},
    )
    Hub(ws.hub_dir).install(str(src))

    async def scenario() -> None:
        async with connect("stdio", ws, "--repo", str(repo)) as s:
            run_id = ok(
                await s.call_tool(
                    "run_task", {"request": "anything", "force": True, "agent": "slow"}
                )
            )["run_id"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the run names its agents once they start
                status = ok(await s.call_tool("task_status", {"run_id": run_id}))
                if status["agents"]:
                    break
                await anyio.sleep(0.1)
            offset, text = 0, ""
            while "first words" not in text and time.monotonic() < deadline:
                part = await s.call_tool("run_log", {"run_id": run_id, "agent": "slow"})
                got = ok(part)
                text, offset = got["text"], got["next_offset"]
                await anyio.sleep(0.1)
            assert "first words" in text and offset == len(text.encode())
            again = ok(
                await s.call_tool("run_log", {"run_id": run_id, "agent": "slow", "offset": offset})
            )
            assert (again["text"], again["next_offset"], again["finished"]) == ("", offset, False)
            live = ok(await s.call_tool("runs_list", {"status": "running"}))
            assert [r["run_id"] for r in live["runs"]] == [run_id]
            (agent,) = ok(await s.call_tool("task_status", {"run_id": run_id}))["agents"]
            assert "first words" in agent["output_tail"]

            cancelled = ok(await s.call_tool("run_cancel", {"run_id": run_id}))

            assert cancelled == {"run_id": run_id, "status": "cancelled"}
            assert ok(await s.call_tool("runs_list", {"status": "running"}))["runs"] == []
            text = error_text(await s.call_tool("run_cancel", {"run_id": run_id}))
            assert text == f"run: run {run_id} is already cancelled"
            text = error_text(await s.call_tool("runs_list", {"status": "sleeping"}))
            assert text.startswith("status: not a run status: 'sleeping' (one of starting, ")
            text = error_text(await s.call_tool("run_log", {"run_id": run_id, "agent": "x"}))
            assert text == f"agent: run {run_id} has no agent 'x'"

    run(scenario)


def test_a_client_runs_an_eval_and_reads_its_report(ws: Workspace) -> None:
    async def scenario() -> None:
        async with connect("stdio", ws) as s:
            ran = ok(
                await s.call_tool(
                    "eval_run", {"suite": "arithmetic", "agent": "calculator", "jobs": 2}
                )
            )
            assert (ran["suite"], ran["agent"], ran["passed"]) == (
                "arithmetic",
                "calculator@1.0.0",
                True,
            )
            assert round(ran["average"], 3) == 0.833 and len(ran["predictions"]) == 6
            shown = ok(await s.call_tool("eval_report", {"eval_id": ran["id"]}))
            assert shown["predictions"] == ran["predictions"]
            text = error_text(
                await s.call_tool("eval_run", {"suite": "../x", "agent": "calculator"})
            )
            assert text == "suite: give a suite's name, not a path"

    run(scenario)


def test_a_client_starts_an_evolution_and_follows_it_to_the_end(
    ws: Workspace, tmp_path: Path
) -> None:
    from test_evolve import FIXER, TASKS, TOY

    for name, files in (
        ("toy", {"run.sh": TOY, "answers.txt": "2+2=4\n"}),
        ("fixer", {"run.sh": FIXER.replace("$SLOW_GENERATION", "none")}),
    ):
        Hub(ws.hub_dir).install(str(write_package(tmp_path / "src" / name, name=name, files=files)))
    suite = ws.root / "evals" / "sums"
    suite.mkdir(parents=True)
    (suite / "suite.yaml").write_text(
        json.dumps({"name": "sums", "evaluator": {"kind": "exact", "normalize": ["strip"]}})
    )
    (suite / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))

    async def scenario() -> None:
        async with connect("stdio", ws) as s:
            started = ok(
                await s.call_tool(
                    "evolve_start",
                    {"package": "toy", "suite": "sums", "meta": "fixer", "generations": 2,
                     "select": "latest"},
                )
            )  # fmt: skip
            assert started["package"] == "toy@1.0.0" and started["suite"] == "sums"
            deadline = time.monotonic() + 120
            while True:
                status = ok(await s.call_tool("evolve_status", {"evo_id": started["id"]}))
                if status["status"].startswith("finished") or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.2)
            assert status["status"] == "finished: made 2 generation(s), as asked"
            assert [(g["gen"], g["parent"], g["score"]) for g in status["archive"]] == [
                (0, None, 0.25),
                (1, 0, 0.5),
                (2, 1, 0.75),
            ]
            text = error_text(
                await s.call_tool("evolve_start", {"package": "toy", "suite": "sums", "meta": "x"})
            )
            assert text.startswith("--meta: no package 'x'"), text

    run(scenario)
