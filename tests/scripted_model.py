"""A loopback model server for the real CLI agents: it speaks the Anthropic Messages API
(Claude Code), the Gemini API (Gemini CLI) and the OpenAI Responses API (Codex), streamed
as server-sent events, and follows a script instead of thinking.

A script is a list of conversations, one per run of a CLI (an attempt). A conversation is
the list of the model's turns that call tools, each a list of :class:`Call`; when they are
used up the model answers with text and ends its turn. Which conversation a request belongs
to is counted, not guessed: a request whose history holds no tool result starts the next
one; the number of tool-result rounds in its history says which turn it is at. Requests
that offer no tools (a CLI's side questions) get a short text and count for nothing.

Every request is recorded (API, path, headers, body) so that a test can assert what the CLI
was told: the prompt AgentOS built, the gate's feedback on a retry, a tool's result.
``key`` is the only API key it accepts; ``status`` makes it answer every request with that
HTTP status (401: a key the API rejects).

Every answer reports ``usage`` (input and output tokens) in its API's own format, and the
request records what it was told (``Request.usage``), so that a test can compare what a
CLI counted with what the API reported. ``hold`` makes requests from that turn of a
conversation on wait (until the server closes): a CLI that is stopped there was stopped
during its attempt, whatever the timing.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

KEY = "scripted-test-key"


@dataclass(frozen=True)
class Call:
    """One tool call the model makes: the CLI's own tool name and its arguments. ``{cwd}``
    in an argument is the CLI's working directory, as its request tells the model (file
    tools want absolute paths, and a test does not know the worktree's in advance)."""

    tool: str
    args: dict[str, Any]

    def bound(self, cwd: str) -> Call:
        text = json.dumps(self.args).replace("{cwd}", cwd.replace("\\", "\\\\"))
        return Call(self.tool, json.loads(text))


# Where each CLI tells its model the directory it works in.
_CWD = (
    re.compile(r"(?:Primary working|Working) directory: (/\S+)"),  # Claude Code
    re.compile(r"\*\*Workspace Directories:\*\*\s*- (/\S+)"),  # Gemini CLI
    re.compile(r"<cwd>(/[^<]+)</cwd>"),  # Codex
)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def working_directory(body: dict[str, Any]) -> str:
    for text in _strings(body):
        for pattern in _CWD:
            found = pattern.search(text)
            if found:
                return found[1]
    return ""


Turn = list[Call]


@dataclass
class Request:
    api: str  # "anthropic" | "gemini" | "openai"
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    conversation: int | None = None  # which conversation of the script; None: a side request
    turn: int | None = None
    usage: tuple[int, int] | None = None  # the input and output tokens its answer reported
    at: float = field(default_factory=time.monotonic)  # when it arrived (for benchmarks)

    def text(self) -> str:
        """Everything the request says, as one JSON text (for `in` assertions)."""
        return json.dumps(self.body, ensure_ascii=False)

    def tool_results(self) -> list[str]:
        """The results of the model's tool calls this request carries, in order, as text."""
        return [json.dumps(r, ensure_ascii=False) for r in _results(self.api, self.body)]

    def tool_names(self) -> list[str]:
        """The tools the CLI offers the model in this request."""
        return _tool_names(self.api, self.body)


def _results(api: str, body: dict[str, Any]) -> Iterator[Any]:
    if api == "anthropic":
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                yield from (c for c in content if c.get("type") == "tool_result")
    elif api == "gemini":
        for content in body.get("contents", []):
            yield from (p for p in content.get("parts", []) if "functionResponse" in p)
    else:
        items = body.get("input", [])
        yield from (
            i for i in items if isinstance(i, dict) and i.get("type", "").endswith("_output")
        )


def _rounds(api: str, body: dict[str, Any]) -> int:
    """How many of the model's tool-calling turns the history holds."""
    if api == "anthropic":
        return sum(
            1
            for m in body.get("messages", [])
            if m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            and any(c.get("type") == "tool_use" for c in m["content"])
        )
    if api == "gemini":
        return sum(
            1
            for c in body.get("contents", [])
            if c.get("role") == "model" and any("functionCall" in p for p in c.get("parts", []))
        )
    calls = {
        i.get("call_id")
        for i in body.get("input", [])
        if isinstance(i, dict) and i.get("type") in ("function_call", "custom_tool_call")
    }
    return len(calls)


