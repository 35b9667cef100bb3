"""The dashboard's web application: JSON documents, a live stream, one static page.

Every ``GET /api/...`` answers with the document the matching ``--json`` command prints
(:mod:`agentos.cli.views`); the page (``static/``) draws them with the DOM's text nodes
only, so whatever an agent or a request wrote shows as text. ``GET /api/stream`` is the
event stream as server-sent events (and, for one run, its agents' output as it grows).

Who may ask: the Host header must name the address the dashboard listens on (a page on
another site that rebinds its DNS name to 127.0.0.1 is refused), a request carrying an
Origin must come from the dashboard itself, and a request that changes anything (cancel a
run, launch a workflow) must carry the token this start printed, which the page keeps.
"""

from __future__ import annotations

import hmac
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from agentos.cli import views
from agentos.errors import AgentOSError, BadInput, NotFound
from agentos.workspace.layout import Workspace

STATIC = Path(__file__).with_name("static")
TOKEN_HEADER = "x-agentos-token"
# Seconds between looks at the agents' logs, and at the event table on SQLite (PostgreSQL
# announces each event: the table is read then).
STREAM_POLL = 0.1
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PAGES = ("runs", "receipts", "packages", "guardian", "knowledge", "evals", "workflows")
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}

Handler = Callable[[Request], Awaitable[Response]]


