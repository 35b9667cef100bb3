"""The ``agentos`` command: a thin click layer over the library (:mod:`agentos.cli._main`),
answered without click where it can be (:mod:`agentos.cli.dispatch`).

A process of its own first offers ``route`` to the workspace's command server
(:mod:`agentos.cli.server`), whose fork answers it with the same :func:`entry`.
"""

from __future__ import annotations

import sys

__all__ = ["HELP_FILE", "entry", "run", "stored_help"]

TYPE_CHECKING = False  # (typing is not imported before the hop: ~5 ms of every route)


def run() -> None:
    try:
        from agentos.cli import server

        code = server.hop(sys.argv[1:])
        if code is None:  # (the command runs here: the whole dispatcher is imported)
            from agentos.cli.dispatch import entry

            code = entry(sys.argv[1:])
        sys.stdout.flush()  # what is still buffered, while a reader gone can be told (below)
    except BrokenPipeError:
        # The reader went away (`agentos runs list | head -1`): the command ends as click
        # ends its own then, with status 1 and nothing on stderr; stdout is pointed at
        # /dev/null so that Python's last flush at exit does not complain either.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)


if TYPE_CHECKING:
    from agentos.cli._main import COMMANDS as COMMANDS
    from agentos.cli._main import cli as cli
    from agentos.cli._main import main as main
    from agentos.cli.dispatch import HELP_FILE as HELP_FILE
    from agentos.cli.dispatch import entry as entry
    from agentos.cli.dispatch import stored_help as stored_help
else:
    _LAZY = {
        "cli": "agentos.cli._main",  # (click is imported for these three only)
        "main": "agentos.cli._main",
        "COMMANDS": "agentos.cli._main",
        "HELP_FILE": "agentos.cli.dispatch",
        "entry": "agentos.cli.dispatch",
        "stored_help": "agentos.cli.dispatch",
    }

    def __getattr__(name: str) -> object:  # loaded when asked for
        if name not in _LAZY:  # e.g. __path__: never import click for it
            raise AttributeError(f"module 'agentos.cli' has no attribute {name!r}")
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
