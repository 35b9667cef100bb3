"""Registering the server with Claude Code and Gemini CLI, and checking the registration.

:func:`install_server` runs ``claude mcp add`` / ``gemini mcp add`` when that CLI is on
PATH, else writes the client's documented config file, keeping everything already there:

=======  =======  ====================================================================
client   scope    file
=======  =======  ====================================================================
claude   local    ``~/.claude.json``: ``projects[<project>].mcpServers[<name>]``
claude   user     ``~/.claude.json``: ``mcpServers[<name>]``
claude   project  ``<project>/.mcp.json``: ``mcpServers[<name>]``
gemini   user     ``~/.gemini/settings.json``: ``mcpServers[<name>]``
gemini   project  ``<project>/.gemini/settings.json``: ``mcpServers[<name>]``
=======  =======  ====================================================================

With ``url`` (a server started with ``agentos mcp serve --http``) the entry names that URL
and carries the workspace's token as an ``Authorization: Bearer`` header, both clients
taking HTTP headers in their config. Such an entry is always written to the file, never
passed to ``claude``/``gemini mcp add`` (a command line is visible to every user of the
machine), the file is made readable by its owner only, and the project scope, a file shared
with the project, is refused.

:func:`doctor` starts the server as this workspace would register it and as every
registration found in those files says, and checks that each answers ``initialize`` and
``tools/list`` with every tool.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentos.errors import BadInput, OperationFailed
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace

CLIENTS = ("claude", "gemini")
SCOPES = {"claude": ("local", "project", "user"), "gemini": ("project", "user")}
DEFAULT_SCOPE = {"claude": "local", "gemini": "project"}
HTTP_DEFAULT_SCOPE = {"claude": "local", "gemini": "user"}
CLI_TIMEOUT = 120


@dataclass(frozen=True)
class Installed:
    client: str
    scope: str
    name: str
    method: str  # "claude mcp add", "gemini mcp add" or "config file"
    where: str  # the config file changed
    command: list[str]  # empty for an HTTP registration
    url: str | None = None  # an HTTP registration's URL

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Slot:
    """Where a registration goes: a client's server ``name`` in one scope's config file."""

    client: str
    scope: str
    name: str
    project: Path
    file: Path

    def installed(self, method: str, command: list[str], url: str | None = None) -> Installed:
        return Installed(self.client, self.scope, self.name, method, str(self.file), command, url)


def server_command(ws: Workspace, repos: list[Path]) -> list[str]:
    """The argv a client runs to start this workspace's server."""
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "mcp", "serve"]
    for repo in repos:
        argv += ["--repo", str(repo)]
    return argv


def config_file(client: str, scope: str, project: Path, home: Path | None = None) -> Path:
    home = home or Path.home()
    if client == "claude":
        return project / ".mcp.json" if scope == "project" else home / ".claude.json"
    return (project if scope == "project" else home) / ".gemini" / "settings.json"


def install_server(
    client: str,
    ws: Workspace,
    *,
    scope: str | None = None,
    name: str = "agentos",
    project: Path | None = None,
    repos: list[Path] | None = None,
    use_cli: bool = True,
    url: str | None = None,
) -> Installed:
    """Register this workspace's server with ``client``; an existing entry of that name in
    that scope is replaced. With ``url``, the HTTP server there, with the workspace's token;
    else the stdio command.

    The registration is for ``project``: by default the first of ``repos`` (the repository
    the server is for, wherever the command runs), else the current directory, which is
    then also the server's repository when it is a git repository."""
    if client not in CLIENTS:
        raise BadInput(f"unknown client {client!r} (use {' or '.join(CLIENTS)})", field="client")
    scope = scope or (HTTP_DEFAULT_SCOPE if url else DEFAULT_SCOPE)[client]
    if scope not in SCOPES[client]:
        raise BadInput(
            f"{client} has no {scope!r} scope (use {', '.join(SCOPES[client])})", field="--scope"
        )
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise BadInput(f"{name!r} is not a server name (letters, digits, - and _)", field="--name")
    if url is not None and repos:
        raise BadInput(
            "an HTTP server's repositories are given to `agentos mcp serve --http --repo`",
            field="--repo",
        )
    repos = [Path(r).expanduser().resolve() for r in repos or []]
    for repo in repos:
        if not repo.is_dir():
            raise BadInput("is not a directory", file=repo, field="--repo")
    project = (project or (repos[0] if repos else Path.cwd())).resolve()
    slot = Slot(client, scope, name, project, config_file(client, scope, project))
    if url is not None:
        return _install_http(slot, ws, url)
    if not repos:
        repos = [project] if (project / ".git").exists() else []
    argv = server_command(ws, repos)
    exe = shutil.which(client) if use_cli else None
    if exe is not None:
        _add_with_cli(exe, slot, argv)
        return slot.installed(f"{client} mcp add", argv)
    _write_entry(slot, _entry(client, argv))
    return slot.installed("config file", argv)


