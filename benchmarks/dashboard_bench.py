"""Event stream and dashboard benchmark: prints figures, asserts nothing.

    .venv/bin/python benchmarks/dashboard_bench.py [--runs 6] [--events 60]

1. In a fresh workspace, the same one-agent run (a shell agent writing a file) N times with
   its events written to state.db's stream, and N times with that write turned off,
   measured in the same run: the cost of the stream per run (target <= 1.05x).
2. SSE latency: a real `agentos dashboard` process and a headless chromium (Debian's,
   through Playwright) whose page holds an EventSource on /api/stream; an event is written
   to state.db and the page notes when it arrives (the same clock). p50 and p95 over
   --events events (target p50 <= 300 ms), against the raw primitive measured in the same
   run: a bare Starlette endpoint pushing the same event to the same browser the moment it
   is handed over (no database, no polling).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _writer import writer_workspace

from agentos.run import orchestrator
from agentos.run.values import RunOptions

LISTEN = """
window.arrivals = [];
const source = new EventSource(URL_);
source.addEventListener("event", (m) => {
  const event = JSON.parse(m.data);
  window.arrivals.push([event.message, performance.timeOrigin + performance.now()]);
});
source.addEventListener("open", () => { window.opened = true; });
"""


def latencies(page: Any, url: str, write: Callable[[str], float], count: int) -> list[float]:
    """Milliseconds from each write to its arrival in the page."""
    page.evaluate(LISTEN.replace("URL_", json.dumps(url)))
    page.wait_for_function("window.opened === true", timeout=30_000)
    written: dict[str, float] = {}
    for n in range(count):
        message = f"bench event {n}"
        written[message] = write(message)
        page.wait_for_function(
            f"window.arrivals.some(a => a[0] === {json.dumps(message)})", timeout=30_000
        )
        time.sleep(0.05)  # spread the writes over the poll's phase
    arrivals = dict(page.evaluate("window.arrivals"))
    return [(arrivals[m] / 1000 - at) * 1000 for m, at in written.items()]


def raw_server() -> tuple[str, Callable[[str], float], Callable[[], None]]:
    """A bare Starlette SSE endpoint on loopback: an event handed to it goes out at once."""
    import uvicorn
    from sse_starlette import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.routing import Route

    state: dict[str, Any] = {}

    async def stream(request: Any) -> Any:
        queue: asyncio.Queue[str] = asyncio.Queue()
        state["queue"], state["loop"] = queue, asyncio.get_running_loop()

        async def events() -> Any:
            while True:
                message = await queue.get()
                yield {"event": "event", "data": json.dumps({"message": message})}

        return EventSourceResponse(events())

    async def page(request: Any) -> Any:
        from starlette.responses import HTMLResponse

        return HTMLResponse("<!doctype html><title>raw</title>")

    app = Starlette(routes=[Route("/", page), Route("/stream", stream)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
    thread.start()

    def write(message: str) -> float:
        at = time.time()
        state["loop"].call_soon_threadsafe(state["queue"].put_nowait, message)
        return at

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{sock.getsockname()[1]}", write, stop


def sse_latency(count: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SSE latency: skipped (no chromium: scripts/install-test-browser)")
        return
    from playwright.sync_api import sync_playwright

    from agentos.run.store import RunStore
    from agentos.workspace.layout import init_workspace

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        ws, _ = init_workspace(Path(tmp) / "ws")
        board = subprocess.Popen(
            [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "dashboard",
             "--http", "127.0.0.1:0"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        store = RunStore(ws)
        raw_url, raw_write, raw_stop = raw_server()
        try:
            assert board.stdout is not None
            base = re.search(r"http://127\.0\.0\.1:\d+", board.stdout.readline())
            assert base, "the dashboard printed no URL"
            # The harness evaluates its own script in the page: past the page's CSP.
            page = browser.new_context(bypass_csp=True).new_page()
            page.goto(f"{base[0]}/packages")

            def write(message: str) -> float:
                at = time.time()
                store.record_event("bench", "note", message, at=at)
                return at

            ours = latencies(page, f"{base[0]}/api/stream", write, count)
            raw_page = browser.new_page()
            raw_page.goto(raw_url)
            raw = latencies(raw_page, f"{raw_url}/stream", raw_write, count)
        finally:
            raw_stop()
            store.close()
            browser.close()
            board.terminate()
            board.wait(timeout=15)
    print_latency("dashboard SSE (write to state.db -> page)", ours, " (target p50 <= 300 ms)")
    print_latency("raw SSE (handed to the endpoint -> page)", raw)
    print(f"ratio p50: {statistics.median(ours) / statistics.median(raw):.1f}x "
          "(the dashboard looks at state.db every 0.1 s)")  # fmt: skip


def print_latency(what: str, ms: list[float], target: str = "") -> None:
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    print(f"{what}: p50 {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms over {len(ms)} "
          f"events{target}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--events", type=int, default=60)
    args = parser.parse_args()
    sse_latency(args.events)
    with writer_workspace() as (ws, repo):

        def run(n: int) -> float:
            t = time.perf_counter()
            orchestrator.start_run(
                ws, f"write file {n}", repo, RunOptions(force=True, agent="writer")
            )
            return time.perf_counter() - t

        run(0)  # warm
        on, off = [], []
        real = orchestrator.Orchestrator._store_event
        for n in range(args.runs):  # interleaved: the same conditions for both
            on.append(run(2 * n + 1))
            orchestrator.Orchestrator._store_event = lambda self, event: None  # type: ignore[method-assign]
            off.append(run(2 * n + 2))
            orchestrator.Orchestrator._store_event = real  # type: ignore[method-assign]
    with_ms, without_ms = statistics.median(on) * 1000, statistics.median(off) * 1000
    print(f"run with the event stream:    {with_ms:.0f} ms (median of {args.runs})")
    print(f"run without it:               {without_ms:.0f} ms")
    print(f"ratio: {with_ms / without_ms:.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