class Document(JSONResponse):
    """JSON as ``--json`` prints it: what JSON cannot hold (a path, a time) as text."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=str).encode("utf-8")


class Guard:
    """Origin and token checks, and the security headers on every answer (the Host is
    checked before, by Starlette's TrustedHostMiddleware)."""

    def __init__(self, app: ASGIApp, token: str, hosts: list[str]) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = self._refused(scope["method"], headers)
        if refused is not None:
            await PlainTextResponse(refused, status_code=403)(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refused(self, method: str, headers: Headers) -> str | None:
        origin = headers.get("origin")
        if origin is not None and origin != "null":
            host = (urlsplit(origin).hostname or "").lower()
            if "*" not in self.hosts and host not in self.hosts:
                return "cross-origin request refused"
        if method not in ("GET", "HEAD", "OPTIONS"):
            given = headers.get(TOKEN_HEADER, "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return "this action needs the token `agentos dashboard` printed"
        return None


def create_app(ws: Workspace, token: str, *, hosts: list[str], repo: Path) -> Starlette:
    """The dashboard for workspace ``ws``: ``hosts`` are the names the Host header may
    give (``["*"]`` for any), ``repo`` the repository a launched workflow works on unless
    the form names another. On PostgreSQL its stores share a pool of connections."""
    from agentos.state.database import pool_connections

    pool_connections(ws.state)

    def api(build: Callable[[Request], Any], status: int = 200) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                data = await run_in_threadpool(build, request)
            except NotFound as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except BadInput as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except AgentOSError as exc:
                return JSONResponse({"error": str(exc)}, status_code=500)
            except Exception as exc:  # a bug: one line for the page and the terminal
                print(
                    f"dashboard: {request.url.path}: {type(exc).__name__}: {exc}", file=sys.stderr
                )
                return JSONResponse({"error": f"internal error: {exc}"}, status_code=500)
            return Document(data, status_code=status)

        return endpoint

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def stream(request: Request) -> Response:
        query = request.query_params
        try:
            after = _int(query.get("after"), "after")
            offsets = _offsets(query.get("offsets"))
        except BadInput as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        run = query.get("run") or None
        return EventSourceResponse(_stream(ws, request, run, after, offsets), ping=15)

    routes = [
        Route("/", page),
        *(Route(f"/{name}", page) for name in PAGES),
        Route("/runs/{run}", page),
        Route(
            "/api/runs",
            api(lambda r: views.runs(ws, _int(r.query_params.get("limit"), "limit") or 20)),
        ),
        Route("/api/runs/{run}", api(lambda r: views.run(ws, r.path_params["run"]))),
        Route(
            "/api/runs/{run}/log",
            api(
                lambda r: views.agent_log(
                    ws,
                    r.path_params["run"],
                    r.query_params.get("agent", ""),
                    _int(r.query_params.get("offset"), "offset"),
                )
            ),
        ),
        Route(
            "/api/runs/{run}/cancel",
            api(lambda r: _cancel(ws, r.path_params["run"])),
            methods=["POST"],
        ),
        Route("/api/status", api(lambda r: views.live(ws))),
        Route("/api/packages", api(lambda r: views.packages(ws))),
        Route(
            "/api/receipts", api(lambda r: views.receipts(ws, r.query_params.get("run") or None))
        ),
        Route("/api/receipts/verify", api(lambda r: views.receipts_verified(ws))),
        Route("/api/receipts/{id}", api(lambda r: _receipt(ws, r.path_params["id"]))),
        Route("/api/guardian", api(lambda r: views.guardian(ws))),
        Route("/api/knowledge", api(lambda r: _knowledge(ws, r.query_params.get("q", "")))),
        Route("/api/evals", api(lambda r: views.evals(ws))),
        Route("/api/evolutions", api(lambda r: views.evolutions(ws))),
        Route("/api/evolutions/{id}", api(lambda r: views.evolution(ws, r.path_params["id"]))),
        Route("/api/workflows", api(lambda r: views.workflows(ws))),
        Route("/api/executions/{id}", api(lambda r: views.execution(ws, r.path_params["id"]))),
        Route(
            "/api/events",
            api(
                lambda r: views.events(
                    ws,
                    _int(r.query_params["after"], "after") if "after" in r.query_params else None,
                    run=r.query_params.get("run") or None,
                )
            ),
        ),
        Route("/api/stream", stream),
        Route("/api/workflows/{id}/launch", _launcher(ws, repo, api), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
        Middleware(Guard, token=token, hosts=hosts),
    ]
    return Starlette(routes=routes, middleware=middleware)


def _int(value: str | None, field: str) -> int:
    if value is None or value == "":
        return 0
    try:
        number = int(value)
    except ValueError:
        raise BadInput(f"{value!r} is not a whole number", field=field) from None
    if number < 0:
        raise BadInput(f"{value!r} is negative", field=field)
    return number


def _offsets(value: str | None) -> dict[str, int]:
    """``{"agent": byte offset}`` of the agents' output a page already has."""
    if not value:
        return {}
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in data.items()
    ):
        raise BadInput("expected a JSON object of agent: byte offset", field="offsets")
    return data


def _cancel(ws: Workspace, run_id: str) -> dict[str, Any]:
    from agentos.run.control import cancel

    return {"run": run_id, "status": cancel(ws, run_id)}


def _receipt(ws: Workspace, receipt_id: str) -> dict[str, Any]:
    from agentos.receipts import load_receipt

    return load_receipt(ws, receipt_id).as_dict()


def _knowledge(ws: Workspace, query: str) -> dict[str, Any]:
    if not query.strip():
        return {"query": query, "hits": []}
    return views.knowledge(ws, query)


def _launcher(ws: Workspace, repo: Path, api: Callable[..., Handler]) -> Handler:
    """``POST /api/workflows/ID/launch`` with ``{"params": {...}, "repo": "..."}``: a new
    execution run in the background, as ``agentos workflows launch --detach``."""
    from agentos.workflows.executions import launch, start_detached

    async def endpoint(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        if not isinstance(body, dict) or not isinstance(body.get("params", {}), dict):
            return JSONResponse({"error": "params: expected an object"}, status_code=400)
        params = {str(k): str(v) for k, v in body.get("params", {}).items()}
        where = Path(str(body.get("repo") or repo))

        def start(_: Request) -> dict[str, Any]:
            execution, first = launch(ws, request.path_params["id"], where, params)
            log = start_detached(ws, execution)
            return {"execution": execution, "task": first.id, "log": str(log)}

        return await api(start, 201)(request)

    return endpoint


async def _stream(
    ws: Workspace, request: Request, run: str | None, after: int, offsets: dict[str, int]
) -> AsyncIterator[dict[str, str]]:
    """The events written after event ``after`` as they are written (``after`` 0: from
    now on; with ``run``, only that run's, and 0 is from its start); with ``run``, its
    agents' output too, as ``log`` messages, from ``offsets``. On PostgreSQL the state
    announces each event and the table is read only then (the agents' logs are files, looked
    at every ``STREAM_POLL``); on SQLite it is read every ``STREAM_POLL``."""
    from agentos.run.store import RunStore, announces
    from agentos.state.database import EVENTS

    store = await run_in_threadpool(RunStore, ws)
    listener = await run_in_threadpool(store.listen, EVENTS)
    agents: list[str] = []
    try:
        if run is None and after == 0:
            after = await run_in_threadpool(store.last_event_id)
        if run is not None:
            try:
                record = await run_in_threadpool(store.get, run)
                agents = [a.agent for a in record.agents]
            except NotFound:
                pass  # not recorded yet: its agents come with its events
        wake = True
        while not await request.is_disconnected():
            found: list[dict[str, Any]] = []
            if wake:
                found = await run_in_threadpool(store.events_after, after, run=run, limit=500)
            for event in found:
                after = int(event["id"])
                yield {"event": "event", "id": str(after), "data": json.dumps(event)}
                if run and event.get("agent") and event["agent"] not in agents:
                    agents.append(str(event["agent"]))
            if run:
                for agent in agents:
                    chunk = await run_in_threadpool(
                        views.agent_log, ws, run, agent, offsets.get(agent, 0)
                    )
                    start = offsets.get(agent, 0)
                    if chunk["offset"] != start:
                        offsets[agent] = chunk["offset"]
                        yield {"event": "log", "data": json.dumps({**chunk, "from": start})}
            wake = len(found) == 500 or announces(
                await run_in_threadpool(listener.wait, STREAM_POLL), after, run
            )
    finally:
        listener.close()
        store.close()
