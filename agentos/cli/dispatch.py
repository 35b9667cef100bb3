"""What ``agentos ARGS`` is answered by: the version and the stored help here, the commands
typed most by :mod:`agentos.cli.fast`, the rest by click (:mod:`agentos.cli._main`).

``agentos --version`` is answered before click is imported: a shell prompt or a hook that
asks for it pays for Python's start and nothing else. So is ``--help`` of every command
(``agentos --help``, ``agentos run --help``): click's own help texts, rendered when the
docs are made (``python -m agentos.cli._docs`` writes :data:`HELP_FILE`; a test compares
each with click's rendering), are printed without importing click or any command.
"""

from __future__ import annotations

import sys
from pathlib import Path

HELP_FILE = Path(__file__).with_name("help.json")
_HELP_FLAGS = ("--help", "-h")
_HELP_COLUMNS = 80  # click wraps help at min(columns, 80) - 2: the same text from 80 columns on


def stored_help(args: list[str]) -> str | None:
    """The help ``agentos ARGS`` prints when ARGS is command names then ``--help`` and the
    terminal is at least 80 columns wide; None otherwise (click then renders it)."""
    if not args or args[-1] not in _HELP_FLAGS or any(a.startswith("-") for a in args[:-1]):
        return None
    import shutil

    if shutil.get_terminal_size().columns < _HELP_COLUMNS:
        return None
    import json

    try:
        texts = json.loads(HELP_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text = texts.get(" ".join(["agentos", *args[:-1]]))
    return text if isinstance(text, str) else None


def _only_the_version(args: list[str]) -> bool:
    """``--version``, with or without ``--workspace DIR`` (``-w DIR``, ``--workspace=DIR``)
    around it: click answers that with the version alone, whatever the workspace."""
    rest, i = [], 0
    while i < len(args):
        if args[i] in ("--workspace", "-w") and i + 1 < len(args):
            i += 2
            continue
        if not args[i].startswith("--workspace="):
            rest.append(args[i])
        i += 1
    return rest == ["--version"]


def entry(args: list[str]) -> int:
    """``agentos ARGS``: the version and stored help answered here, the commands typed most
    by :mod:`agentos.cli.fast`, the rest by click."""
    if _only_the_version(args):
        from agentos import __version__

        sys.stdout.write(f"agentos, version {__version__}\n")
        return 0
    text = stored_help(args)
    if text is not None:
        try:
            sys.stdout.write(text)  # encoded whole before anything is written
            return 0
        except UnicodeEncodeError:  # a terminal that cannot show it: click substitutes
            pass
    from agentos.cli import fast

    code = fast.serve(args)
    if code is not None:
        return code
    from agentos.cli._main import main

    return main(args)
