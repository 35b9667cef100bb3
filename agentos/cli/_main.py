"""The ``agentos`` command group: a thin click layer over the library.

Subcommands are loaded lazily so that ``agentos --help`` and ``agentos route`` never pay
for modules they do not use.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from agentos import __version__
from agentos.errors import AgentOSError

# name -> "module:attribute"; one module per command group.
# A group whose module is not there yet is left out of the listing.
COMMANDS: dict[str, str] = {
    "init": "agentos.cli.workspace:init",
    "hub": "agentos.cli.hub:hub",
    "cards": "agentos.cli.cards:cards",
    "route": "agentos.cli.route:route",
    "receipts": "agentos.cli.receipts:receipts",
    "kb": "agentos.cli.kb:kb",
    "interview": "agentos.cli.interview:interview",
    "run": "agentos.cli.runs:run",
    "runs": "agentos.cli.runs:runs",
    "status": "agentos.cli.runs:status",
    "attach": "agentos.cli.runs:attach",
    "gc": "agentos.cli.runs:gc",
    "gate": "agentos.cli.gate:gate",
    "guardian": "agentos.cli.guardian:guardian",
    "mcp": "agentos.cli.mcp:mcp",
    "doctor": "agentos.cli.doctor:doctor",
    "eval": "agentos.cli.evals:eval_",
    "events": "agentos.cli.events:events",
    "dashboard": "agentos.cli.dashboard:dashboard",
    "tui": "agentos.cli.tui:tui",
    "evolve": "agentos.cli.evolve:evolve",
    "goals": "agentos.cli.goals:goals",
    "synth": "agentos.cli.synth:synth",
    "tool": "agentos.cli.synth:tool",
    "workflows": "agentos.cli.workflows:workflows",
    "tasks": "agentos.cli.tasks:tasks",
    "executions": "agentos.cli.tasks:executions",
    "results": "agentos.cli.tasks:results",
    "sandbox": "agentos.cli.sandbox:sandbox",
    "repo": "agentos.cli.repo:repo",
    "state": "agentos.cli.state:state",
    "cluster": "agentos.cli.cluster:cluster",
}


def _available(target: str) -> bool:
    return importlib.util.find_spec(target.split(":")[0]) is not None


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, target in COMMANDS.items() if _available(target))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None or not _available(target):
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    envvar=None,
    help="Workspace directory (default: AGENTOS_HOME, then the nearest parent with .agentos/).",
)
@click.version_option(__version__, prog_name="agentos")
@click.pass_context
def cli(ctx: click.Context, workspace: str | None) -> None:
    """AgentOS: versioned agents, deterministic routing with receipts, ephemeral task forces
    in tmux and git worktrees, and a gate that checks the work before it is called done."""
    ctx.obj = {"workspace": workspace}


def main(argv: list[str] | None = None) -> int:
    from agentos.cli._common import console, err_console

    for shown in (console, err_console):  # a console for the terminal as it is now
        shown.reset()  # type: ignore[attr-defined]
    try:
        # Without standalone mode, click returns the code given to ctx.exit().
        code = cli.main(args=argv, prog_name="agentos", standalone_mode=False)
    except AgentOSError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:  # bad input, like any other: one line, exit 2
        where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        click.echo(f"error: {where}{exc.format_message()} (see --help)", err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else 0
