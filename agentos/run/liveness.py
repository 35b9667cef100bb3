"""While a run lives on a shared state: its host's heartbeat, and the cancel another host
asks for.

Where many machines share one state (PostgreSQL), a machine acts on process ids only for
its own host's runs (:meth:`agentos.run.store.RunStore.local`). It learns that another
host's run is alive from that host's heartbeat, which each live orchestrator (and each
``runs merge``) renews every :func:`~agentos.state.host.heartbeat_interval` seconds; a
host silent for longer than :func:`~agentos.state.host.silent_after` has its live runs
aborted by whichever machine collects garbage next (:mod:`agentos.run.gc`). To cancel
another host's run, a machine records the request in the run and announces it
(:meth:`~agentos.run.store.RunStore.request_cancel`); the owner, listening here, is woken
at once and cancels the run as if it had been signalled. A request whose announcement was
lost (the connection was down) is found at the next heartbeat.

On an unshared state (SQLite) there is nobody to tell: :func:`keep_alive` does nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentos.errors import AgentOSError, StateUnavailable
from agentos.run.store import RunStore
from agentos.state.database import CANCELS, POLL
from agentos.state.host import heartbeat_interval
from agentos.workspace.layout import Workspace

log = logging.getLogger(__name__)
WAKE = 1.0  # seconds between looks at whether the run ended, while nothing is announced


@contextmanager
def keep_alive(
    ws: Workspace,
    run_id: str | None = None,
    on_cancel: Callable[[], None] | None = None,
    on_lost: Callable[[StateUnavailable], None] | None = None,
) -> Iterator[None]:
    """Heartbeat for this host while the block runs, call ``on_cancel`` (once) when another
    host asks to cancel ``run_id``, and ``on_lost`` (once) when the state stays out of reach
    past its retry window (:func:`agentos.state.database.retry_window`): a run learns it even
    while nothing else of it writes. Nothing on an unshared state."""
    if not ws.state.shared:
        yield
        return
    beat = _Heartbeat(ws, run_id, on_cancel, on_lost)
    beat.start()
    try:
        yield
    finally:
        beat.stop()


class _Heartbeat:
    def __init__(
        self,
        ws: Workspace,
        run_id: str | None,
        on_cancel: Callable[[], None] | None,
        on_lost: Callable[[StateUnavailable], None] | None,
    ) -> None:
        self.ws = ws
        self.run_id = run_id
        self.on_cancel = on_cancel
        self.on_lost = on_lost
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="agentos-heartbeat", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=2 * WAKE + 5)

    def _run(self) -> None:
        store: RunStore | None = None
        listener = None
        due = 0.0
        while not self.done.is_set():
            try:
                if store is None:
                    store = RunStore(self.ws)
                    listener = store.listen(CANCELS) if self._listening else None
                asked = False
                if time.monotonic() >= due:
                    store.heartbeat()
                    due = time.monotonic() + heartbeat_interval()
                    asked = self._listening  # a request whose announcement was missed
                if listener is not None:
                    payloads = listener.wait(min(WAKE, max(due - time.monotonic(), 0.0)))
                    asked = asked or POLL in payloads or self.run_id in payloads
                else:
                    self.done.wait(min(WAKE, max(due - time.monotonic(), 0.0)))
                if asked and self.run_id and store.cancel_requested(self.run_id):
                    self._cancel()
            except StateUnavailable as exc:  # retried for its window, and still away
                log.debug("heartbeat: %s", exc)
                if store is not None and self.on_lost is not None:
                    lost, self.on_lost = self.on_lost, None
                    lost(exc)
                self.done.wait(WAKE)
            except AgentOSError as exc:
                log.debug("heartbeat: %s", exc)
                self.done.wait(WAKE)
        if listener is not None:
            listener.close()
        if store is not None:
            store.close()

    @property
    def _listening(self) -> bool:
        return self.run_id is not None and self.on_cancel is not None

    def _cancel(self) -> None:
        callback, self.on_cancel = self.on_cancel, None
        if callback is not None:
            log.info("run %s: another host asked to cancel it", self.run_id)
            callback()
