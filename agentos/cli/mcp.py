"""``agentos mcp``: serve AgentOS to MCP clients, register it with them, check the wiring."""

from __future__ import annotations

from pathlib import Path

import click

from agentos.cli._common import Styled, console, fail, json_option, print_json, table, workspace

_REPO_HELP = (
    "A repository MCP clients may name (run_task repo, kb_add paths, hub_install "
    "sources); repeatable. The first is run_task's default. AGENTOS_MCP_ROOTS adds "
    "more (os.pathsep-separated). The workspace is always allowed."
)


def _repos(given: tuple[Path, ...]) -> list[Path]:
    from agentos.mcp_server.paths import roots_from_env

    return [*given, *roots_from_env()]


@click.group()
def mcp() -> None:
    """The MCP server for Claude Code, Gemini CLI and any MCP client."""


@mcp.command()
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
    "(HOST defaults to 127.0.0.1: `--http 8765`). Clients must send the workspace's "
    "token, printed at start, as 'Authorization: Bearer TOKEN'.",
)
@click.option("--repo", "repos", multiple=True, type=click.Path(path_type=Path), help=_REPO_HELP)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow --http on a non-loopback address (plain HTTP: the token crosses the "
    "network unencrypted).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another name clients reach the server by (their Host header), besides the "
    "address it listens on and 127.0.0.1, localhost and [::1]; repeatable. Requests "
    "naming any other host are refused (DNS-rebinding protection).",
)
def serve(
    http: str | None, repos: tuple[Path, ...], allow_remote: bool, allow_hosts: tuple[str, ...]
) -> None:
    """Serve the workspace over MCP: stdio by default (what clients spawn), or streamable
    HTTP with --http, which needs the workspace's token (made once, kept in
    .agentos/mcp-token). Logs go to stderr; stdout is the protocol."""
    from agentos.mcp_server.server import serve as run_server

    run_server(
        workspace(),
        _repos(repos),
        http=http,
        allow_remote=allow_remote,
        allow_hosts=list(allow_hosts),
    )


@mcp.command()
@click.argument("client", type=click.Choice(["claude", "gemini"]))
@click.option(
    "--scope",
    type=click.Choice(["local", "project", "user"]),
    help="Where the client keeps the registration. Claude Code: local (default: "
    "you, in this project), project (.mcp.json) or user (all projects). "
    "Gemini CLI: project (default: .gemini/settings.json) or user.",
)
@click.option(
    "--name", default="agentos", show_default=True, help="The server's name in the client."
)
@click.option(
    "--project",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The project directory the registration is for (default: the first --repo, else here).",
)
@click.option(
    "--repo",
    "repos",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A repository the registered server lets clients name (`mcp serve "
    "--repo`); repeatable. The first is also the project registered for, unless "
    "--project says otherwise. Default: the project directory when it is a git "
    "repository.",
)
@click.option(
    "--write-config",
    is_flag=True,
    help="Write the client's config file even when its CLI is installed.",
)
@click.option(
    "--url",
    metavar="URL",
    help="Register the HTTP server at URL (the one `agentos mcp serve --http` printed) "
    "instead of the stdio command, with the workspace's token in an Authorization "
    "header. Always written to the config file (made private), never to the project "
    "scope; Gemini CLI's default scope is then user.",
)
@json_option
def install(
    client: str,
    scope: str | None,
    name: str,
    project: Path | None,
    repos: tuple[Path, ...],
    write_config: bool,
    url: str | None,
    as_json: bool,
) -> None:
    """Register `agentos mcp serve` for this workspace with CLIENT (claude or gemini), for
    the project --project, the first --repo, or here: through `claude mcp add` / `gemini
    mcp add` when that CLI is installed, else by writing the client's config file, keeping
    what is there. With --url, the HTTP server at URL and its token."""
    from agentos.mcp_server.clients import install_server

    result = install_server(
        client,
        workspace(),
        scope=scope,
        name=name,
        project=project,
        repos=list(repos),
        use_cli=not write_config,
        url=url,
    )
    if as_json:
        print_json(result.as_dict())
        return
    console.print(
        f"registered MCP server {result.name!r} with {result.client} "
        f"({result.scope} scope) via {result.method}: {result.where}"
    )
    if result.url:
        console.print(f"  url: {result.url} (with the workspace's token)", markup=False)
    else:
        console.print(f"  command: {' '.join(result.command)}", markup=False)


@mcp.command()
@click.option(
    "--project",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The project directory whose registrations are checked (default: here).",
)
@click.option(
    "--timeout", default=30.0, show_default=True, help="Seconds to wait for each server to answer."
)
@json_option
@click.pass_context
def doctor(ctx: click.Context, project: Path | None, timeout: float, as_json: bool) -> None:
    """Check the MCP wiring: the server starts and answers initialize and tools/list with
    every tool, and each Claude Code / Gemini CLI registration of it connects.
    Exit 1 when a check fails."""
    from agentos.mcp_server.clients import doctor as run_doctor

    report = run_doctor(workspace(), project=project or Path.cwd(), timeout=timeout)
    if as_json:
        print_json(report.as_dict())
    else:
        colours = {"ok": "green", "warn": "yellow", "fail": "red"}
        table(
            None,
            ["check", "status", "detail"],
            [(c.name, Styled(c.status, colours[c.status]), c.detail) for c in report.checks],
        )
    if not report.ok:
        fail(ctx, 1)
