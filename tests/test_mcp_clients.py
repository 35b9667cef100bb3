"""Registering the MCP server with Claude Code and Gemini CLI, the doctor, and the real
clients: `claude mcp list`, `gemini mcp list` and the MCP Inspector's CLI mode.

The real clients come from npm: `scripts/install-mcp-clients` puts them in
$AGENTOS_NPM_PREFIX (default ~/.cache/agentos/npm); CI runs it first. Every client runs with
a temporary HOME, so the developer's own configuration is never read or touched.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import make_repo, requires

from agentos.mcp_server.server import TOOL_NAMES
from agentos.workspace.layout import Workspace

CliRunner = Callable[..., subprocess.CompletedProcess[str]]
INSTALL_HINT = "run scripts/install-mcp-clients (CI does) to install it from npm"


def npm_bin_dir() -> Path:
    prefix = os.environ.get("AGENTOS_NPM_PREFIX") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentos" / "npm"
    )
    return Path(prefix) / "node_modules" / ".bin"


def npm_tool(name: str) -> str | None:
    local = npm_bin_dir() / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def needs(name: str) -> pytest.MarkDecorator:
    return requires(npm_tool(name) is not None, f"{name} is not installed: {INSTALL_HINT}")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


def client_env(home: Path, *, with_clients: bool) -> dict[str, str]:
    """The environment for `agentos mcp ...` and the clients: a temporary HOME, none of the
    caller's client settings, and the npm-installed clients on PATH or not."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLAUDE", "ANTHROPIC", "GEMINI", "GOOGLE"))
    }
    env["HOME"] = str(home)
    env.pop("XDG_CONFIG_HOME", None)
    dirs = [
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d and not any((Path(d) / c).exists() for c in ("claude", "gemini"))
    ]
    if with_clients:
        dirs.insert(0, str(npm_bin_dir()))
    env["PATH"] = os.pathsep.join(dirs)
    env["DISABLE_AUTOUPDATER"] = "1"
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    return env


def serve_argv(ws: Workspace, *repos: Path) -> list[str]:
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "mcp", "serve"]
    for repo in repos:
        argv += ["--repo", str(repo)]
    return argv


# --- writing the config files (no client CLI installed) -----------------------------------


def test_install_claude_without_its_cli_writes_claude_json_and_keeps_what_is_there(
    cli: CliRunner, ws: Workspace, home: Path, project: Path
) -> None:
    existing = {
        "numStartups": 3,
        "mcpServers": {"keep": {"command": "keep-me"}},
        "projects": {
            "/elsewhere": {"mcpServers": {"other": {"command": "x"}}},
            str(project): {"allowedTools": ["Bash"]},
        },
    }
    config = home / ".claude.json"
    config.write_text(json.dumps(existing))
    config.chmod(0o600)

    done = cli(
        "mcp",
        "install",
        "claude",
        "--project",
        str(project),
        "--json",
        env=client_env(home, with_clients=False),
    )

    assert done.returncode == 0, done.stderr
    argv = serve_argv(ws, project)
    assert json.loads(done.stdout) == {
        "client": "claude",
        "scope": "local",
        "name": "agentos",
        "method": "config file",
        "where": str(config),
        "command": argv,
        "url": None,
    }
    expected = json.loads(json.dumps(existing))
    expected["projects"][str(project)]["mcpServers"] = {
        "agentos": {"type": "stdio", "command": argv[0], "args": argv[1:], "env": {}}
    }
    assert json.loads(config.read_text()) == expected
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    again = cli(
        "mcp",
        "install",
        "claude",
        "--project",
        str(project),
        env=client_env(home, with_clients=False),
    )
    assert again.returncode == 0 and json.loads(config.read_text()) == expected


