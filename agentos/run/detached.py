"""The process of a background run (:func:`agentos.run.control.start_detached`).

Usage: python -m agentos.run.detached START_FILE

Reads how the run was asked for from START_FILE (the run's ``start.json``), runs it with
:func:`agentos.run.orchestrator.start_run`, and prints each event as it happens and the
report as one JSON document at the end, into the run's ``orchestrator.log``. An error
is one line, ``error: ...``; the exit code is the run's (0 done, 1 failed, 2 bad input).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError, BadInput
from agentos.run.events import RunEvent
from agentos.run.values import RunOptions
from agentos.workspace.layout import Workspace


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m agentos.run.detached START_FILE", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(argv[1]).read_bytes())
        ws = Workspace(Path(spec["workspace"]))
        ws.settings  # noqa: B018 -- a broken agentos.yaml stops the run here, named
        ws.ensure()
        from agentos.run.orchestrator import start_run

        dispatch = _named(spec.get("dispatch"), "dispatch")
        report = start_run(
            ws,
            spec["request"],
            Path(spec["repo"]),
            RunOptions(**spec["options"]),
            on_event=_print_event,
            supervise=_named(spec.get("supervisor"), "supervisor"),
            dispatch=dispatch(ws) if dispatch is not None else None,
        )
    except AgentOSError as exc:
        print(f"error: {exc}", flush=True)
        return exc.exit_code
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {argv[1]}: not a run's start file ({exc})", flush=True)
        return 2
    print(json.dumps(report.as_dict(), default=str), flush=True)
    return report.exit_code


def _print_event(event: RunEvent) -> None:
    print(f"• {event.message}", flush=True)


def _named(name: Any, field: str) -> Callable[[Workspace], Any] | None:
    """The function ``module:function`` names (the supervisor, the dispatch's maker)."""
    if not name:
        return None
    module, _, attr = str(name).partition(":")
    try:
        func = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"cannot load {name!r}: {exc}", field=field) from None
    return func  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
