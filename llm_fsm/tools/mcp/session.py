"""The background thread's half of :class:`~llm_fsm.tools.mcp.MCPServer`: the SDK's session lives in one
task on the thread's own event loop; calls are submitted to that loop and run there concurrently.

:class:`Session` holds what runs on that loop: connect (stdio, streamable HTTP, SSE), list the tools,
hold the session until it is closed or lost, run calls, and word what went wrong. It is a base class of
``MCPServer`` rather than an object of its own because both halves share the server's state (its
session, tools, failure and in-flight calls), each writing it from its own thread.
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import contextlib
import logging
import math
import os
import re
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from llm_fsm.errors import FSMError
from llm_fsm.tools.mcp.errors import (
    CONNECTION_CLOSED,
    MCPError,
    MCPToolError,
    describe,
    error_code,
    is_closed_stream,
    one_line,
    os_error,
    root_cause,
    session_gone,
)
from llm_fsm.tools.mcp.wire import MCPTool, next_page, tool_result, wire_form

GRACE = 5.0  # seconds a blocked caller waits past a call's own timeout, should the background loop be stuck
_STDERR_LINES = 20
_MAX_LINE = 2000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class Session:
    """What runs on the server's background loop (see the module's docstring); ``MCPServer`` sets the state."""

    name: str
    command: list[str] | None
    url: str | None
    env: dict[str, str] | None
    cwd: str | None
    headers: dict[str, str] | None
    timeout: float
    _loop: asyncio.AbstractEventLoop | None
    _stop: asyncio.Event | None
    _lost: asyncio.Event | None
    _session: Any
    _scope: Any
    _accepting: bool
    _failure: str | None
    _tools: dict[str, MCPTool]
    _inflight: set[asyncio.Task[Any]]
    _stderr: StderrTail | None
    _submit_lock: Any  # threading.Lock
    _backoff: Any  # server._Backoff

    @property
    def stderr(self) -> list[str]:
        """The last lines the stdio server wrote to its stderr (captured, never shown)."""
        return list(self._stderr.lines) if self._stderr else []

    def _timeout_error(self, name: str, limit: float) -> MCPToolError:
        message = f"the MCP tool '{name}' on '{self.name}' did not answer within {limit:g}s"
        return MCPToolError(message, tool=name, server=self.name)

    def _request_stop(self) -> None:
        """On the loop: end the session, or give up connecting (start() was interrupted)."""
        if self._stop is not None:
            self._stop.set()
        if self._scope is not None and self._session is None:
            self._scope.cancel()

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(ready))
        finally:
            with self._submit_lock:
                self._accepting = False
            try:
                _drain(loop)
            finally:
                loop.close()

    async def _main(self, ready: concurrent.futures.Future[None]) -> None:
        """The one task the session lives in: connect, list the tools, wait for close()."""
        import anyio

        assert self._stop is not None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.timeout) as scope:
                self._scope = scope
                async with contextlib.AsyncExitStack() as stack:
                    session = await self._connect(stack)
                    await self._list_tools(session)
                    scope.deadline = math.inf
                    self._session = session
                    ready.set_result(None)
                    await self._hold()
                    await self._cancel_inflight()
            if scope.cancelled_caught and not ready.done():
                ready.set_exception(MCPError(f"the MCP server '{self.name}' did not answer within {self.timeout:g}s"))
        except BaseException as exc:  # reported to start(), or to the calls that follow
            if not ready.done():
                ready.set_exception(await self._start_error(exc))
            elif not self._failure:
                self._failure = await self._lost_connection(root_cause(exc))
        finally:
            self._session = self._scope = None
            self._failure = self._failure or f"the MCP server '{self.name}' is not running"
            if self._stderr is not None:
                self._stderr.close()

    async def _hold(self) -> None:
        """Keep the session until close() asks, or until it is lost: then end it at once, so that the
        next call starts a new one. A call notices a broken connection; the end of a stdio child's
        stderr shows that it exited even when no call was running."""
        assert self._stop is not None and self._lost is not None
        signals = [self._stop.wait(), self._lost.wait(), *([self._stderr.ended.wait()] if self._stderr else [])]
        waits = [asyncio.ensure_future(signal) for signal in signals]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not self._stop.is_set() and not self._failure:
            self._failure = f"the MCP server '{self.name}' exited: {self._last_words()}"

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import ClientSession

        streams = await (self._connect_stdio(stack) if self.command else self._connect_http(stack))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        return session

    async def _connect_stdio(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert self.command is not None
        self._stderr, errlog = await StderrTail.open()
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd)
        try:
            return await stack.enter_async_context(stdio_client(params, errlog=errlog))
        finally:
            errlog.close()  # the child holds its own copy: end of file on the pipe means it exited

    async def _connect_http(self, stack: contextlib.AsyncExitStack) -> Any:
        assert self.url is not None
        if urlsplit(self.url).path.rstrip("/").endswith("/sse"):
            from mcp.client.sse import sse_client

            return await stack.enter_async_context(sse_client(self.url, headers=self.headers, timeout=self.timeout))
        try:
            from mcp.client.streamable_http import streamable_http_client
        except ImportError:  # mcp < 1.24 has only the older name, which takes headers itself
            try:
                from mcp.client.streamable_http import streamablehttp_client  # type: ignore[attr-defined,unused-ignore]  # gone from new mcp
            except ImportError:
                raise MCPError("streamable HTTP needs mcp >= 1.8: pip install -U mcp") from None
            client = streamablehttp_client(self.url, headers=self.headers, timeout=self.timeout)
            return await stack.enter_async_context(client)
        http_client = None
        if self.headers:
            from mcp.shared._httpx_utils import create_mcp_http_client

            http_client = await stack.enter_async_context(create_mcp_http_client(headers=self.headers))
        return await stack.enter_async_context(streamable_http_client(self.url, http_client=http_client))

    async def _list_tools(self, session: Any) -> None:
        """Read every page of the tool list (``nextCursor``), bounded."""
        tools: dict[str, MCPTool] = {}
        cursor = None
        for _ in range(100):
            page = wire_form(await (session.list_tools() if cursor is None else next_page(session, cursor)))
            for tool in page.get("tools", []):
                schema = tool.get("inputSchema") or {"type": "object"}
                tools[tool["name"]] = MCPTool(tool["name"], tool.get("description") or "", schema)
            cursor = page.get("nextCursor")
            if not cursor:
                break
        self._tools = tools

    async def _call(self, name: str, arguments: dict[str, Any], limit: float, meta: dict[str, Any]) -> Any:
        session = self._session
        if session is None or self._failure:
            raise MCPError(self._failure or f"the MCP server '{self.name}' is not running")
        if name not in self._tools:
            await self._unknown_tool(session, name)
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            options = {"meta": meta} if meta else {}  # only when there is one: older SDKs take no meta
            result = await asyncio.wait_for(session.call_tool(name, arguments, **options), limit)
            self._backoff.reset()  # the server answered: should it die again, restart it at once
        except TimeoutError:
            raise self._timeout_error(name, limit) from None
        except asyncio.CancelledError:
            if self._failure:  # close() or a lost connection cancelled it, not the caller
                raise MCPError(self._failure) from None
            raise
        except Exception as exc:
            raise await self._call_error(name, exc) from None
        finally:
            self._inflight.discard(task)
        return tool_result(wire_form(result), tool=name, server=self.name)

    async def _unknown_tool(self, session: Any, name: str) -> None:
        """Ask the server again (its tools may have changed), then fail with a did-you-mean."""
        from llm_fsm.definition.wording import did_you_mean

        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._list_tools(session), self.timeout)
        if name in self._tools:
            return
        hint = did_you_mean(name, list(self._tools)) or f"it has {', '.join(sorted(self._tools)) or 'no tools'}"
        raise MCPToolError(f"the MCP server '{self.name}' has no tool '{name}' ({hint})", tool=name, server=self.name)

    async def _cancel_inflight(self) -> None:
        tasks = set(self._inflight)
        for task in tasks:
            task.cancel()
            # the caller of a call that timed out is gone: nobody else reads its error, also where it ends after
            # the grace below (a CI run logged "Task exception was never retrieved")
            task.add_done_callback(_retrieved)
        if tasks:
            await asyncio.wait(tasks, timeout=GRACE)

    async def _call_error(self, name: str, exc: Exception) -> FSMError:
        cause = root_cause(exc)
        if error_code(cause) == CONNECTION_CLOSED or is_closed_stream(cause) or session_gone(cause):
            self._failure = await self._lost_connection(cause)
            if self._lost is not None:
                self._lost.set()  # end this session: the next call starts a new one
            return MCPError(self._failure)
        # an error answer, or a result the SDK rejected: this call failed, the session is fine
        message = f"the MCP tool '{name}' on '{self.name}' failed: {describe(cause)}"
        return MCPToolError(message, tool=name, server=self.name)

    async def _lost_connection(self, cause: BaseException) -> str:
        if self.command is None:
            return f"lost the connection to the MCP server at {self.url}: {describe(cause)}"
        exited = await self._stderr_ended()
        verb = "exited" if exited else "closed the connection"
        return f"the MCP server '{self.name}' {verb}: {self._last_words()}"

    async def _start_error(self, exc: BaseException) -> MCPError:
        cause = root_cause(exc)
        if isinstance(cause, MCPError):
            return cause
        if isinstance(cause, OSError) and self.command:
            return MCPError(f"cannot start the MCP server '{self.name}': {os_error(cause, self.command[0])}")
        closed = error_code(cause) == CONNECTION_CLOSED or is_closed_stream(cause)
        if self.command is None and (closed or error_code(cause) is None):
            return MCPError(f"cannot reach the MCP server at {self.url}: {describe(cause)}")
        if closed:
            await self._stderr_ended()
            return MCPError(f"the MCP server '{self.name}' exited before it was ready: {self._last_words()}")
        return MCPError(f"the MCP server '{self.name}' failed to start: {describe(cause)}")

    async def _stderr_ended(self) -> bool:
        """Whether the child closed its stderr (it exited), waiting a moment for its last lines."""
        if self._stderr is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stderr.ended.wait(), 1.0)
        return self._stderr.ended.is_set()

    def _last_words(self) -> str:
        lines = self.stderr
        return one_line(lines[-1]) if lines else "(it wrote nothing to stderr)"


class StderrTail(asyncio.Protocol):
    """The read end of the child's stderr pipe: keeps its last lines, notes end of file (the child exited)."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=_STDERR_LINES)
        self.ended = asyncio.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""
        self._transport: asyncio.BaseTransport | None = None

    @classmethod
    async def open(cls) -> tuple[StderrTail, Any]:
        """A protocol reading a fresh pipe, and the pipe's write end to hand to the child."""
        read_fd, write_fd = os.pipe()
        tail = cls()
        try:
            loop = asyncio.get_running_loop()
            tail._transport, _ = await loop.connect_read_pipe(lambda: tail, os.fdopen(read_fd, "rb", buffering=0))
        except BaseException:
            os.close(write_fd)
            raise
        return tail, os.fdopen(write_fd, "w")

    def data_received(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + self._decoder.decode(data)).split("\n")
        self._partial = self._partial[-_MAX_LINE:]
        for line in lines:
            self._keep(line)

    def connection_lost(self, exc: Exception | None) -> None:
        self._keep(self._partial + self._decoder.decode(b"", final=True))
        self._partial = ""
        self.ended.set()

    def _keep(self, line: str) -> None:
        line = _ANSI.sub("", line).rstrip()
        if line.strip():
            self.lines.append(line[:_MAX_LINE])

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """After the session ended: let calls queued meanwhile start (and fail), cancel what is left."""
    loop.run_until_complete(asyncio.sleep(0))
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def import_sdk() -> None:
    try:
        import mcp  # noqa: F401  (anyio comes with it)
    except ModuleNotFoundError as exc:
        if exc.name not in ("mcp", None):  # the SDK is there, one of its own imports is not
            raise MCPError(f"the mcp package is installed but cannot be imported: {exc}") from None
        raise MCPError("MCP servers need the mcp package: pip install 'llm-fsm-runtime[mcp]'") from None
    except ImportError as exc:  # e.g. mcp < 1.21.1 imports a pydantic internal that pydantic 2.14 no longer has
        raise MCPError(f"the installed mcp package cannot be imported ({exc}): pip install -U mcp") from None


def quiet_sdk_logging() -> None:
    """The SDK logs connection noise; without a handler of its own Python prints WARNINGs to stderr.

    A NullHandler on the ``mcp`` logger stops that last-resort printing only; an application that
    configures logging still receives the records.
    """
    logger = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Read a finished call's error, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
