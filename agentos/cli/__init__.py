"""The ``agentos`` command: a thin click layer over the library (:mod:`agentos.cli._main`).

``agentos --version`` is answered before click is imported: a shell prompt or a hook that
asks for it pays for Python's start and nothing else.
"""

from __future__ import annotations

import sys
from typing import Any


def run() -> None:
    if sys.argv[1:] == ["--version"]:
        from agentos import __version__

        sys.stdout.write(f"agentos, version {__version__}\n")
        sys.exit(0)
    from agentos.cli._main import main

    sys.exit(main())


def __getattr__(name: str) -> Any:  # cli, main, COMMANDS: loaded when asked for
    if name not in ("cli", "main", "COMMANDS"):  # e.g. __path__: never import click for it
        raise AttributeError(f"module 'agentos.cli' has no attribute {name!r}")
    from agentos.cli import _main

    return getattr(_main, name)
