"""A local OpenAI-compatible chat completions server for tests (stdlib only, 127.0.0.1).

Queue what it should answer with ``server.add(...)``: reply text (served as a completion, or as
SSE chunks when the request streams), or an ``HTTPError(status, body)``, or ``Hang(seconds)``.
Every request body is recorded in ``server.requests``. When the queue is empty it answers with
``default`` (if set) or a 500.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class HTTPError:
    status: int
    body: dict[str, Any] | None = None


@dataclass
class Hang:
    seconds: float


class FakeOpenAI:
    def __init__(self) -> None:
        self.queue: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default: str | None = None
        self.delay = 0.0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, *items: Any) -> None:
        with self._lock:
            for item in items:
                self.queue.append(json.dumps(item) if isinstance(item, dict) else item)

    def next_item(self) -> Any:
        with self._lock:
            if self.queue:
                return self.queue.popleft()
        return self.default if self.default is not None else HTTPError(500, {"error": {"message": "queue empty"}})


def _completion(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    }


def _chunks(text: str, model: str, size: int = 7) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
    return chunks


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            fake.requests.append(body)
            if fake.delay:
                time.sleep(fake.delay)
            item = fake.next_item()
            if isinstance(item, Hang):
                time.sleep(item.seconds)
                item = fake.next_item()
            if isinstance(item, HTTPError):
                return self._json(item.status, item.body or {"error": {"message": f"status {item.status}"}})
            if body.get("stream"):
                return self._stream(item, body.get("model", "test"))
            return self._json(200, _completion(item, body.get("model", "test")))

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, text: str, model: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in _chunks(text, model):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
