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
effects: it is not sent again). Restarts back off (:class:`_Backoff`): the first comes at once,
each further one at least 1, 2, 4, 8, 16, then 30 s after the one before, until a call succeeds;
meanwhile calls fail at once, saying when the next attempt is. :attr:`MCPServer.down` says why a
server is down, :meth:`MCPServer.revive` brings it back outside a call (a readiness check).

Errors, each one line::

    FSMError
    ├── MCPError       the server cannot be started, reached or kept: missing command, exited, refused
    └── MCPToolError   one call failed: the tool reported an error, timed out, or does not exist
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import re
import shlex
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from llm_fsm.errors import FSMError

if TYPE_CHECKING:
    from llm_fsm.definition import FSMDefinition
    from llm_fsm.hooks import Hooks

__all__ = ["MCPError", "MCPServer", "MCPTool", "MCPToolError", "connect", "register", "tool_result"]

_GRACE = 5.0  # seconds a blocked caller waits past a call's own timeout, should the background loop be stuck
_CLOSE_WAIT = 15.0  # the SDK's stdio shutdown takes at most ~6 s: stdin closed, SIGTERM, SIGKILL
_STDERR_LINES = 20
_MAX_LINE = 2000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_RESTART_FIRST = 1.0  # seconds between the first and the second restart of a server that keeps dying
_RESTART_MAX = 30.0  # the longest wait between two restarts: a server that comes back is used soon
_SPEC_KEYS = ("command", "args", "url", "env", "cwd", "name", "timeout", "headers")
_live: weakref.WeakSet[MCPServer] = weakref.WeakSet()
logger = logging.getLogger(__name__)


class MCPError(FSMError):
    """An MCP server cannot be started, reached or kept (connection-level)."""


