"""The process that runs an execution's tasks in the background (``agentos workflows
launch --detach``).

Usage: python -m agentos.workflows.detached WORKSPACE EXECUTION [local|ray|settings [WATCH]]
(the backend of its tasks' agents, ``settings`` for ``cluster.backend``; ``WATCH``, a
``module:function``, watches each remote agent on its node)

Writes its pid to ``.agentos/executions/<id>.pid``; SIGTERM (``agentos executions cancel``)
stops the running tasks (their work stays on their branches) and cancels the rest.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import AgentOSError
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.workspace.settings import Backend


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3, 4) or argv[2:3] not in ([], ["local"], ["ray"], ["settings"]):
        print(
            "usage: python -m agentos.workflows.detached WORKSPACE EXECUTION "
            "[local|ray|settings [WATCH]]",
            file=sys.stderr,
        )
        return 2
    from agentos.run.store import process_start
    from agentos.shared.fs import atomic_write
    from agentos.workflows.executions import pid_file
    from agentos.workflows.scheduler import Scheduler

    ws = Workspace(Path(argv[0]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    signal.signal(signal.SIGINT, lambda _s, _f: stop.set())
    marker = pid_file(ws, argv[1])
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(marker, f"{os.getpid()} {process_start(os.getpid()) or ''}\n")
    try:
        chosen = argv[2] if len(argv) > 2 else "settings"
        backend: Backend | None = (
            "ray" if chosen == "ray" else "local" if chosen == "local" else None
        )
        status = Scheduler(
            ws,
            argv[1],
            stop=stop,
            on_event=lambda m: print(m, flush=True),
            backend=backend,
            watch=argv[3] if len(argv) > 3 else None,
        ).run()
    except AgentOSError as exc:
        print(f"error: {exc}", flush=True)
        return exc.exit_code
    finally:
        marker.unlink(missing_ok=True)
    print(f"execution {argv[1]}: {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