def _tool_names(api: str, body: dict[str, Any]) -> list[str]:
    if api == "anthropic":
        return [t.get("name", "") for t in body.get("tools", [])]
    if api == "gemini":
        return [
            d.get("name", "")
            for t in body.get("tools", [])
            for d in t.get("functionDeclarations", [])
        ]
    return [t.get("name", t.get("type", "")) for t in _openai_tools(body)]


def _openai_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools of a Responses request: its ``tools``, and those Codex offers inside its
    input (``additional_tools``, in namespaces), where its newer models take them."""
    tools = list(body.get("tools", []))
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            for tool in item.get("tools", []):
                tools += tool.get("tools", []) if tool.get("type") == "namespace" else [tool]
    return tools


@dataclass
class ScriptedModel:
    """The server. Use it as a context manager; ``url`` is its base address."""

    script: list[list[Turn]] = field(default_factory=list)
    key: str = KEY
    status: int = 200
    final_text: str = "Done: the change is made."
    usage: tuple[int, int] = (10, 5)  # input and output tokens every answer reports
    hold: int | None = None  # requests of this turn (or later) wait until the server closes
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._conversations = 0
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                model._handle(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                model._handle(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def main_requests(self, api: str | None = None) -> list[Request]:
        """The requests that belong to the script's conversations, in order."""
        return [
            r for r in self.requests if r.conversation is not None and (api is None or r.api == api)
        ]

    def conversation(self, n: int) -> list[Request]:
        return [r for r in self.requests if r.conversation == n]

    def reported(self) -> tuple[int, int]:
        """The input and output tokens its answers reported, in all."""
        with self._lock:
            used = [r.usage for r in self.requests if r.usage is not None]
        return sum(u[0] for u in used), sum(u[1] for u in used)

    def held(self) -> list[Request]:
        """The requests waiting on ``hold``."""
        with self._lock:
            return [r for r in self.requests if _held(self.hold, r)]

    # -- dispatch ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        url = urlsplit(h.path)
        api = self._api(url.path)
        headers = {k.lower(): v for k, v in h.headers.items()}
        request = Request(api, h.path, headers, body or {})
        with self._lock:
            self.requests.append(request)
        if api == "unknown":
            _send(h, 404, "application/json", b'{"error": "no such endpoint"}')
            return
        if self.status != 200 or self._key(api, headers, parse_qs(url.query)) != self.key:
            status = self.status if self.status != 200 else 401
            _send(h, status, "application/json", json.dumps(_error(api, status)).encode())
            return
        if body is None:  # GET: the models list, which a key check asks for
            _send(h, 200, "application/json", json.dumps(_models(api)).encode())
            return
        calls = self._next(request)
        if _held(self.hold, request):
            self._release.wait()
            return
        stream = api != "gemini" or "streamGenerateContent" in url.path
        request.usage = self.usage
        if api == "anthropic":
            events = _anthropic(body, calls, self.final_text, self.usage)
        elif api == "gemini":
            events = _gemini(calls, self.final_text, self.usage)
            if not stream:
                _send(h, 200, "application/json", json.dumps(events[0]).encode())
                return
        else:
            events = _openai(body, calls, self.final_text, self.usage)
        data = b"".join(
            (f"event: {name}\n".encode() if name else b"")
            + b"data: "
            + json.dumps(payload).encode()
            + b"\n\n"
            for name, payload in events
        )
        _send(h, 200, "text/event-stream", data)

    @staticmethod
    def _api(path: str) -> str:
        if path.startswith("/v1/messages"):
            return "anthropic"
        if path.startswith("/v1beta/"):
            return "gemini"
        if path.startswith(("/v1/responses", "/v1/chat")):
            return "openai"
        if path == "/v1/models":  # Anthropic's and OpenAI's models list: a key check
            return "models"
        return "unknown"

    @staticmethod
    def _key(api: str, headers: dict[str, str], query: dict[str, list[str]]) -> str:
        if "x-api-key" in headers:
            return headers["x-api-key"]
        if "x-goog-api-key" in headers:
            return headers["x-goog-api-key"]
        if "key" in query:
            return query["key"][0]
        return headers.get("authorization", "").removeprefix("Bearer ").strip()

    def _next(self, request: Request) -> Turn:
        """The tool calls this request is answered with (none: the final text)."""
        if not request.tool_names():
            return []
        rounds = _rounds(request.api, request.body)
        with self._lock:
            if rounds == 0:
                self._conversations += 1
            n = max(self._conversations - 1, 0)
        request.conversation, request.turn = n, rounds
        turns = self.script[n] if n < len(self.script) else []
        if rounds >= len(turns):
            return []
        cwd = working_directory(request.body)
        return [call.bound(cwd) for call in turns[rounds]]


