"""``agentos evolve``: improve an agent package, generation by generation, against an
eval suite; ``agentos evolve promote`` makes a generation a new hub version."""

from __future__ import annotations

import json
import signal
import threading
from typing import TYPE_CHECKING

import click

from agentos.cli._common import (
    backend_option,
    console,
    fail,
    json_option,
    print_json,
    table,
    workspace,
)

if TYPE_CHECKING:
    from agentos.evolve.archive import Generation

SELECT = click.Choice(["random", "latest", "best", "score_prop", "score_child_prop"])


@click.group()
def evolve() -> None:
    """Evolve an agent package: a meta agent changes it, an eval suite scores it."""


@evolve.command()
@click.argument("package", metavar="PACKAGE")
@click.option("--suite", required=True, help="The eval suite: a folder, or a name under evals/.")
@click.option(
    "--meta",
    default="evolve-meta",
    show_default=True,
    metavar="NAME[@VERSION]",
    help="The meta agent: the hub package that changes each generation.",
)
@click.option("--generations", type=int, default=5, show_default=True, help="Generations to make.")
@click.option("--children", type=int, default=1, show_default=True, help="Children per parent.")
@click.option("--select", default="score_child_prop", show_default=True, type=SELECT)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds every selection.")
@click.option("--staged", is_flag=True, help="Score on the suite's staged sample first.")
@click.option("--split", default="tasks", show_default=True, help="The training split.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Children made at once.")
@click.option("--detach", is_flag=True, help="Run in the background; print the id.")
@backend_option
@json_option
@click.pass_context
def start(
    ctx: click.Context,
    package: str,
    suite: str,
    meta: str,
    generations: int,
    children: int,
    select: str,
    seed: int,
    staged: bool,
    split: str,
    jobs: int,
    detach: bool,
    backend: str | None,
    as_json: bool,
) -> None:
    """Evolve PACKAGE against SUITE: each generation, a parent is chosen from the archive
    (--select, seeded), the meta agent changes it in a worktree of its own, and the suite
    scores it. Stops after --generations, or once a generation scores perfectly."""
    from agentos.cluster import backend_of
    from agentos.evolve.start import create

    ws = workspace()
    evo = create(
        ws,
        package,
        suite,
        meta=meta,
        generations=generations,
        children=children,
        select=select,
        seed=seed,
        staged=staged,
        jobs=jobs,
        split=split,
        backend=backend_of(ws, backend),
    )
    if detach:
        from agentos.evolve.control import start_detached

        log = start_detached(evo)
        if as_json:
            print_json({"id": evo.id, "log": str(log)})
        else:
            click.echo(evo.id)
        return
    if not as_json:
        click.echo(evo.id)
    _drive(ctx, evo, as_json)


@evolve.command()
@click.argument("evo_id", metavar="EVO")
@click.option("--detach", is_flag=True, help="Run in the background.")
@json_option
@click.pass_context
def resume(ctx: click.Context, evo_id: str, detach: bool, as_json: bool) -> None:
    """Carry on evolution EVO where it stopped (a killed process included): unfinished
    generations are made again under the same numbers."""
    from agentos.evolve.archive import find_evolution

    evo = find_evolution(workspace(), evo_id)
    if detach:
        from agentos.evolve.control import start_detached

        start_detached(evo)
        click.echo(evo.id)
        return
    _drive(ctx, evo, as_json)


def _drive(ctx: click.Context, evo: object, as_json: bool) -> None:
    from agentos.evolve.archive import Evolution
    from agentos.evolve.control import summary
    from agentos.evolve.loop import Evolver
    from agentos.shared.signals import handling

    assert isinstance(evo, Evolution)
    cancel = threading.Event()
    say = None if as_json else (lambda line: console.print(line, markup=False))
    # SIGTERM and SIGINT stop the evolution cleanly, for as long as it runs here.
    with handling(lambda _s, _f: cancel.set(), signal.SIGTERM, signal.SIGINT):
        reason = Evolver(evo, cancel=cancel, say=say).run()
    if as_json:
        print_json(summary(evo))
    else:
        console.print(f"stopped: {reason}", markup=False)
    if cancel.is_set():
        fail(ctx, 1)