def _install_http(slot: Slot, ws: Workspace, url: str) -> Installed:
    from agentos.mcp_server.auth import workspace_token

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(
            f"{url!r} is not an http:// URL (give the one `agentos mcp serve --http` printed)",
            field="--url",
        )
    if slot.scope == "project":
        others = " or ".join(s for s in SCOPES[slot.client] if s != "project")
        raise BadInput(
            f"{slot.file} is shared with the project, and an HTTP registration holds the "
            f"workspace's token: use --scope {others}",
            field="--scope",
        )
    headers = {"Authorization": f"Bearer {workspace_token(ws)}"}
    _write_entry(slot, {"type": "http", "url": url, "headers": headers}, private=True)
    return slot.installed("config file", [], url)


def _add_with_cli(exe: str, slot: Slot, argv: list[str]) -> None:
    scope, name, project = slot.scope, slot.name, slot.project
    # `mcp add` refuses (claude) or merges into (gemini) an existing name: remove it first.
    _run([exe, "mcp", "remove", "--scope", scope, name], project, check=False)
    if slot.client == "claude":  # claude mcp add NAME -- COMMAND ARGS...
        _run([exe, "mcp", "add", "--scope", scope, name, "--", *argv], project)
    else:  # gemini mcp add NAME COMMAND -- ARGS...
        _run([exe, "mcp", "add", "--scope", scope, name, argv[0], "--", *argv[1:]], project)


def _run(argv: list[str], cwd: Path, *, check: bool = True) -> str:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=CLI_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        if not check:
            return ""
        raise OperationFailed(f"`{' '.join(argv[:3])}` did not run: {exc}") from None
    if check and done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        raise OperationFailed(
            f"`{Path(argv[0]).name} {' '.join(argv[1:3])}` failed "
            f"(exit {done.returncode}): {lines[-1]}"
        )
    return done.stdout


def _entry(client: str, argv: list[str]) -> dict[str, Any]:
    if client == "claude":
        return {"type": "stdio", "command": argv[0], "args": argv[1:], "env": {}}
    return {"command": argv[0], "args": argv[1:]}