class MCPToolError(FSMError):
    """One tool call failed: the tool reported an error, did not answer in time, or does not exist."""

    def __init__(self, message: str, *, tool: str | None = None, server: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.server = server


@dataclass(frozen=True)
class MCPTool:
    """A tool as the server lists it; ``parameters`` is its JSON Schema (the MCP ``inputSchema``)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class _Backoff:
    """When a server that went down may be restarted: at once the first time, then no sooner than
    1, 2, 4, 8, 16 and at most 30 s after the attempt before, until a call succeeds. A server that
    dies at every start or every call is not restarted in a tight loop, yet one that comes back after
    a single crash costs no wait."""

    attempts: int = 0
    not_before: float = 0.0  # time.monotonic() of the earliest next attempt

    def wait(self) -> float:
        """Seconds until the next attempt is allowed (0: now)."""
        return max(0.0, self.not_before - time.monotonic())

    def attempted(self) -> None:
        self.attempts += 1
        self.not_before = time.monotonic() + min(_RESTART_MAX, _RESTART_FIRST * 2 ** (self.attempts - 1))

    def reset(self) -> None:
        self.attempts, self.not_before = 0, 0.0


class MCPServer:
    """One MCP server: a stdio command (a list of arguments, with optional env/cwd) or a URL.

    ``env`` is added to the few variables the SDK passes on (PATH, HOME, USER, ...): a stdio server
    does not inherit the whole environment. ``timeout`` bounds :meth:`start` and is the default
    timeout of each call. Started on first use; use ``with`` or :meth:`close` to stop it.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(command, str):  # "python server.py" rather than a list: split it as a shell would
            command = shlex.split(command)
        if (command is None) == (url is None):
            raise ValueError("an MCP server needs a command or a url (exactly one)")
        if command is not None and not command:
            raise ValueError("an MCP server's command is empty")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self.command = [str(arg) for arg in command] if command is not None else None
        self.url = url
        self.env = dict(env) if env else None
        self.cwd = str(cwd) if cwd is not None else None
        self.headers = dict(headers) if headers else None
        self.timeout = float(timeout)
        self.name = name or (shlex.join(self.command) if self.command else str(url))
        self._start_lock = threading.Lock()
        self._submit_lock = threading.Lock()
        self._state = "new"  # new -> running -> closed (start() again reopens); running <-> down (a failed restart)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._lost: asyncio.Event | None = None  # set on the loop when a call finds the connection gone
        self._backoff = _Backoff()
        self._session: Any = None
        self._accepting = False
        self._failure: str | None = None  # why calls fail now: the server exited, its connection broke, or was closed
        self._tools: dict[str, MCPTool] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self._stderr: _StderrTail | None = None
        self._scope: Any = None  # the anyio cancel scope of the session's task, while connecting

    @classmethod
    def from_spec(cls, spec: str | Mapping[str, Any], *, relative_to: Path | None = None) -> MCPServer:
        """``"python server.py"``, ``"http://..."``, or ``{"command": [...], "env": {...}}`` / ``{"url": ...}``.

        ``{"command": "npx", "args": [...]}`` (the usual MCP client config) works too. A stdio server
        runs in ``relative_to`` (a folder, or a file's folder) unless ``cwd`` says otherwise, so a
        definition can name ``server.py`` next to itself.
        """
        base = _folder(relative_to)
        if isinstance(spec, str):
            text = spec.strip()
            if text.startswith(("http://", "https://")):
                return cls(url=text)
            args = shlex.split(text)
            if not args:
                raise MCPError("invalid MCP server spec: it is empty")
            return cls(args, cwd=base)
        if not isinstance(spec, Mapping):
            raise MCPError(f"invalid MCP server spec: expected a string or an object, not {type(spec).__name__}")
        try:
            return cls._from_mapping(spec, base)
        except (TypeError, ValueError) as exc:  # a wrong type or value in the spec: say which, in one line
            raise MCPError(f"invalid MCP server spec: {_one_line(str(exc))}") from None

    @classmethod
    def _from_mapping(cls, spec: Mapping[str, Any], base: str | None) -> MCPServer:
        from llm_fsm.wording import did_you_mean

        for key in spec:
            if key not in _SPEC_KEYS:
                hint = did_you_mean(key, list(_SPEC_KEYS))
                raise MCPError(f"invalid MCP server spec: unknown key '{key}'" + (f" ({hint})" if hint else ""))
        options = {k: spec[k] for k in ("name", "timeout", "headers") if k in spec}
        if "url" in spec:
            if "command" in spec:
                raise MCPError("invalid MCP server spec: give a command or a url, not both")
            return cls(url=str(spec["url"]), **options)
        command = spec.get("command")
        if isinstance(command, str):
            command = [command] if "args" in spec else shlex.split(command)
        if not command or not isinstance(command, list):
            raise MCPError("invalid MCP server spec: 'command' must be a non-empty string or list, or give a 'url'")
        args = [*command, *spec.get("args", [])]
        cwd = spec.get("cwd")
        cwd = str(Path(base, cwd)) if cwd is not None and base is not None else (cwd or base)
        return cls(args, env=spec.get("env"), cwd=cwd, **options)

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, {self._state})"

    def __enter__(self) -> MCPServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def stderr(self) -> list[str]:
        """The last lines the stdio server wrote to its stderr (captured, never shown)."""
        return list(self._stderr.lines) if self._stderr else []

    def start(self) -> None:
        """Connect, initialize the session and list the tools; idempotent. Raises :class:`MCPError`."""
        with self._start_lock:
            if self._state == "running":
                return
            self._open()

    @property
    def down(self) -> str | None:
        """Why calls cannot reach the server now (its process exited, its connection broke, a restart
        failed), or None: it is up, or not started yet, or closed (the caller's doing, not a fault)."""
        return self._failure if self._state in ("running", "down") else None

    def revive(self, *, block: bool = True) -> str | None:
        """Restart (stdio) or reconnect (URL) the server if it is down and its backoff allows.

        Returns why it is still down, or None when it is up. Calls do this themselves; a readiness
        check calls it for a server no call needs right now. ``block=False``: when another thread is
        starting the server, do not wait for it (the server counts as down meanwhile)."""
        if not self._start_lock.acquire(blocking=block):
            return self.down or f"the MCP server '{self.name}' is restarting"
        try:
            return self._revive()
        finally:
            self._start_lock.release()

    def _open(self) -> None:
        """Start the session's thread and wait until it is ready (under ``_start_lock``)."""
        if self._thread is not None:  # close() gave up waiting for the last session to end
            raise MCPError(f"the MCP server '{self.name}' is still shutting down: try again later")
        _import_sdk()
        _quiet_sdk_logging()
        self._failure, self._tools, self._stderr = None, {}, None
        self._loop, self._stop, self._lost = asyncio.new_event_loop(), asyncio.Event(), asyncio.Event()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"mcp {self.name}", daemon=True)
        self._accepting = True
        self._thread.start()
        try:
            ready.result(self.timeout + _GRACE)
        except BaseException as exc:
            self._shut_down()
            if isinstance(exc, concurrent.futures.TimeoutError):
                raise MCPError(f"the MCP server '{self.name}' did not answer within {self.timeout:g}s") from None
            raise
        self._state = "running"
        _live.add(self)

    def _revive(self) -> str | None:
        """:meth:`revive` under ``_start_lock``: one attempt, if the backoff allows one now."""
        reason = self.down
        if reason is None:  # up (another caller brought it back first), or closed meanwhile
            return None
        wait = self._backoff.wait()
        if wait > 0:
            return f"{reason} (next restart attempt in {wait:.1f} s)"
        logger.warning("%s; %s", reason, "starting it again" if self.command else "connecting again")
        self._shut_down()  # the lost session's thread is ending by itself; the SDK reaps the child
        try:
            self._open()
        except MCPError as exc:
            self._state, self._failure = "down", str(exc)
            logger.warning("%s", self._failure)
            return self._failure
        finally:
            self._backoff.attempted()  # counted from the attempt's end: a slow failing start is no busy loop
        return None

    def tools(self) -> list[MCPTool]:
        """The server's tools, as listed at start (and refreshed when a call names an unknown tool)."""
        self._ensure_started()
        return list(self._tools.values())

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call a tool and wait for its result as JSON data; raises :class:`MCPToolError` or :class:`MCPError`.
        ``meta`` goes in the request's ``_meta`` (the runtime sends ``{"idempotency_key": ...}`` there)."""
        if threading.current_thread() is self._thread:
            raise MCPError(f"call() on the MCP server '{self.name}' from its own thread would deadlock: use acall()")
        self._ensure_started()
        limit = self._limit(timeout)
        future = self._submit(name, arguments, limit, meta)
        try:
            return future.result(limit + _GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise self._timeout_error(name, limit) from None
        except concurrent.futures.CancelledError:
            raise MCPError(self._failure or f"the MCP server '{self.name}' was closed") from None

    async def acall(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Any:
        """:meth:`call` for async code, from any event loop: the caller's loop keeps running meanwhile."""
        if self._state == "new" or self.down is not None:  # starting takes a while: not on the caller's loop
            await asyncio.to_thread(self._ensure_started)
        else:
            self._ensure_started()  # a closed server: the error at once
        future = self._submit(name, arguments, self._limit(timeout), meta)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop the session and the stdio child process, and join the thread; idempotent."""
        with self._start_lock:
            self._failure = f"the MCP server '{self.name}' was closed"  # what calls cut short by it say
            if self._state == "running":
                self._shut_down()
            self._state = "closed"
            self._backoff.reset()
            _live.discard(self)

    # the caller's side

    def _ensure_started(self) -> None:
        if self._state == "new":
            self.start()
        elif self._state == "closed":
            raise MCPError(f"the MCP server '{self.name}' was closed: start() it again to use it")
        elif self.down is not None:
            reason = self.revive()
            if reason is not None:
                raise MCPError(reason)

    def _limit(self, timeout: float | None) -> float:
        limit = self.timeout if timeout is None else float(timeout)
        if not limit > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        return limit

    def _submit(
        self, name: str, arguments: Mapping[str, Any], limit: float, meta: Mapping[str, Any] | None
    ) -> concurrent.futures.Future[Any]:
        if not isinstance(arguments, Mapping):
            raise MCPToolError(f"the arguments of MCP tool '{name}' must be an object", tool=name, server=self.name)
        with self._submit_lock:
            if not self._accepting or self._loop is None:
                raise MCPError(self._failure or f"the MCP server '{self.name}' is not running")
            call = self._call(name, dict(arguments), limit, dict(meta or {}))
            return asyncio.run_coroutine_threadsafe(call, self._loop)

    def _shut_down(self) -> None:
        """Ask the loop to end the session, then wait for the thread (the SDK stops the child process)."""
        loop, thread = self._loop, self._thread
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(self._request_stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(_CLOSE_WAIT)
        if thread is None or not thread.is_alive():
            self._thread = None

    def _timeout_error(self, name: str, limit: float) -> MCPToolError:
        message = f"the MCP tool '{name}' on '{self.name}' did not answer within {limit:g}s"
        return MCPToolError(message, tool=name, server=self.name)

    # the background thread

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
                self._failure = await self._lost_connection(_root_cause(exc))
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
        self._stderr, errlog = await _StderrTail.open()
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
            page = _wire(await (session.list_tools() if cursor is None else _next_page(session, cursor)))
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
        return tool_result(_wire(result), tool=name, server=self.name)

    async def _unknown_tool(self, session: Any, name: str) -> None:
        """Ask the server again (its tools may have changed), then fail with a did-you-mean."""
        from llm_fsm.wording import did_you_mean

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
        if tasks:
            done, _ = await asyncio.wait(tasks, timeout=_GRACE)
            for task in done:  # the caller of a call that timed out is gone: nobody else reads its error
                if not task.cancelled():
                    task.exception()

    async def _call_error(self, name: str, exc: Exception) -> FSMError:
        cause = _root_cause(exc)
        if _error_code(cause) == _CONNECTION_CLOSED or _is_closed_stream(cause) or _session_gone(cause):
            self._failure = await self._lost_connection(cause)
            if self._lost is not None:
                self._lost.set()  # end this session: the next call starts a new one
            return MCPError(self._failure)
        # an error answer, or a result the SDK rejected: this call failed, the session is fine
        message = f"the MCP tool '{name}' on '{self.name}' failed: {_describe(cause)}"
        return MCPToolError(message, tool=name, server=self.name)

    async def _lost_connection(self, cause: BaseException) -> str:
        if self.command is None:
            return f"lost the connection to the MCP server at {self.url}: {_describe(cause)}"
        exited = await self._stderr_ended()
        verb = "exited" if exited else "closed the connection"
        return f"the MCP server '{self.name}' {verb}: {self._last_words()}"

    async def _start_error(self, exc: BaseException) -> MCPError:
        cause = _root_cause(exc)
        if isinstance(cause, MCPError):
            return cause
        if isinstance(cause, OSError) and self.command:
            return MCPError(f"cannot start the MCP server '{self.name}': {_os_error(cause, self.command[0])}")
        closed = _error_code(cause) == _CONNECTION_CLOSED or _is_closed_stream(cause)
        if self.command is None and (closed or _error_code(cause) is None):
            return MCPError(f"cannot reach the MCP server at {self.url}: {_describe(cause)}")
        if closed:
            await self._stderr_ended()
            return MCPError(f"the MCP server '{self.name}' exited before it was ready: {self._last_words()}")
        return MCPError(f"the MCP server '{self.name}' failed to start: {_describe(cause)}")

    async def _stderr_ended(self) -> bool:
        """Whether the child closed its stderr (it exited), waiting a moment for its last lines."""
        if self._stderr is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stderr.ended.wait(), 1.0)
        return self._stderr.ended.is_set()

    def _last_words(self) -> str:
        lines = self.stderr
        return _one_line(lines[-1]) if lines else "(it wrote nothing to stderr)"


_CONNECTION_CLOSED = -32000  # the SDK's error code when the transport ends
_INVALID_REQUEST = -32600
_SESSION_GONE = re.compile(r"\bsession (not found|terminated|expired)\b", re.IGNORECASE)


def _session_gone(exc: BaseException) -> bool:
    """Whether an HTTP server no longer knows our session (HTTP 404): it restarted, or dropped it.

    The spec tells the client to start a new session then; the SDK reports the 404 as an
    invalid-request error whose message is the only thing telling it apart from other such errors.
    """
    return _error_code(exc) == _INVALID_REQUEST and bool(_SESSION_GONE.search(str(exc)))


def tool_result(result: Mapping[str, Any], *, tool: str = "?", server: str = "?") -> Any:
    """An MCP ``CallToolResult`` (wire form) as JSON data, or :class:`MCPToolError` when ``isError``.

    ``structuredContent`` when present; else one content item (text parsed as JSON when it is JSON)
    or a list of them; images and other binary content become a short description.
    """
    items = [_content(item) for item in result.get("content") or []]
    if result.get("isError"):
        text = " ".join(str(i) for i in items if isinstance(i, str)) or json.dumps(items)
        raise MCPToolError(f"the MCP tool '{tool}' on '{server}' failed: {_one_line(text)}", tool=tool, server=server)
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    if not items:
        return None
    return items[0] if len(items) == 1 else items


def _content(item: Mapping[str, Any]) -> Any:
    kind = item.get("type")
    if kind == "text":
        text = str(item.get("text", ""))
        try:
            return json.loads(text)
        except ValueError:
            return text
    if kind in ("image", "audio"):
        data = str(item.get("data", ""))
        return {"type": kind, "mime_type": item.get("mimeType"), "bytes": len(data) * 3 // 4}
    if kind == "resource":
        resource = item.get("resource") or {}
        described = {"type": "resource", "uri": resource.get("uri"), "mime_type": resource.get("mimeType")}
        if "text" in resource:
            described["text"] = resource["text"]
        return described
    if kind == "resource_link":
        return {"type": "resource_link", "uri": item.get("uri"), "name": item.get("name")}
    return {"type": kind}


class _StderrTail(asyncio.Protocol):
    """The read end of the child's stderr pipe: keeps its last lines, notes end of file (the child exited)."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=_STDERR_LINES)
        self.ended = asyncio.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""
        self._transport: asyncio.BaseTransport | None = None

    @classmethod
    async def open(cls) -> tuple[_StderrTail, Any]:
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


async def _next_page(session: Any, cursor: str) -> Any:
    try:
        from mcp.types import PaginatedRequestParams
    except ImportError:  # mcp < 1.12
        return await session.list_tools(cursor)
    return await session.list_tools(params=PaginatedRequestParams(cursor=cursor))


def _wire(model: Any) -> dict[str, Any]:
    """An SDK model as its JSON wire form (camelCase), the same in mcp 1.x and 2.x."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """After the session ended: let calls queued meanwhile start (and fail), cancel what is left."""
    loop.run_until_complete(asyncio.sleep(0))
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def _root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup):
        real = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (real or list(exc.exceptions))[0]
    return exc


def _error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of the SDK's error (``McpError`` in 1.x, ``MCPError`` in 2.x), else None."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return code if isinstance(code, int) else None


def _is_closed_stream(exc: BaseException) -> bool:
    import anyio

    return isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, EOFError))


def _os_error(exc: OSError, executable: str) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename not in (None, executable):
        return f"no such folder '{exc.filename}'"
    if isinstance(exc, FileNotFoundError):
        return f"no such command '{executable}'"
    if isinstance(exc, PermissionError):
        return f"'{exc.filename or executable}' cannot be run (permission denied)"
    return exc.strerror or str(exc)


def _describe(exc: BaseException) -> str:
    text = _one_line(str(exc))
    if not text and _is_closed_stream(exc):
        return "the connection closed"
    return text or type(exc).__name__


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _folder(relative_to: Path | None) -> str | None:
    if relative_to is None:
        return None
    path = Path(relative_to)
    return str(path.parent if path.is_file() else path)


def _import_sdk() -> None:
    try:
        import mcp  # noqa: F401  (anyio comes with it)
    except ModuleNotFoundError as exc:
        if exc.name not in ("mcp", None):  # the SDK is there, one of its own imports is not
            raise MCPError(f"the mcp package is installed but cannot be imported: {exc}") from None
        raise MCPError("MCP servers need the mcp package: pip install 'llm-fsm-runtime[mcp]'") from None
    except ImportError as exc:  # e.g. mcp < 1.21.1 imports a pydantic internal that pydantic 2.14 no longer has
        raise MCPError(f"the installed mcp package cannot be imported ({exc}): pip install -U mcp") from None


def _quiet_sdk_logging() -> None:
    """The SDK logs connection noise; without a handler of its own Python prints WARNINGs to stderr.

    A NullHandler on the ``mcp`` logger stops that last-resort printing only; an application that
    configures logging still receives the records.
    """
    logger = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


@atexit.register
def _close_all() -> None:
    """At interpreter exit: stop the servers nobody closed, so no child process outlives us."""
    for server in list(_live):
        with contextlib.suppress(Exception):
            server.close()


# -- tools for conversations --------------------------------------------------------------------


def register(hooks: Hooks, server: MCPServer, names: Iterable[str] | None = None) -> list[str]:
    """Make the server's tools (all, or those ``names``) tools of ``hooks``, with the server's schemas
    and descriptions; starts the server. Raises :class:`MCPError` for a name the server lacks."""
    offered = {tool.name: tool for tool in server.tools()}
    wanted = list(offered) if names is None else list(dict.fromkeys(names))
    for name in wanted:
        tool = offered.get(name)
        if tool is None:
            from llm_fsm.wording import did_you_mean

            hint = did_you_mean(name, list(offered))
            raise MCPError(f"the MCP server '{server.name}' has no tool '{name}'" + (f" ({hint})" if hint else ""))
        own_key = "idempotency_key" in ((tool.parameters or {}).get("properties") or {})
        caller = _caller(server, name, own_key=own_key)
        hooks.add_tool(caller, name=name, description=tool.description, parameters=tool.parameters)
    return wanted


def _caller(server: MCPServer, name: str, *, own_key: bool = False) -> Callable[..., Awaitable[Any]]:
    """The tool function of one MCP tool: the call's key goes in ``_meta``, and also as the tool's own
    ``idempotency_key`` argument when its schema has one (``own_key``): the runtime's keyword takes that
    name, so the argument would otherwise never reach the server; the runtime's key, the same in every
    retry of the turn, is the one a server that dedupes by it needs."""

    async def call(*, idempotency_key: str | None = None, **arguments: Any) -> Any:
        meta = {"idempotency_key": idempotency_key} if idempotency_key else {}
        if own_key and idempotency_key:
            arguments = {**arguments, "idempotency_key": idempotency_key}
        return await server.acall(name, arguments, meta=meta)

    call.__name__ = name
    call.mcp_tool = True  # type: ignore[attr-defined]  # its schema is the server's (see calling.bind)
    return call


def connect(
    definition: FSMDefinition,
    hooks: Hooks,
    *,
    relative_to: str | os.PathLike[str] | None = None,
    servers: Sequence[MCPServer] = (),
) -> list[MCPServer]:
    """Start the definition's ``mcp_servers`` (stdio ones in ``relative_to``, the definition's folder)
    and ``servers``, and register with ``hooks`` the tools the states list that they serve and that
    ``hooks`` has no code for. A tool declared with ``mcp_server`` comes from that server only.
    Returns every server started (close them when done; they are closed at exit anyway)."""
    listed = [name for state in definition.states.values() for name in state.tools]
    needed = [name for name in dict.fromkeys(listed) if name not in hooks.tools]
    started: list[MCPServer] = []
    named = {
        key: MCPServer.from_spec(
            {"name": key, **spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)},
            relative_to=Path(relative_to) if relative_to is not None else None,
        )
        for key, spec in definition.mcp_servers.items()
    }
    try:
        for key, server in [*named.items(), *((server.name, server) for server in servers)]:
            server.start()
            started.append(server)
            offered = {tool.name for tool in server.tools()}
            declared = {name: tool.mcp_server for name, tool in definition.tools.items()}
            mine = [  # what it serves that is still missing; and what is declared as its, served or not (an error)
                name
                for name in needed
                if name not in hooks.tools
                and (declared.get(name) == key or (name in offered and declared.get(name) is None))
            ]
            register(hooks, server, mine)
    except BaseException:
        for server in started:
            server.close()
        raise
    return started
