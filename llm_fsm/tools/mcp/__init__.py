"""Tools served by MCP (Model Context Protocol) servers, callable from sync and async code.

>>> with MCPServer(["python", "server.py"]) as server:              # doctest: +SKIP
...     server.tools()[0].parameters                                # the tool's JSON Schema
...     server.call("lookup_order", {"order_id": "A1"})             # JSON data
...     await server.acall("lookup_order", {"order_id": "A1"})      # from any event loop

A server is a stdio command (the child's stderr is captured, its last lines name what went wrong)
or a URL: streamable HTTP, or SSE when the path ends in ``/sse``. The official SDK
(``pip install 'llm-fsm-runtime[mcp]'``) is async, and a session must live in one task, so each
server runs its session in a background thread with its own event loop. :meth:`MCPServer.call`
blocks on that loop; :meth:`MCPServer.acall` awaits it without blocking the caller's loop; calls
run concurrently. The SDK is imported by :meth:`MCPServer.start`, never at import time.

A server that dies is brought back by the next call that needs it: a stdio command is started
again, a URL connected to again. The call that was running when it died fails (it may have had
effects: it is not sent again). Restarts back off (:class:`Backoff`): the first comes at once,
each further one at least 1, 2, 4, 8, 16, then 30 s after the one before, until a call succeeds;
meanwhile calls fail at once, saying when the next attempt is. :attr:`MCPServer.down` says why a
server is down, :meth:`MCPServer.revive` brings it back outside a call (a readiness check).

Errors, each one line::

    FSMError
    ├── MCPError       the server cannot be started, reached or kept: missing command, exited, refused
    └── MCPToolError   one call failed: the tool reported an error, timed out, or does not exist

The package, by concern: :mod:`~llm_fsm.tools.mcp.server` (:class:`MCPServer`, the caller's side: start,
call, restart, close), :mod:`~llm_fsm.tools.mcp.session` (the background thread the SDK session lives
in), :mod:`~llm_fsm.tools.mcp.spec` (server specs as definitions and configs write them),
:mod:`~llm_fsm.tools.mcp.wire` (tool listings and results as JSON data), :mod:`~llm_fsm.tools.mcp.errors`
(the two errors and how an SDK failure is told and worded) and :mod:`~llm_fsm.tools.mcp.registration`
(a server's tools made a conversation's tools).
"""

from __future__ import annotations

from llm_fsm.tools.mcp.errors import MCPError, MCPToolError
from llm_fsm.tools.mcp.registration import connect, register
from llm_fsm.tools.mcp.server import Backoff, MCPServer
from llm_fsm.tools.mcp.wire import MCPTool, tool_result

__all__ = ["MCPError", "MCPServer", "MCPTool", "MCPToolError", "connect", "register", "tool_result"]
__all__ += ["Backoff"]  # not public: its tests import it from here
