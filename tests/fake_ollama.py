"""A loopback HTTP server that speaks enough of the Ollama API for the real clients.

It answers ``GET /api/tags`` (the models it "has"), ``POST /api/chat`` (the native API the
``ollama`` client and langchain-ollama use, streamed as NDJSON or not) and
``POST /v1/chat/completions`` (the OpenAI-compatible API crewai uses, streamed as SSE or
not) with scripted replies, in order, and ``POST /api/embed`` (embeddings) with the scripted
vector of each input text; it records every request it was sent.
A reply is ``{"content": "text", "tool_calls": [{"name": ..., "arguments": {...}}]}``; a
model it does not have is a 404, as Ollama answers one not pulled.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]


class FakeOllama:
    def __init__(
        self,
        replies: list[Reply] | None = None,
        models: tuple[str, ...] = ("qwen2.5-coder:7b",),
        vectors: dict[str, list[float]] | None = None,
    ) -> None:
        self.replies = list(replies or [])
        self.models = models
        self.vectors = dict(vectors or {})  # input text -> the vector /api/embed returns
        self.requests: list[dict[str, Any]] = []  # (path, body) of every POST, in order
        self.tokens = 0  # the tokens it counted (prompt and reply) in every chat answered
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/api/tags":
                    fake._json(
                        self,
                        200,
                        {
                            "models": [
                                {"name": m, "model": m, "size": 1, "digest": "0" * 64}
                                for m in fake.models
                            ]
                        },
                    )
                elif self.path in ("/", ""):
                    fake._text(self, 200, "Ollama is running")
                else:
                    fake._json(self, 404, {"error": "not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.requests.append({"path": self.path, "body": body})
                    if self.path == "/api/embed":
                        fake._embed(self, body)
                        return
                    reply = fake.replies.pop(0) if fake.replies else None
                if self.path == "/api/chat":
                    fake._native(self, body, reply)
                elif self.path.endswith("/chat/completions"):
                    fake._openai(self, body, reply)
                else:
                    fake._json(self, 404, {"error": f"no such endpoint {self.path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeOllama:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]

    # -- responses -------------------------------------------------------------------------

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, ctype: str, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _json(self, handler: BaseHTTPRequestHandler, status: int, data: Any) -> None:
        self._send(handler, status, "application/json", json.dumps(data).encode())

    def _text(self, handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
        self._send(handler, status, "text/plain", text.encode())

    def _embed(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        model = body.get("model", "")
        if model not in self.models:
            self._json(handler, 404, {"error": f"model '{model}' not found"})
            return
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            self._json(handler, 500, {"error": f"no scripted vector for {missing[0]!r}"})
            return
        self._json(handler, 200, {"model": model, "embeddings": [self.vectors[t] for t in texts]})

    def _native(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply | None
    ) -> None:
        if reply is None:
            self._json(handler, 500, {"error": "the fake server has no scripted reply left"})
            return
        model = body.get("model", "")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        calls = [
            {"function": {"name": c["name"], "arguments": c.get("arguments", {})}}
            for c in reply.get("tool_calls", [])
        ]
        text = reply.get("content", "")
        # A token is "a word" here: enough for the count to differ from reply to reply.
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        answer = len(text.split()) + len(calls)
        with self.lock:
            self.tokens += prompt + answer
        final = {
            "model": model,
            "created_at": stamp,
            "done": True,
            "done_reason": "stop",
            "total_duration": 1,
            "eval_count": answer,
            "prompt_eval_count": prompt,
        }
        if not body.get("stream", True):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            self._json(handler, 200, {**final, "message": message})
            return
        pieces = [text[i : i + 12] for i in range(0, len(text), 12)]
        lines = [
            {
                "model": model,
                "created_at": stamp,
                "done": False,
                "message": {"role": "assistant", "content": piece},
            }
            for piece in pieces
        ]
        if calls:
            lines.append(
                {
                    "model": model,
                    "created_at": stamp,
                    "done": False,
                    "message": {"role": "assistant", "content": "", "tool_calls": calls},
                }
            )
        lines.append({**final, "message": {"role": "assistant", "content": ""}})
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        self._send(handler, 200, "application/x-ndjson", data)

    def _openai(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply | None
    ) -> None:
        if reply is None:
            self._json(handler, 500, {"error": {"message": "no scripted reply left"}})
            return
        model = body.get("model", "")
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
            }
            for i, c in enumerate(reply.get("tool_calls", []))
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            self._json(
                handler,
                200,
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        events = [
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            },
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                "usage": usage,
            },
        ]
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self._send(handler, 200, "text/event-stream", data + b"data: [DONE]\n\n")
