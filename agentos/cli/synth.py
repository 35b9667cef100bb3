"""``agentos synth``: build a missing tool test-first; ``agentos tool``: call one."""

from __future__ import annotations

import json

import click

from agentos.cli._common import console, json_option, print_json, table, workspace


@click.command()
@click.argument("request", metavar="REQUEST")
@click.option("--name", help="The tool's name (tool-NAME); default: the spec's function name.")
@click.option("--card", is_flag=True, help="Install a routing card with the tool.")
@click.option("--force", is_flag=True, help="Skip the interview (the receipts say so).")
@json_option
def synth(request: str, name: str | None, card: bool, force: bool, as_json: bool) -> None:
    """Find an installed package that does REQUEST, or build one test-first: a spec, tests
    that fail against a stub, an implementation verified in the sandbox, registered in the
    hub as tool-NAME@0.1.0 only when the tests pass. Exit 1 when a step fails (nothing is
    registered then)."""
    from agentos.synthesis.engine import synthesize

    say = None if as_json else (lambda step, line: console.print(f"{step}: {line}", markup=False))
    result = synthesize(workspace(), request, name=name, card=card, force=force, on_step=say)
    if as_json:
        print_json(result.as_dict())
    elif result.existing:
        console.print(f"existing: {result.package} already does this", markup=False)
    else:
        console.print(f"registered {result.package}", markup=False)


@click.group()
def tool() -> None:
    """Tool packages (built by `agentos synth`): list them, call one."""


@tool.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Installed tool packages, with their signatures."""
    from agentos.synthesis.tools import installed_tools

    found = installed_tools(workspace())
    if as_json:
        print_json(
            [
                {"name": t.name, "version": t.version, "spec": t.spec.model_dump(mode="json")}
                for t in found
            ]
        )
        return
    table(
        "tools",
        ["tool", "signature", "does"],
        [
            (f"{t.name}@{t.version}", t.spec.signature(), t.spec.docstring.splitlines()[0])
            for t in found
        ],
    )


@tool.command()
@click.argument("ref", metavar="NAME[@VERSION]")
@click.option("--args", "args", required=True, metavar="JSON", help='e.g. \'{"s": "hello"}\'')
@json_option
def call(ref: str, args: str, as_json: bool) -> None:
    """Call tool NAME with ARGS (a JSON object, checked against its spec), confined as any
    agent is; prints its result."""
    from agentos.synthesis.tools import call_tool

    result = call_tool(workspace(), ref, args)
    if as_json:
        print_json({"result": result})
    else:
        click.echo(result if isinstance(result, str) else json.dumps(result))
