"""A local OpenAI-compatible chat completions server for tests (stdlib only, 127.0.0.1).

Queue what it should answer with ``server.add(...)``: reply text (served as a completion, or as
SSE chunks when the request streams), or an ``HTTPError(status, body)``, or ``Hang(seconds)``.
Faults: ``Truncated(text)`` (an SSE stream or a body cut off part-way), ``RawBody(status, bytes)``
(any body, e.g. HTML with status 200), ``NoChoices()`` (a completion whose ``choices`` list is empty)
and ``Disconnect()`` (the connection is closed without a response).
Tools: ``ToolCalls([(name, arguments), ...], text="")`` answers with ``message.tool_calls`` (one or several
calls, ``finish_reason`` "tool_calls"), or, when the request streams, with tool-call chunks the way OpenAI
streams them.
Every request body is recorded in ``server.requests``. When the queue is empty it answers with
``default`` (if set) or a 500. With ``cached_tokens`` set, usage says that many prompt tokens came from
the prompt cache (``prompt_tokens_details.cached_tokens``, as OpenAI and DeepSeek report it).
"""

from __future__ import annotations

import json
import sys
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


@dataclass
class Truncated:
    """Serve ``text`` but stop after ``fraction`` of it and close the connection.

    Streamed: SSE chunks with no ``finish_reason``, no usage and no ``[DONE]``; with ``chunked=True`` the
    response uses chunked transfer encoding and ends without its final chunk (an HTTP-level error), else
    it is delimited by the connection closing (a clean end of body: only the SSE content is cut).
    Not streamed: the ``Content-Length`` of the whole completion, then part of its body.
    """

    text: str
    fraction: float = 0.5
    chunked: bool = False


@dataclass
class Cut:
    """A whole, well-formed response whose text stopped at the token limit: ``finish_reason`` is ``length``."""

    text: str


@dataclass
class RawBody:
    """Any status and body bytes, as is (e.g. an HTML error page with status 200)."""

    status: int
    body: bytes
    content_type: str = "text/html"


@dataclass
class NoChoices:
    """A well-formed completion (or SSE stream) whose ``choices`` list is empty."""


@dataclass
class Disconnect:
    """Read the request, then close the connection without sending any response."""


@dataclass
class ToolCalls:
    """The model asks for tool calls: ``(name, arguments)`` pairs, in order (indices 0..n-1).

    A dict of arguments is JSON-encoded; a str is sent as is (so a test can send invalid JSON). ``text``
    is content sent alongside the calls (streamed before them). Streamed, each call comes as a first chunk
    with its index, id, type and name and empty arguments, then its arguments in fragments of ``size``
    characters; ``interleaved`` sends the fragments of parallel calls alternately (by index) instead of
    one call after the other. ``ids=False`` sends calls without ids. ``finish_reason`` is "tool_calls"
    unless a test wants e.g. "length" (then send cut-off arguments as a str).
    """

    calls: list[tuple[str, dict[str, Any] | str]]
    text: str = ""
    finish_reason: str = "tool_calls"
    size: int = 5
    interleaved: bool = False
    ids: bool = True


class FakeOpenAI:
    def __init__(self) -> None:
        self.queue: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default: str | None = None
        self.delay = 0.0
        self.cached_tokens = 0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        # a short poll interval: stop() returns within 50 ms instead of serve_forever's default 0.5 s
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

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


