"""``agentos dashboard``: the web dashboard (:mod:`agentos.cli._web.app`) on loopback."""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from agentos.cli._common import err_console, workspace
from agentos.shared.address import host_name, listen, serving_address

DEFAULT_HTTP = "127.0.0.1:8766"


@click.command()
@click.option("--http", "address", default=DEFAULT_HTTP, show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: any free one).")  # fmt: skip
@click.option("--allow-remote", is_flag=True,
              help="Listen on an address other machines can reach (anyone who can reach it "
              "sees the workspace; changes still need the printed token).")  # fmt: skip
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="The repository a workflow launched from the page "
              "works on, unless its form names another.")  # fmt: skip
def dashboard(address: str, allow_remote: bool, repo: Path) -> None:
    """Serve the web dashboard: runs with their agents' live output, gate results and
    merge; receipts and the chain's verification; hub packages; the guardian; knowledge
    search; evals and evolutions as charts; workflow launch forms. The JSON API under
    /api/ serves what the --json commands print.

    It listens on loopback unless --allow-remote. The URL it prints carries a token this
    start made: a page opened from it may cancel runs and launch workflows; nothing
    else may (Ctrl-C stops the dashboard)."""
    host, port = serving_address(
        address,
        allow_remote,
        "the dashboard shows the whole workspace; pass --allow-remote to serve it there",
    )
    ws = workspace()
    sock = listen(host, port)
    bound = sock.getsockname()[1]

    import uvicorn

    from agentos.cli._web.app import LOOPBACK, create_app

    token = secrets.token_urlsafe(24)
    hosts = ["*"] if allow_remote else [*LOOPBACK, host]
    app = create_app(ws, token, hosts=hosts, repo=repo.expanduser().resolve())
    shown = host_name(host)
    click.echo(f"dashboard: http://{shown}:{bound}/#token={token}", nl=True)
    click.echo(f"api:       http://{shown}:{bound}/api/runs", nl=True)
    if allow_remote:
        err_console.print(
            "dashboard: --allow-remote: anyone who can reach this address can read it"
        )
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
