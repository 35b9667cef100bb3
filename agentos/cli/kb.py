"""``agentos kb``: the knowledge store (add, search, context, stats, remove)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from agentos.cli._common import console, err_console, json_option, print_json, workspace
from agentos.knowledge.store import SNIPPET_MARKS, AddStats, KnowledgeStore, open_store

# Ingests with at least this many files to read get a progress bar.
PROGRESS_AFTER = 200

_paths = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
_under = click.option(
    "--under",
    type=click.Path(file_okay=False, path_type=Path),
    help="Only files below this directory.",
)


def _store() -> KnowledgeStore:
    return open_store(workspace())


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback drawing a rich bar on stderr once there is enough to read."""
    if not enabled or not err_console.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn("indexing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    task: list[TaskID] = []

    def update(done: int, total: int) -> None:
        if total < PROGRESS_AFTER:
            return
        if not task:
            bar.start()
            task.append(bar.add_task("indexing", total=total))
        bar.update(task[0], completed=done)

    try:
        yield update
    finally:
        bar.stop()


@click.group()
def kb() -> None:
    """The knowledge store: code and docs chunked into SQLite FTS5, searched by agents."""


@kb.command()
@_paths
@json_option
def add(paths: tuple[Path, ...], as_json: bool) -> None:
    """Index files and directories into the store, incrementally.

    Unchanged files are not read, changed files are re-indexed, files deleted under an
    added directory are removed. Skips .git, .agentos, node_modules, virtualenvs, binary
    files, files over 1 MiB and names that are not UTF-8."""
    with _store() as store, _progress(not as_json) as progress:
        stats = store.add(list(paths), progress=progress)
    if as_json:
        print_json(stats.as_dict())
        return
    console.print(_summary(stats))
    for error in stats.errors:
        err_console.print(f"[yellow]not read[/] {escape(error)}")


def _summary(stats: AddStats) -> str:
    unchanged = stats.seen - stats.added - stats.updated - stats.skipped
    return (
        f"{stats.seen} files: {stats.added} added, {stats.updated} updated, "
        f"{stats.removed} removed, {max(unchanged, 0)} unchanged, {stats.skipped} binary; "
        f"{stats.chunks} chunks written in {stats.seconds:.2f}s"
    )


# A query or request is free text: words starting with "-" that are not options of the
# command are taken as text, and several arguments are joined with spaces.
_free_text = {"ignore_unknown_options": True}


@kb.command(context_settings=_free_text)
@click.argument("query", nargs=-1)
@click.option(
    "-k",
    "k",
    type=click.IntRange(min=1, max=1000),
    default=10,
    show_default=True,
    help="How many results.",
)
@_under
@json_option
def search(query: tuple[str, ...], k: int, under: Path | None, as_json: bool) -> None:
    """Search the store: ranked chunks with path, lines, score and a marked snippet.

    Any text is a valid QUERY: quotes, *, AND, NEAR( and the like are taken as plain
    words (put -- before a query that looks like an option of this command). In the
    snippet the matched terms are marked «like this»."""
    from agentos.cli import views

    data = views.knowledge(workspace(), _text(query), k, under)
    if as_json:
        print_json(data)
        return
    if not data["hits"]:
        console.print("no results")
        return
    for i, hit in enumerate(data["hits"], start=1):
        console.print(
            f"[bold]{i:>2}. {escape(_shown(Path(hit['path'])))}:{hit['start_line']}-"
            f"{hit['end_line']}[/]  [dim]{hit['score']:.2f} {hit['language']}[/]"
        )
        console.print(f"    {_highlight(hit['snippet'])}")


def _text(words: tuple[str, ...]) -> str:
    """The words as one text; bytes the terminal could not decode become U+FFFD."""
    return " ".join(words).encode("utf-8", "replace").decode("utf-8")


def _highlight(snippet: str) -> str:
    """A hit's snippet with its marks drawn in colour on a terminal, kept as «» elsewhere."""
    text = escape(snippet)
    if not console.is_terminal:
        return text
    start, end = SNIPPET_MARKS
    return text.replace(start, "[bold yellow]").replace(end, "[/bold yellow]")


@kb.command(context_settings=_free_text)
@click.argument("request", nargs=-1)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    required=True,
    metavar="TOKENS",
    help="Most tokens of context to give (estimated as characters / 4).",
)
@_under
@json_option
def context(request: tuple[str, ...], budget: int, under: Path | None, as_json: bool) -> None:
    """Assemble the context an agent gets for REQUEST, within a token budget.

    The best chunks that fit, best first, no chunk twice, each headed by its path and
    line range, as markdown (paths relative to --under when it is given)."""
    with _store() as store:
        ctx = store.context(_text(request), budget, under=under)
    if as_json:
        print_json(ctx.as_dict())
    elif ctx.chunks:
        click.echo(ctx.text, nl=False)
    else:
        err_console.print("no context found for this request")


@kb.command()
@json_option
def stats(as_json: bool) -> None:
    """Show what the store holds: files, chunks, languages, database size."""
    with _store() as store:
        info = store.stats()
    if as_json:
        print_json(info)
        return
    rows = [
        ("database", info["database"]),
        ("files", info["files"]),
        ("binary files", info["binary_files"]),
        ("chunks", info["chunks"]),
        ("text", f"{info['bytes'] / 1e6:.1f} MB"),
        ("database size", f"{info['database_bytes'] / 1e6:.1f} MB"),
        ("languages", ", ".join(f"{k} {v}" for k, v in info["languages"].items()) or "-"),
    ]
    for key, value in rows:
        console.print(f"{key + ':':15}{escape(str(value))}")


@kb.command()
@_paths
@json_option
def remove(paths: tuple[Path, ...], as_json: bool) -> None:
    """Remove files and directories from the store (not from disk).

    Everything under a directory goes; the paths need not exist any more."""
    with _store() as store:
        removed = store.remove(list(paths))
    if as_json:
        print_json({"removed": removed})
    else:
        console.print(f"removed {removed} file{'' if removed == 1 else 's'} from the store")
