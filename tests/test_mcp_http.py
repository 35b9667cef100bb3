"""MCP over HTTP: the workspace's bearer token and the Host/Origin checks, driven by a real
HTTP client (httpx), the MCP Inspector's CLI, Claude Code and the official MCP conformance
suite against a real `agentos mcp serve --http` subprocess, on 127.0.0.1 and on 127.0.0.2.

The npm tools come from `scripts/install-mcp-clients` (see tests/test_mcp_clients.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import CliRunner
from test_mcp_clients import client_env, needs, npm_bin_dir, npm_tool, run_client
from test_mcp_server import server_argv, wait_for_url

from agentos.mcp_server.auth import token_file
from agentos.mcp_server.server import TOOL_NAMES
from agentos.workspace.layout import Workspace

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
UNAUTHORIZED = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {
        "code": -32001,
        "message": "unauthorized: send the header 'Authorization: Bearer <token>' with the "
        "token `agentos mcp serve --http` printed",
    },
}


@dataclass(frozen=True)
class Served:
    url: str
    port: int
    token: str
    stderr: str


@contextmanager
def http_server(ws: Workspace, host: str, *extra: str) -> Iterator[Served]:
    """`agentos mcp serve --http HOST:0` in a subprocess, stopped afterwards."""
    errlog = ws.root.parent / f"mcp-http-{host}.log"
    with errlog.open("wb") as err:
        proc = subprocess.Popen(
            server_argv(ws, "--http", f"{host}:0", *extra),
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
        )
    try:
        url = wait_for_url(proc, errlog)
        token = token_file(ws).read_text().strip()
        yield Served(url, int(url.rsplit(":", 1)[1].split("/")[0]), token, errlog.read_text())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    return httpx.post(url, json=body, headers={**base, **headers}, timeout=30)


def bearer(token: str) -> str:
    return f"Bearer {token}"


# --- the token ----------------------------------------------------------------------------


def test_http_requests_need_the_workspace_token_which_is_made_once_and_kept_private(
    ws: Workspace,
) -> None:
    with http_server(ws, "127.0.0.1") as served:
        path = token_file(ws)
        assert path.parent == ws.root / ".agentos"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert served.stderr == (
            f"agentos mcp: serving workspace {ws.root} on {served.url}\n"
            f"agentos mcp: clients must send the header 'Authorization: Bearer "
            f"{served.token}' (the token is kept in {path})\n"
        )
        refused = {
            "none": post(served.url, INITIALIZE),
            "wrong": post(served.url, INITIALIZE, Authorization=bearer("x" * 43)),
            "prefix": post(served.url, INITIALIZE, Authorization=bearer(served.token[:-1])),
            "basic": post(served.url, INITIALIZE, Authorization=f"Basic {served.token}"),
        }
        route = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        route["params"] = {"name": "route", "arguments": {"request": "fix the lint errors"}}
        refused["tools/call"] = post(served.url, route)
        for case, response in refused.items():
            assert (response.status_code, response.json()) == (401, UNAUTHORIZED), case
            assert response.headers["www-authenticate"] == 'Bearer realm="agentos"', case
        accepted = post(served.url, INITIALIZE, Authorization=bearer(served.token))
        assert accepted.status_code == 200, accepted.text
    assert list(ws.receipts_dir.iterdir()) == []  # the refused tools/call routed nothing

    with http_server(ws, "127.0.0.1") as again:
        assert again.token == served.token  # kept, not made anew


def test_a_token_file_others_may_read_is_refused_in_one_line(ws: Workspace, cli: CliRunner) -> None:
    path = token_file(ws)
    path.write_text("t" * 43 + "\n")
    path.chmod(0o644)

    done = cli("mcp", "serve", "--http", "127.0.0.1:0")

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {path}: the MCP token is readable by others (mode 644); remove it and "
        "`agentos mcp serve --http` makes a new token\n"
    )


# --- Host and Origin: DNS rebinding -------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_requests_naming_another_host_or_origin_are_refused_on_every_loopback_address(
    ws: Workspace, host: str
) -> None:
    with http_server(ws, host) as served:
        auth = bearer(served.token)
        run_task = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        run_task["params"] = {"name": "run_task", "arguments": {"request": "x", "force": True}}
        refused = {
            "evil host": post(served.url, INITIALIZE, Authorization=auth, Host="evil.example"),
            "evil host, port": post(
                served.url, INITIALIZE, Authorization=auth, Host=f"evil.example:{served.port}"
            ),
            "evil origin": post(
                served.url, INITIALIZE, Authorization=auth, Origin="http://evil.example"
            ),
            "run_task, evil host": post(
                served.url, run_task, Authorization=auth, Host=f"evil.example:{served.port}"
            ),
        }
        assert {case: (r.status_code, r.text) for case, r in refused.items()} == {
            "evil host": (421, "Invalid Host header"),
            "evil host, port": (421, "Invalid Host header"),
            "evil origin": (403, "Invalid Origin header"),
            "run_task, evil host": (421, "Invalid Host header"),
        }
        for name in (host, "localhost", "127.0.0.1"):
            named = f"{name}:{served.port}"
            accepted = post(
                served.url, INITIALIZE, Authorization=auth, Host=named, Origin=f"http://{named}"
            )
            assert accepted.status_code == 200, (name, accepted.text)
    assert list(ws.logs_dir.iterdir()) == []  # no run started


def test_a_name_given_with_allow_host_is_accepted_and_no_other(ws: Workspace) -> None:
    with http_server(ws, "127.0.0.2", "--allow-host", "agentos.test") as served:
        auth = bearer(served.token)
        ok = post(served.url, INITIALIZE, Authorization=auth, Host=f"agentos.test:{served.port}")
        other = post(served.url, INITIALIZE, Authorization=auth, Host=f"other.test:{served.port}")
    assert (ok.status_code, other.status_code) == (200, 421)


# --- the MCP Inspector's CLI --------------------------------------------------------------


@pytest.mark.slow
@needs("mcp-inspector")
def test_the_mcp_inspector_works_over_http_with_the_token_and_is_refused_without_it(
    ws: Workspace, tmp_path: Path
) -> None:
    inspector = str(npm_tool("mcp-inspector"))
    home = tmp_path / "home"
    home.mkdir()
    env = client_env(home, with_clients=True)
    with http_server(ws, "127.0.0.2") as served:
        base = [inspector, "--cli", served.url, "--transport", "http", "--method", "tools/list"]
        header = ["--header", f"Authorization: Bearer {served.token}"]

        listed = run_client([*base, *header], env, tmp_path)
        refused = subprocess.run(
            base, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
        )
        wrong = subprocess.run(
            [*base, "--header", "Authorization: Bearer " + "x" * 43],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )

    tools = json.loads(listed[listed.index("{") :])["tools"]
    assert sorted(t["name"] for t in tools) == sorted(TOOL_NAMES)
    for done in (refused, wrong):
        assert done.returncode == 1
        said = done.stdout + done.stderr
        assert "Failed to connect to MCP server" in said, said
        assert json.dumps(UNAUTHORIZED) in said, said


# --- Claude Code, registered by `agentos mcp install --url` -------------------------------


def test_install_url_writes_the_token_into_the_clients_config_and_keeps_it_private(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    gemini = home / ".gemini" / "settings.json"
    gemini.write_text(json.dumps({"theme": "dark"}))
    gemini.chmod(0o644)
    project = tmp_path / "project"
    project.mkdir()
    env = client_env(home, with_clients=False)
    url = "http://127.0.0.1:8765/mcp"

    def install(*args: str) -> subprocess.CompletedProcess[str]:
        return cli("mcp", "install", *args, "--project", str(project), env=env)

    claude = install("claude", "--url", url)
    gem = install("gemini", "--url", url, "--json")
    shared = install("claude", "--url", url, "--scope", "project")
    not_url = install("gemini", "--url", "127.0.0.1:8765")

    token = token_file(ws).read_text().strip()
    entry = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    assert claude.returncode == 0, claude.stderr
    assert claude.stdout == (
        f"registered MCP server 'agentos' with claude (local scope) via config file: "
        f"{home / '.claude.json'}\n  url: {url} (with the workspace's token)\n"
    )
    claude_json = json.loads((home / ".claude.json").read_text())
    assert claude_json == {"projects": {str(project): {"mcpServers": {"agentos": entry}}}}
    assert gem.returncode == 0, gem.stderr
    assert json.loads(gem.stdout) == {
        "client": "gemini",
        "scope": "user",
        "name": "agentos",
        "method": "config file",
        "where": str(gemini),
        "command": [],
        "url": url,
    }
    assert json.loads(gemini.read_text()) == {"theme": "dark", "mcpServers": {"agentos": entry}}
    for path in (home / ".claude.json", gemini):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (shared.returncode, shared.stderr) == (
        2,
        f"error: --scope: {project / '.mcp.json'} is shared with the project, and an HTTP "
        "registration holds the workspace's token: use --scope local or user\n",
    )
    assert (not_url.returncode, not_url.stderr) == (
        2,
        "error: --url: '127.0.0.1:8765' is not an http:// URL (give the one `agentos mcp "
        "serve --http` printed)\n",
    )


@pytest.mark.slow
@needs("claude")
def test_claude_code_connects_over_http_with_the_token_install_wrote(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    env = client_env(home, with_clients=True)
    with http_server(ws, "127.0.0.2") as served:
        done = cli("mcp", "install", "claude", "--url", served.url, cwd=project, env=env)
        assert done.returncode == 0, done.stderr
        listed = run_client([str(npm_tool("claude")), "mcp", "list"], env, project)
        doctor = cli("mcp", "doctor", "--json", cwd=project, env=env)

    assert f"agentos: {served.url} (HTTP) - ✔ Connected" in listed, listed
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["claude local 'agentos'"]["status"] == "ok", checks


# --- the official MCP conformance suite ---------------------------------------------------

# The conformance suite sends its requests with undici; this script, preloaded into it,
# replaces undici's global dispatcher by one that sends the workspace's token (the scenario
# checks Host and Origin; a server that needs a token refuses it everything without one)
# and resolves `localhost`, the only name the scenario accepts in its URL, to the address
# the server listens on.
CONFORMANCE_PRELOAD = """
const dns = require("node:dns");
const path = require("node:path");
const suite = path.dirname(require.resolve("@modelcontextprotocol/conformance/package.json",
  { paths: [process.env.AGENTOS_NPM_PREFIX] }));