def _held(hold: int | None, request: Request) -> bool:
    return hold is not None and request.turn is not None and request.turn >= hold


def _send(h: BaseHTTPRequestHandler, status: int, ctype: str, data: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _error(api: str, status: int) -> dict[str, Any]:
    message = "invalid x-api-key" if status == 401 else f"scripted status {status}"
    if api == "anthropic" or api == "models":
        return {"type": "error", "error": {"type": "authentication_error", "message": message}}
    if api == "gemini":
        return {
            "error": {"code": status, "message": "API key not valid.", "status": "UNAUTHENTICATED"}
        }
    return {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}  # fmt: skip


def _models(api: str) -> dict[str, Any]:
    if api == "gemini":
        return {"models": [{"name": "models/gemini-2.5-flash"}]}
    return {"object": "list", "data": [{"id": "scripted", "type": "model"}], "has_more": False}


def _id() -> str:
    return uuid.uuid4().hex[:20]


def _anthropic(
    body: dict[str, Any], calls: Turn, text: str, usage: tuple[int, int]
) -> list[tuple[str, Any]]:
    blocks: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for call in calls:
        blocks.append(
            (
                {"type": "tool_use", "id": f"toolu_{_id()}", "name": call.tool, "input": {}},
                {"type": "input_json_delta", "partial_json": json.dumps(call.args)},
            )
        )
    if not calls:
        blocks.append(({"type": "text", "text": ""}, {"type": "text_delta", "text": text}))
    message = {
        "id": f"msg_{_id()}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},  # as the stream starts
    }
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    for i, (start, delta) in enumerate(blocks):
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    stop = "tool_use" if calls else "end_turn"
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                           "stop_sequence": None}, "usage": {"output_tokens": usage[1]}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return events


def _gemini(calls: Turn, text: str, usage: tuple[int, int]) -> list[tuple[str, Any]]:
    parts: list[dict[str, Any]] = [
        {"functionCall": {"name": c.tool, "args": c.args, "id": f"call_{_id()}"}} for c in calls
    ] or [{"text": text}]
    chunk = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        },
        "modelVersion": "scripted",
    }
    return [("", chunk)]


def _openai(
    body: dict[str, Any], calls: Turn, text: str, usage: tuple[int, int]
) -> list[tuple[str, Any]]:
    rid = f"resp_{_id()}"
    custom = {t.get("name") for t in _openai_tools(body) if t.get("type") == "custom"}
    items: list[dict[str, Any]] = [
        {
            "type": "custom_tool_call",
            "id": f"ctc_{_id()}",
            "call_id": f"call_{_id()}",
            "name": c.tool,
            "input": c.args["input"],
            "status": "completed",
        }
        if c.tool in custom
        else {
            "type": "function_call",
            "id": f"fc_{_id()}",
            "call_id": f"call_{_id()}",
            "name": c.tool,
            "arguments": json.dumps(c.args),
            "status": "completed",
        }
        for c in calls
    ] or [
        {
            "type": "message",
            "id": f"msg_{_id()}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]
    response = {"id": rid, "object": "response", "model": body.get("model", "scripted"),
                "status": "in_progress", "output": []}  # fmt: skip
    events: list[tuple[str, Any]] = [
        ("response.created", {"type": "response.created", "response": response})
    ]
    for i, item in enumerate(items):
        events += [
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": i, "item": item}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": i, "item": item}),
        ]  # fmt: skip
    used = {"input_tokens": usage[0], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(usage)}  # fmt: skip
    done = {**response, "status": "completed", "output": items, "usage": used}
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    return events