@pytest.mark.parametrize(
    ("client", "scope", "where"),
    [
        ("claude", "project", "{project}/.mcp.json"),
        ("claude", "user", "{home}/.claude.json"),
        ("gemini", "project", "{project}/.gemini/settings.json"),
        ("gemini", "user", "{home}/.gemini/settings.json"),
    ],
)
def test_install_writes_the_documented_file_of_each_client_and_scope(
    cli: CliRunner, ws: Workspace, home: Path, project: Path, client: str, scope: str, where: str
) -> None:
    target = Path(where.format(project=project, home=home))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"theme": "dark", "mcpServers": {"keep": {"command": "k"}}}))

    done = cli(
        "mcp",
        "install",
        client,
        "--scope",
        scope,
        "--project",
        str(project),
        env=client_env(home, with_clients=False),
    )

    assert done.returncode == 0, done.stderr
    argv = serve_argv(ws, project)
    entry: dict[str, Any] = {"command": argv[0], "args": argv[1:]}
    if client == "claude":
        entry = {"type": "stdio", **entry, "env": {}}
    assert json.loads(target.read_text()) == {
        "theme": "dark",
        "mcpServers": {"keep": {"command": "k"}, "agentos": entry},
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["gemini", "--scope", "local"],
            "error: --scope: gemini has no 'local' scope (use project, user)",
        ),
        (
            ["claude", "--name", "a b"],
            "error: --name: 'a b' is not a server name (letters, digits, - and _)",
        ),
        (["claude", "--repo", "/no/such/dir"], "error: /no/such/dir: --repo: is not a directory"),
    ],
    ids=["gemini-local", "bad-name", "missing-repo"],
)
def test_install_refuses_bad_options_with_one_line(
    cli: CliRunner, home: Path, project: Path, args: list[str], message: str
) -> None:
    done = cli(
        "mcp", "install", *args, "--project", str(project), env=client_env(home, with_clients=False)
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_install_leaves_a_broken_config_file_alone(
    cli: CliRunner, home: Path, project: Path
) -> None:
    config = home / ".claude.json"
    config.write_text('{"numStartups": 3,')

    done = cli(
        "mcp",
        "install",
        "claude",
        "--project",
        str(project),
        env=client_env(home, with_clients=False),
    )

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {config}: not valid JSON (line 1): Expecting property name "
        "enclosed in double quotes; fix it or register by hand\n"
    )
    assert config.read_text() == '{"numStartups": 3,'


# --- the doctor ---------------------------------------------------------------------------


def test_doctor_connects_to_the_server_and_to_each_registration(
    cli: CliRunner, ws: Workspace, home: Path, project: Path
) -> None:
    env = client_env(home, with_clients=False)
    assert cli("mcp", "install", "claude", "--project", str(project), env=env).returncode == 0

    done = cli("mcp", "doctor", "--project", str(project), "--json", env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["server", "claude local 'agentos'", "gemini registration"]
    assert checks["server"]["status"] == "ok"
    assert checks["server"]["detail"].startswith(
        f"workspace {ws.root}: connected to agentos 0.1.0: initialize + tools/list (25 tools)"
    )
    assert checks["claude local 'agentos'"]["status"] == "ok"
    assert checks["claude local 'agentos'"]["detail"].startswith(
        f"{home / '.claude.json'}: connected to agentos 0.1.0"
    )
    assert checks["gemini registration"] == {
        "name": "gemini registration",
        "status": "warn",
        "detail": f"not registered for {project} (run `agentos mcp install gemini`); the "
        "gemini CLI is not on PATH either",
    }


def test_doctor_fails_when_a_registration_does_not_start(
    cli: CliRunner, home: Path, project: Path
) -> None:
    gemini = project / ".gemini" / "settings.json"
    gemini.parent.mkdir()
    gemini.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "agentos": {
                        "command": str(project / "no-such-python"),
                        "args": ["-m", "agentos", "mcp", "serve"],
                    }
                }
            }
        )
    )

    done = cli(
        "mcp",
        "doctor",
        "--project",
        str(project),
        "--json",
        env=client_env(home, with_clients=False),
    )

    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["server"]["status"] == "ok"
    failed = checks["gemini project 'agentos'"]
    assert failed["status"] == "fail"
    assert failed["detail"].startswith(f"{gemini}: does not connect: ")


# --- the real clients ---------------------------------------------------------------------


