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
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from agentos.cluster.node import (
    AttemptResult,
    AttemptSpec,
    NodeInfo,
    OnceResult,
    OnceSpec,
    run_attempt,
    run_once_here,
    torn_down_here,
)

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
    said: object = None
    try:
        while True:
            try:
                # Not one blocking get: Ray's cancel is an exception raised in this thread
                # between two bytecodes, never while it waits on a lock.
                item = messages.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _DONE:
                break
            said = item
            yield item
    except KeyboardInterrupt:  # ray.cancel: the attempt stops and tears down first
        cancel.set()
        thread.join()
        raise
    thread.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    if out[0] is not said:  # (what the work said last, before its teardown, is not sent twice)
        yield out[0]


def follow(
    stream: Any,
    cancel: threading.Event,
    poll: float,
    wait: float,
    torn_down: Callable[[float], None] | None = None,
) -> Iterator[object]:
    """What a streaming task sends, as it comes. Once ``cancel`` is set the task is
    cancelled (an interrupt on its node, which tears down) and followed to its end, at
    most ``wait`` seconds, then ``torn_down(seconds left)`` waits for the teardown on the
    node (Ray says a task cancelled before its node has torn it down); then
    :class:`CancelledHere` is raised."""
    while True:
        if cancel.is_set():
            ray.cancel(stream)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    ray.get(next(stream))
                except (StopIteration, ray.exceptions.RayError):
                    break
            if torn_down is not None:
                torn_down(max(deadline - time.monotonic(), 0.0))
            raise CancelledHere()
        ready, _ = ray.wait([stream], timeout=poll)
        if not ready:
            continue
        try:
            ref = next(stream)
        except StopIteration:
            return
        yield ray.get(ref)


class CancelledHere(Exception):
    """The task was cancelled from the driver and has ended."""


def _attempt(spec: AttemptSpec) -> Iterator[object]:
    node = this_node()
    yield from stream(lambda cancel, say: run_attempt(spec, node, fetch, cancel, say))


ATTEMPT = ray.remote(num_returns="streaming", max_retries=0, retry_exceptions=False)(_attempt)


def _once(spec: OnceSpec) -> Iterator[object]:
    node = this_node()
    yield from stream(lambda cancel, _say: run_once_here(spec, node, fetch, cancel))


# An eval's task: streaming too, so that a cancel reaches it as an interrupt and it ends
# its agent before the task ends.
ONCE = ray.remote(num_returns="streaming", max_retries=0, retry_exceptions=False)(_once)


def wait_torn_down(node_id: str, key: str, wait: float) -> bool:
    """Whether attempt ``key`` on node ``node_id`` was torn down within ``wait`` seconds,
    asked by a task pinned to that node (False when the node is gone)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pinned = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    ref = TORN_DOWN.options(scheduling_strategy=pinned).remote(key, wait)
    try:
        done: bool = ray.get(ref, timeout=wait + 30)
    except ray.exceptions.RayError:
        return False
    return done


TORN_DOWN = ray.remote(max_retries=0, num_cpus=0)(torn_down_here)


def _agents_here() -> list[dict[str, Any]]:
    """The agents running on this node now, from its workspace's record."""
    from agentos.cluster.node import node_workspace
    from agentos.run.store import ACTIVE, UNFINISHED, RunStore

    store = RunStore(node_workspace())
    try:
        return [
            {
                "run": run.id,
                "agent": agent.agent,
                "status": str(agent.status),
                "session": agent.session,
                "started_at": run.started_at,
            }
            for run in store.list(statuses=ACTIVE, limit=1000)
            for agent in run.agents
            if agent.status in UNFINISHED and agent.status != "pending"
        ]
    finally:
        store.close()


AGENTS_HERE = ray.remote(max_retries=0)(_agents_here)
STATUS_TIMEOUT = 30.0


def node_agents(node_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each node's running agents (a task pinned to each; one that does not answer within
    :data:`STATUS_TIMEOUT` is left out)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    refs = {
        node: AGENTS_HERE.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote()
        for node in node_ids
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=STATUS_TIMEOUT)
    out: dict[str, list[dict[str, Any]]] = {}
    for node, ref in refs.items():
        if ref in ready:
            out[node] = ray.get(ref)
    return out


__all__ = ["ATTEMPT", "ONCE", "AttemptResult", "OnceResult", "this_node"]