@evolve.command()
@click.argument("evo_id", metavar="[EVO]", required=False)
@json_option
def status(evo_id: str | None, as_json: bool) -> None:
    """Evolution EVO (the newest by default): whether it runs or why it stopped, the best
    generation, and each generation's score as a chart."""
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.control import chart_lines, describe, summary

    evo = find_evolution(workspace(), evo_id)
    data = summary(evo)
    if as_json:
        print_json(data)
        return
    made = data["generations"]
    best = data["best"]
    click.echo(f"evolution {evo.id}: {data['package']} on {data['suite']} (meta {data['meta']})")
    click.echo(f"{describe(evo)}")
    click.echo(
        f"{made['made']} of {made['asked']} generation(s); select {data['select']}, "
        f"seed {data['seed']}"
        + (f"; best: generation {best['generation']} ({best['score']:.3f})" if best else "")
    )
    for line in chart_lines(evo.generations()):
        click.echo(line)


@evolve.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Every evolution of the workspace, newest first."""
    from agentos.cli import views

    found = views.evolutions(workspace())
    if as_json:
        print_json(found)
        return
    rows = []
    for data in found:
        best = data["best"]
        rows.append(
            (
                data["id"],
                data["package"],
                data["suite"],
                f"{data['generations']['made']}/{data['generations']['asked']}",
                "" if best is None else f"{best['score']:.3f} (gen {best['generation']})",
                data["status"],
            )
        )
    table("evolutions", ["id", "package", "suite", "generations", "best", "status"], rows)


@evolve.command()
@click.argument("evo_id", metavar="[EVO]", required=False)
def tree(evo_id: str | None) -> None:
    """The family tree of evolution EVO: each generation under its parent, with its
    verdict and score."""
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.control import tree_lines

    for line in tree_lines(find_evolution(workspace(), evo_id).generations()):
        click.echo(line)


@evolve.command()
@click.argument("evo_id", metavar="EVO")
@click.argument("gen", metavar="GEN", type=int)
@json_option
def show(evo_id: str, gen: int, as_json: bool) -> None:
    """Generation GEN of evolution EVO: its parent, how it was chosen, its verdict and
    why, its scores per split and dimension."""
    meta = _generation(evo_id, gen)
    data = meta.model_dump(mode="json")
    if as_json:
        print_json(data)
        return
    click.echo(f"generation {gen}: {meta.verdict} - {meta.reason}")
    click.echo(f"parent: {meta.parent}; commit {meta.commit[:12]}; {meta.lines_changed} line(s)")
    if meta.selection:
        click.echo(f"selection: {json.dumps(meta.selection)}")
    for split, score in meta.scores.items():
        dims = ", ".join(f"{k} {v:.3f}" for k, v in score["dimensions"].items())
        click.echo(f"{split}: composite {score['composite']:.3f} ({dims}); eval {score['eval']}")


@evolve.command()
@click.argument("evo_id", metavar="EVO")
@click.argument("gen", metavar="GEN", type=int)
def diff(evo_id: str, gen: int) -> None:
    """The change generation GEN made to its parent, as a patch."""
    from agentos.evolve.archive import find_evolution

    _generation(evo_id, gen)
    patch = find_evolution(workspace(), evo_id).gen_dir(gen) / "patch.diff"
    click.echo(patch.read_text(encoding="utf-8", errors="replace") if patch.is_file() else "")


def _generation(evo_id: str, gen: int) -> Generation:
    from agentos.errors import NotFound
    from agentos.evolve.archive import find_evolution

    found = find_evolution(workspace(), evo_id).generations().get(gen)
    if found is None:
        raise NotFound(f"evolution {evo_id} has no generation {gen}", field="GEN")
    return found


@evolve.command()
@click.argument("evo_id", metavar="EVO")
def cancel(evo_id: str) -> None:
    """Stop evolution EVO's background process (the generation under way is dropped;
    `resume` makes it again)."""
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.control import cancel as cancel_evolution

    click.echo(cancel_evolution(find_evolution(workspace(), evo_id)))


@evolve.command()
@click.argument("evo_id", metavar="EVO")
@click.argument("gen", metavar="GEN", type=int)
@click.option("--version", "version", required=True, metavar="X.Y.Z", help="The new version.")
@json_option
def promote(evo_id: str, gen: int, version: str, as_json: bool) -> None:
    """Install generation GEN as VERSION of the package in the hub (it becomes active;
    `agentos hub use NAME@OLD` rolls back). An invalid generation exits 1."""
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.control import promote as promote_generation

    result = promote_generation(find_evolution(workspace(), evo_id), gen, version)
    if as_json:
        print_json({"package": result.name, "version": result.version, "sha256": result.sha256})
    else:
        click.echo(f"installed {result.name}@{result.version} (active); sha256 {result.sha256}")