def run_client(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    assert done.returncode == 0, f"{argv[:3]} exit {done.returncode}: {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.slow
@needs("claude")
def test_claude_code_lists_the_installed_server_as_connected(
    cli: CliRunner, ws: Workspace, home: Path, project: Path
) -> None:
    env = client_env(home, with_clients=True)
    done = cli("mcp", "install", "claude", "--json", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["method"] == "claude mcp add"

    listed = run_client([str(npm_tool("claude")), "mcp", "list"], env, project)

    argv = " ".join(serve_argv(ws, project))
    assert f"agentos: {argv} - ✔ Connected" in listed, listed


@pytest.mark.slow
@needs("gemini")
def test_gemini_cli_lists_the_installed_server_as_connected_in_a_trusted_folder(
    cli: CliRunner, ws: Workspace, home: Path, project: Path
) -> None:
    (home / ".gemini").mkdir()
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(project): "TRUST_FOLDER"})
    )
    env = client_env(home, with_clients=True)
    done = cli("mcp", "install", "gemini", "--json", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["method"] == "gemini mcp add"

    listed = run_client([str(npm_tool("gemini")), "mcp", "list"], env, project)

    argv = " ".join(serve_argv(ws, project))
    assert f"✓ agentos: {argv} (stdio) - Connected" in listed, listed
    doctor = cli("mcp", "doctor", "--json", cwd=project, env=env)
    checks = {c["name"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}
    assert checks["gemini project 'agentos'"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("client", "listed_as", "registration"),
    [
        pytest.param(
            "claude",
            "agentos: {argv} - ✔ Connected",
            "claude local 'agentos'",
            marks=needs("claude"),
        ),
        pytest.param(
            "gemini",
            "✓ agentos: {argv} (stdio) - Connected",
            "gemini project 'agentos'",
            marks=needs("gemini"),
        ),
    ],
)
def test_install_with_repo_registers_for_that_repository_not_the_current_directory(
    cli: CliRunner,
    ws: Workspace,
    home: Path,
    project: Path,
    tmp_path: Path,
    client: str,
    listed_as: str,
    registration: str,
) -> None:
    """`mcp install CLIENT --repo X`, run elsewhere, registers the server for X: the
    client's own CLI lists it as connected inside X, and `mcp doctor` run inside X finds it;
    the directory it ran in has no registration."""
    (home / ".gemini").mkdir()
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(project): "TRUST_FOLDER"})
    )
    elsewhere = make_repo(tmp_path / "elsewhere")
    env = client_env(home, with_clients=True)

    done = cli("mcp", "install", client, "--repo", str(project), "--json", cwd=elsewhere, env=env)

    assert done.returncode == 0, done.stderr
    installed = json.loads(done.stdout)
    assert (installed["method"], installed["command"]) == (
        f"{client} mcp add",
        serve_argv(ws, project),
    )
    listed = run_client([str(npm_tool(client)), "mcp", "list"], env, project)
    assert listed_as.format(argv=" ".join(serve_argv(ws, project))) in listed, listed
    doctor = cli("mcp", "doctor", "--json", cwd=project, env=env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks[registration]["status"] == "ok", checks
    away = cli("mcp", "doctor", "--json", cwd=elsewhere, env=env)
    checks = {c["name"]: c for c in json.loads(away.stdout)["checks"]}
    assert checks[f"{client} registration"]["detail"].startswith(f"not registered for {elsewhere} ")


@pytest.mark.slow
@needs("mcp-inspector")
def test_the_mcp_inspector_cli_lists_every_tool_with_its_schemas(
    ws: Workspace, home: Path, project: Path
) -> None:
    inspector = str(npm_tool("mcp-inspector"))
    env = client_env(home, with_clients=True)

    out = run_client([inspector, "--cli", *serve_argv(ws), "--method", "tools/list"], env, project)

    tools = {t["name"]: t for t in json.loads(out[out.index("{") :])["tools"]}
    assert sorted(tools) == sorted(TOOL_NAMES)
    for name, tool in tools.items():
        assert tool["description"], name
        assert tool["inputSchema"]["type"] == "object", name
        assert tool["outputSchema"]["type"] == "object", name
        assert set(tool["annotations"]) >= {"title", "readOnlyHint", "destructiveHint"}, name
    assert tools["kb_search"]["inputSchema"]["required"] == ["query"]
    assert tools["kb_search"]["inputSchema"]["properties"]["k"]["maximum"] == 100

    called = run_client(
        [inspector, "--cli", *serve_argv(ws), "--method", "tools/call", "--tool-name", "hub_list"],
        env,
        project,
    )
    result = json.loads(called[called.index("{") :])
    assert result["isError"] is False
    assert {p["name"] for p in result["structuredContent"]["packages"]} >= {"ruff-fixer"}