def read_json(path: Path) -> dict[str, Any]:
    """A client's JSON config file ({} when absent); a broken one is bad input."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", file=path) from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"not valid JSON (line {exc.lineno}): {exc.msg}; fix it or register by hand", file=path
        ) from None
    if not isinstance(data, dict):
        raise BadInput("expected a JSON object", file=path)
    return data


def _write_entry(slot: Slot, entry: dict[str, Any], *, private: bool = False) -> None:
    """Put ``entry`` in the slot's file, keeping the rest; ``private`` (it holds a token)
    makes the file readable by its owner only (it never is by others on the way: the new
    content is written to a file of mode 0600 and renamed)."""
    target = slot.file
    data = read_json(target)
    holder = data
    if slot.client == "claude" and slot.scope == "local":
        projects = data.setdefault("projects", {})
        if not isinstance(projects, dict):
            raise BadInput("expected an object", file=target, field="projects")
        holder = projects.setdefault(str(slot.project), {})
    servers = holder.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise BadInput("expected an object", file=target, field="mcpServers")
    servers[slot.name] = entry
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o600
    if private:
        mode &= 0o700
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.chmod(target, mode)


# --- finding registrations ----------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    client: str
    scope: str
    name: str
    file: str
    entry: dict[str, Any]

    @property
    def command(self) -> list[str]:
        if "command" in self.entry:
            return [str(self.entry["command"]), *map(str, self.entry.get("args") or [])]
        return []

    @property
    def url(self) -> str | None:
        value = self.entry.get("url") or self.entry.get("httpUrl")
        return str(value) if value else None

    @property
    def headers(self) -> dict[str, str]:
        value = self.entry.get("headers")
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _is_agentos(name: str, entry: dict[str, Any], wanted: str) -> bool:
    args = [str(a) for a in entry.get("args") or []]
    return name == wanted or ("agentos" in args and "mcp" in args and "serve" in args)


def registrations(
    project: Path, *, home: Path | None = None, name: str = "agentos"
) -> list[Registration]:
    """Every registration of an AgentOS server the clients would load in ``project``."""
    project = project.resolve()
    found: list[Registration] = []
    for client, scopes in SCOPES.items():
        for scope in scopes:
            path = config_file(client, scope, project, home)
            try:
                data = read_json(path)
            except BadInput:
                continue
            holder = data
            if client == "claude" and scope == "local":
                holder = (data.get("projects") or {}).get(str(project)) or {}
            servers = holder.get("mcpServers") if isinstance(holder, dict) else None
            for key, entry in (servers or {}).items():
                if isinstance(entry, dict) and _is_agentos(key, entry, name):
                    found.append(Registration(client, scope, key, str(path), entry))
    return found


# --- connecting ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    tools: list[str]
    server: str
    seconds: float


async def _probe(
    command: list[str] | None,
    url: str | None,
    env: dict[str, str] | None,
    timeout: float,
    errlog: Any,
    headers: dict[str, str] | None = None,
) -> Probe:
    import anyio
    from mcp import ClientSession

    started = time.perf_counter()
    with anyio.fail_after(timeout):
        if url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(url, http_client=http) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                return await _list(session, started)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert command
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            return await _list(session, started)


async def _list(session: Any, started: float) -> Probe:
    init = await session.initialize()
    tools = await session.list_tools()
    return Probe(
        [t.name for t in tools.tools],
        f"{init.serverInfo.name} {init.serverInfo.version}",
        time.perf_counter() - started,
    )


def probe(
    command: list[str] | None = None,
    *,
    url: str | None = None,
    headers: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Probe:
    """Start (or reach) a server, initialize, list its tools. Raises OperationFailed with
    the server's last line of stderr when it does not answer."""
    import anyio

    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            return anyio.run(_probe, command, url, env, timeout, errlog, headers)
        except Exception as exc:  # the doctor reports every way a connection can fail
            errlog.seek(0)
            lines = [ln for ln in errlog.read().splitlines() if ln.strip()]
            why = (
                _reason(exc)
                if not isinstance(exc, TimeoutError)
                else (f"no answer within {timeout:g}s")
            )
            detail = f"; server said: {lines[-1].strip()}" if lines else ""
            raise OperationFailed(f"{why}{detail}") from None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


# --- the doctor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, fail
    detail: str


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def _connect_check(
    name: str,
    command: list[str] | None,
    url: str | None,
    timeout: float,
    prefix: str = "",
    headers: dict[str, str] | None = None,
) -> Check:
    from agentos.mcp_server.server import TOOL_NAMES

    try:
        found = probe(command, url=url, headers=headers, timeout=timeout)
    except OperationFailed as exc:
        return Check(name, "fail", f"{prefix}does not connect: {exc}")
    missing = [t for t in TOOL_NAMES if t not in found.tools]
    if missing:
        return Check(
            name,
            "fail",
            f"{prefix}connected to {found.server}, but tools are missing: {', '.join(missing)}",
        )
    return Check(
        name,
        "ok",
        f"{prefix}connected to {found.server}: initialize + tools/list "
        f"({len(found.tools)} tools) in {found.seconds:.2f}s",
    )


def doctor(
    ws: Workspace, *, project: Path | None = None, home: Path | None = None, timeout: float = 30.0
) -> DoctorReport:
    """Check that the server starts and answers, and that every registration connects."""
    project = (project or Path.cwd()).resolve()
    report = DoctorReport()
    report.checks.append(
        _connect_check("server", server_command(ws, []), None, timeout, f"workspace {ws.root}: ")
    )
    found = registrations(project, home=home)
    for client in CLIENTS:
        exe = shutil.which(client)
        mine = [r for r in found if r.client == client]
        if not mine:
            report.checks.append(
                Check(
                    f"{client} registration",
                    "warn",
                    f"not registered for {project} (run `agentos mcp install {client}`)"
                    + ("" if exe else f"; the {client} CLI is not on PATH either"),
                )
            )
            continue
        for reg in mine:
            label = f"{client} {reg.scope} {reg.name!r}"
            where = f"{reg.file}: "
            if reg.url is None and not reg.command:
                report.checks.append(Check(label, "fail", f"{where}no command or URL"))
                continue
            report.checks.append(
                _connect_check(label, reg.command or None, reg.url, timeout, where, reg.headers)
            )
    return report