const undici = require(require.resolve("undici", { paths: [suite] }));
const address = process.env.AGENTOS_TEST_LOCALHOST;
const lookup = (host, options, callback) =>
  dns.lookup(host === "localhost" ? address : host, options, callback);
const authorization = `Bearer ${process.env.AGENTOS_TEST_TOKEN}`;
undici.setGlobalDispatcher(new undici.Agent({ connect: { lookup } }).compose(
  (dispatch) => (options, handler) =>
    dispatch({ ...options, headers: { ...options.headers, authorization } }, handler)));
"""


def run_conformance(
    ws: Workspace, tmp_path: Path, host: str, scenario: str
) -> tuple[subprocess.CompletedProcess[str], Path, int]:
    """One scenario of the official suite against `agentos mcp serve --http` on ``host``:
    the suite's run, its results folder and the port the server listened on."""
    preload = tmp_path / "preload.cjs"
    preload.write_text(CONFORMANCE_PRELOAD)
    out = tmp_path / "results"
    with http_server(ws, host) as served:
        env = {
            **os.environ,
            "AGENTOS_NPM_PREFIX": str(npm_bin_dir().parent.parent),
            "AGENTOS_TEST_LOCALHOST": host,
            "AGENTOS_TEST_TOKEN": served.token,
            "NODE_OPTIONS": f"--require {preload}",
        }
        done = subprocess.run(
            [
                str(npm_tool("conformance")),
                "server",
                "--url",
                f"http://localhost:{served.port}/mcp",
                "--scenario",
                scenario,
                "--output-dir",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    return done, out, served.port


@pytest.mark.slow
@needs("conformance")
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_the_conformance_suites_dns_rebinding_scenario_passes(
    ws: Workspace, tmp_path: Path, host: str
) -> None:
    done, out, served_port = run_conformance(ws, tmp_path, host, "dns-rebinding-protection")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed: 2/2, 0 failed, 0 warnings" in done.stdout, done.stdout
    (checks_file,) = out.glob("*/checks.json")
    checks = {c["id"]: c for c in json.loads(checks_file.read_text())}
    rejected = checks["localhost-host-rebinding-rejected"]
    accepted = checks["localhost-host-valid-accepted"]
    assert (rejected["status"], rejected["details"]["statusCode"]) == ("SUCCESS", 421)
    assert rejected["details"]["hostHeader"] == "evil.example.com"
    assert (accepted["status"], accepted["details"]["statusCode"]) == ("SUCCESS", 200)
    assert accepted["details"]["hostHeader"] == f"localhost:{served_port}"


# The generic server scenarios of the suite: those that need no tool, prompt or resource
# made for the suite itself (tools-call-error and tools-call-with-progress call
# `test_error_handling` and `test_tool_with_progress`, which a real server does not have;
# completion-complete asks about the suite's own prompt and checks the answer's shape).
GENERIC_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "logging-set-level",
    "completion-complete",
)


@pytest.mark.slow
@needs("conformance")
@pytest.mark.parametrize("scenario", GENERIC_SCENARIOS)
def test_the_conformance_suites_generic_server_scenarios_pass(
    ws: Workspace, tmp_path: Path, scenario: str
) -> None:
    done, out, _port = run_conformance(ws, tmp_path, "127.0.0.1", scenario)

    (checks_file,) = out.glob("*/checks.json")
    checks = json.loads(checks_file.read_text())
    assert checks and {c["status"] for c in checks} == {"SUCCESS"}, checks
    assert done.returncode == 0, done.stdout + done.stderr
