"""A small real MCP server for tests/tools/test_mcp.py, built with the SDK's FastMCP.

    python mcp_server.py                    # stdio
    python mcp_server.py --http PORT        # streamable HTTP on 127.0.0.1:PORT, path /mcp
    python mcp_server.py --sse PORT         # SSE on 127.0.0.1:PORT, path /sse
    python mcp_server.py --crash-on-start   # writes a line to stderr and exits before the handshake

$MCP_TEST_STARTS names a file each start appends its pid to; while the file $MCP_TEST_CRASH_IF
names exists, the server crashes on start (a server that cannot come back yet).

FastMCP was renamed ``mcp.server.mcpserver.MCPServer`` in mcp 2 (``mcp.server.fastmcp`` raises there).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

try:
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as FastMCP  # mcp >= 2
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP  # type: ignore[no-redef,assignment]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

server = FastMCP("llm-fsm-test")
_running = 0  # slow() calls in progress right now, to show that calls overlap
_most_running = 0

ORDERS = {
    "A1": {"order_id": "A1", "status": "shipped", "items": 2},
    "B2": {"order_id": "B2", "status": "processing", "items": 1},
}


@server.tool()
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    if order_id not in ORDERS:
        raise ToolError(f"no order {order_id}")
    return ORDERS[order_id]


@server.tool(structured_output=False)
def check_availability(date: str, guests: int) -> str:
    """Whether a table is free on a date (unstructured: the answer is JSON text)."""
    return f'{{"date": "{date}", "guests": {guests}, "available": {"true" if guests <= 4 else "false"}}}'


@server.tool()
def charge(amount: int, idempotency_key: str, ctx: Context) -> dict[str, Any]:
    """A tool whose own argument is an idempotency key (as a payment API's is); the _meta it received too."""
    meta = ctx.request_context.meta
    data = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta or {})
    return {"amount": amount, "idempotency_key": idempotency_key, "meta_key": data.get("idempotency_key")}


@server.tool()
def request_meta(note: str, ctx: Context) -> dict[str, Any]:
    """The request's _meta, as this server received it (the client's idempotency key travels there)."""
    meta = ctx.request_context.meta
    data = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta or {})
    return {"note": note, "meta": {k: v for k, v in data.items() if isinstance(v, str)}}


@server.tool(structured_output=False)
def greet(name: str) -> str:
    """Plain text, not JSON."""
    return f"Hello, {name}!"


@server.tool(structured_output=False)
def two_lines() -> list[str]:
    """Two text contents."""
    return ["first", "second"]


@server.tool()
async def slow(seconds: float) -> dict[str, Any]:
    """Sleep, then report when it ran and how many slow calls ran at once."""
    global _running, _most_running
    _running += 1
    _most_running = max(_most_running, _running)
    started = time.time()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:  # the client cancelled the call (notifications/cancelled)
        print(f"slow cancelled after {time.time() - started:.1f} s", file=sys.stderr, flush=True)
        raise
    finally:
        _running -= 1
    return {"started": started, "ended": time.time(), "most_running": _most_running}


@server.tool()
def fail() -> str:
    """Always fails: the client sees isError."""
    raise ToolError("the kitchen is on fire")


@server.tool()
def whoami() -> dict[str, Any]:
    """The server's pid and a value of its environment."""
    return {"pid": os.getpid(), "greeting": os.environ.get("MCP_TEST_GREETING"), "cwd": os.getcwd()}


@server.tool()
def crash() -> str:
    """Exit the server process at once, mid-call."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


def _run_http(transport: str, port: int) -> None:
    try:
        server.run(transport, host="127.0.0.1", port=port)  # type: ignore[call-overload]  # mcp >= 2
    except TypeError:  # mcp 1.x takes host and port from the settings
        server.settings.host = "127.0.0.1"
        server.settings.port = port
        server.run(transport)  # type: ignore[arg-type]


def _note_start() -> None:
    if os.environ.get("MCP_TEST_START_DELAY"):  # a server slow to come up: calls arrive while it starts
        time.sleep(float(os.environ["MCP_TEST_START_DELAY"]))
    if os.environ.get("MCP_TEST_STARTS"):
        with open(os.environ["MCP_TEST_STARTS"], "a") as starts:
            starts.write(f"{os.getpid()}\n")
    if os.environ.get("MCP_TEST_CRASH_IF") and os.path.exists(os.environ["MCP_TEST_CRASH_IF"]):
        print("fatal: told to crash on start", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    args = sys.argv[1:]
    _note_start()
    if args[:1] == ["--crash-on-start"]:
        print("starting...", file=sys.stderr)
        print("fatal: the database is unreachable", file=sys.stderr, flush=True)
        sys.exit(2)
    if args[:1] == ["--http"]:
        _run_http("streamable-http", int(args[1]))
    elif args[:1] == ["--sse"]:
        _run_http("sse", int(args[1]))
    else:
        print("test server ready on stdio", file=sys.stderr, flush=True)
        server.run()
