"""An asyncio OpenAI-compatible server for benchmarks: answers every request after ``--delay`` seconds.

    python benchmarks/slow_server.py --port 8765 --delay 0.1

It always answers with the same valid FSM reply (staying in state ``chat``), plain or streamed as
SSE chunks, so both the runtime and bare litellm calls can be measured against it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

REPLY = json.dumps(
    {
        "transition": {"target_state": "chat", "context_update": {}},
        "message": "Sure! Tell me more about that, I'm listening. " * 2,
        "reasoning": "small talk",
    }
)
USAGE = {"prompt_tokens": 500, "completion_tokens": 40, "total_tokens": 540}


def completion(model: str) -> dict[str, object]:
    return {
        "id": "bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
        "usage": USAGE,
    }


async def handle(request: web.Request) -> web.StreamResponse:
    stats = request.app["stats"]
    stats["in_flight"] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    stats["requests"] += 1
    try:
        return await answer(request)
    finally:
        stats["in_flight"] -= 1


async def report(request: web.Request) -> web.Response:
    """GET /stats: requests served and the most that were in flight at once (tests use it)."""
    return web.json_response(request.app["stats"])


async def answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    delay: float = request.app["delay"]
    model = body.get("model", "bench")
    if not body.get("stream"):
        await asyncio.sleep(delay)
        return web.json_response(completion(model))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await asyncio.sleep(delay)  # time to first token
    base = {"id": "bench", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    pieces = [REPLY[i : i + 8] for i in range(0, len(REPLY), 8)]
    for piece in pieces:
        chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await asyncio.sleep(request.app["chunk_delay"])
    final = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    await response.write(f"data: {json.dumps(final)}\n\n".encode())
    await response.write(f"data: {json.dumps({**base, 'choices': [], 'usage': USAGE})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--chunk-delay", type=float, default=0.002)
    args = parser.parse_args()
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app["delay"], app["chunk_delay"] = args.delay, args.chunk_delay
    app["stats"] = {"requests": 0, "in_flight": 0, "max_in_flight": 0}
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_get("/stats", report)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, backlog=4096)


if __name__ == "__main__":
    main()
