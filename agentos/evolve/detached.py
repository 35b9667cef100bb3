"""The process of a background evolution (:func:`agentos.evolve.control.start_detached`).

Usage: python -m agentos.evolve.detached WORKSPACE EVO

Drives evolution EVO of the workspace until it stops, printing each step into the
evolution's ``evolve.log``; SIGTERM (``agentos evolve cancel``) stops it cleanly. An error
is one line, ``error: ...``; the exit code is 0 when it stopped, else the error's.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from agentos.errors import AgentOSError
from agentos.workspace.layout import Workspace


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m agentos.evolve.detached WORKSPACE EVO", file=sys.stderr)
        return 2
    from agentos.evolve.archive import find_evolution
    from agentos.evolve.loop import Evolver, install_signal_handlers

    cancel = threading.Event()
    install_signal_handlers(cancel)
    try:
        evo = find_evolution(Workspace(Path(argv[0])), argv[1])
        reason = Evolver(evo, cancel=cancel, say=lambda line: print(line, flush=True)).run()
    except AgentOSError as exc:
        print(f"error: {exc}", flush=True)
        return exc.exit_code
    print(f"stopped: {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