class _QuietServer(ThreadingHTTPServer):
    """Does not print a traceback when a client went away first (a timed-out request, a cancelled stream)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def _completion(text: str, model: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    }


def _chunks(text: str, model: str, size: int = 7, finish: str = "stop") -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
    return chunks


def _tool_calls(item: ToolCalls) -> list[dict[str, Any]]:
    calls = []
    for index, (name, arguments) in enumerate(item.calls):
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = {"id": f"call_fake_{index}", "type": "function", "function": {"name": name, "arguments": text}}
        calls.append(call if item.ids else {k: v for k, v in call.items() if k != "id"})
    return calls


def _tool_completion(item: ToolCalls, model: str) -> dict[str, Any]:
    completion = _completion(item.text, model, item.finish_reason)
    message = {"role": "assistant", "content": item.text or None, "tool_calls": _tool_calls(item)}
    completion["choices"][0]["message"] = message
    return completion


def _tool_chunks(item: ToolCalls, model: str) -> list[dict[str, Any]]:
    """Text chunks (if any), then each call's opening chunk and argument fragments, then the finish and usage."""
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    text_chunks = _chunks(item.text, model)[1:-2] if item.text else []
    streams = []  # per call: its chunks' tool_calls entries, in order
    for index, call in enumerate(_tool_calls(item)):
        arguments = call["function"]["arguments"]
        opening = {**call, "index": index, "function": {"name": call["function"]["name"], "arguments": ""}}
        pieces = [arguments[i : i + item.size] for i in range(0, len(arguments), item.size)]
        streams.append([opening] + [{"index": index, "function": {"arguments": p}} for p in pieces])
    entries = _alternate(streams) if item.interleaved else [e for stream in streams for e in stream]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}]
    chunks += text_chunks
    chunks += [{**base, "choices": [{"index": 0, "delta": {"tool_calls": [e]}}]} for e in entries]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": item.finish_reason}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
    return chunks


def _alternate(streams: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for position in range(max((len(s) for s in streams), default=0)):
        out += [s[position] for s in streams if position < len(s)]
    return out


def _with_cache(payload: dict[str, Any], cached: int) -> dict[str, Any]:
    """``payload`` with its usage (if any) saying ``cached`` prompt tokens came from the cache."""
    if not cached or not isinstance(payload.get("usage"), dict):
        return payload
    return {**payload, "usage": {**payload["usage"], "prompt_tokens_details": {"cached_tokens": cached}}}


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
            if isinstance(item, Disconnect):
                self.close_connection = True
                return None
            if isinstance(item, RawBody):
                return self._raw(item.status, item.body, item.content_type)
            if isinstance(item, NoChoices):
                return self._no_choices(body.get("model", "test"), bool(body.get("stream")))
            if isinstance(item, Truncated):
                return self._truncated(item, body.get("model", "test"), bool(body.get("stream")))
            if isinstance(item, ToolCalls):
                model = body.get("model", "test")
                if body.get("stream"):
                    return self._send_chunks(_tool_chunks(item, model))
                return self._json(200, _tool_completion(item, model))
            finish = "length" if isinstance(item, Cut) else "stop"
            text = item.text if isinstance(item, Cut) else item
            if body.get("stream"):
                return self._stream(text, body.get("model", "test"), finish)
            return self._json(200, _completion(text, body.get("model", "test"), finish))

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(_with_cache(payload, fake.cached_tokens)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, text: str, model: str, finish: str = "stop") -> None:
            self._send_chunks(_chunks(text, model, finish=finish))

        def _send_chunks(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(_with_cache(chunk, fake.cached_tokens))}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _raw(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _no_choices(self, model: str, stream: bool) -> None:
            completion = {**_completion("", model), "choices": []}
            if not stream:
                return self._json(200, completion)
            chunk = {**completion, "object": "chat.completion.chunk"}
            return self._sse([f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"], chunked=False)

        def _truncated(self, item: Truncated, model: str, stream: bool) -> None:
            cut = int(len(item.text) * item.fraction)
            if not stream:
                data = json.dumps(_completion(item.text, model)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: int(len(data) * item.fraction)])
                self.wfile.flush()
                self.close_connection = True
                return
            # the chunks of the text up to the cut, without the finish_reason and usage chunks
            chunks = [c for c in _chunks(item.text[:cut], model) if c["choices"] and c["choices"][0]["delta"]]
            events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
            self._sse(events, chunked=item.chunked, complete=False)

        def _sse(self, events: list[bytes], *, chunked: bool, complete: bool = True) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event) if chunked else event)
                self.wfile.flush()
            if chunked and complete:
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

    return Handler
