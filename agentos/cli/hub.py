"""``agentos hub``: install, list, show, use, remove, pack and verify agent packages."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentos.cli._common import console, fail, json_option, print_json, table, workspace

if TYPE_CHECKING:
    from agentos.hub.store import Hub


def _hub() -> Hub:
    from agentos.hub.store import Hub  # the lock's schema: not for `hub list`

    return Hub(workspace().hub_dir)


@click.group()
def hub() -> None:
    """Versioned agent packages: install, pin, roll back, verify by hash."""


@hub.command()
@click.argument("source")
@json_option
def install(source: str, as_json: bool) -> None:
    """Install a package from SOURCE: a directory, a .tar.gz made by `hub pack`, or a git
    URL with an optional @ref (e.g. file:///srv/agents/fixer.git@v1.2.0).
    The installed version becomes the active one, and the routing cards it ships (its
    cards/ folder) go into the workspace's cards as PACKAGE--FILE."""
    from agentos.routing.package_cards import install_package

    result, cards = install_package(workspace(), source)
    if as_json:
        print_json(
            {
                "name": result.name,
                "version": result.version,
                "sha256": result.sha256,
                "source": result.source,
                "changed": result.changed,
                **cards.as_dict(),
            }
        )
        return
    if result.changed:
        console.print(
            f"installed {result.name}@{result.version} (sha256 {result.sha256[:12]}) "
            f"from {result.source}; now active"
        )
    else:
        console.print(
            f"{result.name}@{result.version} is already installed with the same "
            "content; nothing changed"
        )
    _print_cards(cards)


def _print_cards(cards: Any) -> None:
    for name in cards.written:
        console.print(f"card {name} written", markup=False)
    for name in cards.removed:
        console.print(f"card {name} removed", markup=False)


@hub.command("list")
@json_option
def list_(as_json: bool) -> None:
    """List installed packages, every version, and which is active."""
    from agentos.cli import fast

    fast.hub_list(workspace(), as_json)


@hub.command()
@click.argument("ref", metavar="NAME[@VERSION]")
@json_option
def show(ref: str, as_json: bool) -> None:
    """Show a package's manifest and install record (the active version by default)."""
    info, manifest = _hub().get(ref)
    data = {**info.as_dict(), "manifest": manifest.model_dump(mode="json", exclude_none=True)}
    if as_json:
        print_json(data)
        return
    console.print(f"[bold]{info.name}@{info.version}[/]{' (active)' if info.active else ''}")
    console.print(f"  {manifest.description}", markup=False)
    rows = [
        ("runtime", manifest.runtime),
        ("entry", manifest.entry),
        ("capabilities", ", ".join(manifest.capabilities)),
        ("model", manifest.model),
        ("env", ", ".join(manifest.env)),
        ("timeout", f"{manifest.timeout}s"),
        ("checks", ", ".join(c.name for c in manifest.checks)),
        ("mcp", ", ".join(manifest.mcp)),
        ("sandbox", _sandbox_line(manifest)),
        ("sha256", info.sha256),
        ("source", info.source),
        ("installed", info.installed),
        ("path", info.path),
    ]
    for key, value in rows:
        if value:
            console.print(f"  {key + ':':14}{value}", markup=False)


def _sandbox_line(manifest: Any) -> str:
    """How the package runs confined: its own settings over the workspace's defaults."""
    from agentos.sandbox import PackageSandbox, resolve_limits

    settings = workspace().settings.sandbox
    pkg = manifest.sandbox or PackageSandbox()
    limits = resolve_limits(settings, pkg)
    network = pkg.network if pkg.network is not None else settings.network
    shown = "to " + ", ".join(network) if isinstance(network, list) else "on" if network else "off"
    parts = [f"network {shown}", f"home {pkg.home}"]
    if pkg.read:
        parts.append("reads " + ", ".join(pkg.read))
    if limits.memory:
        parts.append(f"memory {limits.memory >> 20}M")
    if limits.cpu:
        parts.append(f"cpu {limits.cpu:g}s")
    if limits.processes:
        parts.append(f"processes {limits.processes}")
    return ", ".join(parts)


@hub.command()
@click.argument("query", metavar="QUERY")
@click.option("-k", "k", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Only packages scoring at least this.",
)
@json_option
def search(query: str, k: int, threshold: float, as_json: bool) -> None:
    """Installed packages that can do QUERY, best first: its words looked up in each
    package's name, capabilities, card triggers and description; a score of 0..1."""
    from agentos.routing.capabilities import search as search_packages

    found = search_packages(workspace(), query, k=k, threshold=threshold)
    if as_json:
        print_json([m.as_dict() for m in found])
        return
    table(
        f"packages for {query!r}",
        ["package", "score", "matched", "description"],
        [
            (f"{m.name}@{m.version}", f"{m.score:.2f}", ", ".join(m.matched), m.description)
            for m in found
        ],
    )


@hub.command()
@click.argument("ref", metavar="NAME@VERSION")
@json_option
def use(ref: str, as_json: bool) -> None:
    """Make NAME@VERSION the active version (this is how you roll back); the workspace gets
    that version's cards."""
    from agentos.routing.package_cards import sync_cards

    info = _hub().use(ref)
    cards = sync_cards(workspace(), info.name)
    if as_json:
        print_json({**info.as_dict(), **cards.as_dict()})
    else:
        console.print(f"{info.name}@{info.version} is now active", markup=False)
        _print_cards(cards)


@hub.command()
@click.argument("ref", metavar="NAME@VERSION")
@json_option
def remove(ref: str, as_json: bool) -> None:
    """Remove an installed version. When it was active, the highest remaining one is (and
    its cards replace the removed version's)."""
    from agentos.hub.versions import parse_ref
    from agentos.routing.package_cards import sync_cards

    active = _hub().remove(ref)
    cards = sync_cards(workspace(), parse_ref(ref)[0])
    if as_json:
        print_json({"removed": ref, "active": active, **cards.as_dict()})
    else:
        console.print(f"removed {ref}" + (f"; active: {active}" if active else ""), markup=False)
        _print_cards(cards)


@hub.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Archive to write (default: NAME-VERSION.tar.gz here).",
)
@json_option
def pack(directory: Path, output: Path | None, as_json: bool) -> None:
    """Pack the package in DIRECTORY into a reproducible .tar.gz for `hub install`."""
    out, manifest = _hub().pack(directory, output)
    if as_json:
        print_json({"archive": str(out), "name": manifest.name, "version": manifest.version})
    else:
        console.print(f"packed {manifest.ref} into {out}", markup=False)


@hub.command()
@json_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Recompute every installed package's hashes and report any drift (exit 1)."""
    problems = _hub().verify()
    if as_json:
        print_json({"ok": not problems, "problems": problems})
    elif problems:
        for line in problems:
            console.print(f"[red]drift[/] {line}")
    else:
        console.print("hub verified: every installed package matches hub.lock")
    if problems:
        fail(ctx)
