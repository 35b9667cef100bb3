"""The Ray tasks AgentOS submits to the nodes (this module imports ray).

An agent's attempt is a streaming task: it sends :class:`~agentos.cluster.node.Started`,
:class:`~agentos.cluster.node.Note` and :class:`~agentos.cluster.node.Health` as they
happen, then its :class:`~agentos.cluster.node.AttemptResult`. Ray retries none of them
(``max_retries=0``, so no lineage re-execution either): a lost attempt is AgentOS's to
record and resubmit. Ray's cancel arrives as KeyboardInterrupt in the task's main thread;
the attempt, running in a thread of its own, is then told to stop and tears down as a
local one does before the task ends.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import ray

from agentos.cluster.node import AttemptResult, AttemptSpec, NodeInfo, run_attempt

_DONE = object()


def this_node() -> NodeInfo:
    context = ray.get_runtime_context()
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return NodeInfo(context.get_node_id(), address, socket.gethostname())


def fetch(ref: Any) -> bytes:
    data: bytes = ray.get(ref)
    return data


def stream(work: Callable[[threading.Event, Callable[[object], None]], object]) -> Iterator[object]:
    """Run ``work(cancel, say)`` in a thread; yield what it says, then what it returns."""
    messages: queue.Queue[object] = queue.Queue()
    cancel = threading.Event()
    out: list[object] = []

    def run() -> None:
        try:
            out.append(work(cancel, messages.put))
        except BaseException as exc:  # handed to the task's thread, raised there
            out.append(exc)
        finally:
            messages.put(_DONE)

    thread = threading.Thread(target=run, name="agentos-attempt")
    thread.start()
    try:
        while (item := messages.get()) is not _DONE:
            yield item
    except KeyboardInterrupt:  # ray.cancel: the attempt stops and tears down first
        cancel.set()
        thread.join()
        raise
    thread.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    yield out[0]


def _attempt(spec: AttemptSpec) -> Iterator[object]:
    node = this_node()
    yield from stream(lambda cancel, say: run_attempt(spec, node, fetch, cancel, say))


ATTEMPT = ray.remote(num_returns="streaming", max_retries=0, retry_exceptions=False)(_attempt)

__all__ = ["ATTEMPT", "AttemptResult", "this_node"]
