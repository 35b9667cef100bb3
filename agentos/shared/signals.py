"""Signal handlers installed for the length of a block (the orchestrator, the guardian)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

Handler = Callable[[int, FrameType | None], None]


@contextmanager
def handling(handler: Handler, *signums: signal.Signals) -> Iterator[None]:
    """Install ``handler`` for ``signums`` while the block runs, then restore the previous
    handlers. Outside the main thread (where Python allows no handler) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signums}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
