"""The caller's side of an MCP server: start it, call its tools from sync or async code, bring it back
when it died (with a backoff), close it. The background thread's side is in :mod:`~llm_fsm.tools.mcp.session`."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import shlex
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_fsm.tools.mcp.errors import MCPError, MCPToolError, one_line
from llm_fsm.tools.mcp.session import GRACE, Session, StderrTail, import_sdk, quiet_sdk_logging
from llm_fsm.tools.mcp.spec import server_options
from llm_fsm.tools.mcp.wire import MCPTool

_CLOSE_WAIT = 15.0  # the SDK's stdio shutdown takes at most ~6 s: stdin closed, SIGTERM, SIGKILL
_RESTART_FIRST = 1.0  # seconds between the first and the second restart of a server that keeps dying
_RESTART_MAX = 30.0  # the longest wait between two restarts: a server that comes back is used soon
_live: weakref.WeakSet[MCPServer] = weakref.WeakSet()
logger = logging.getLogger("llm_fsm.tools.mcp")  # the name it had as one module


@dataclass
class Backoff:
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


class MCPServer(Session):
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
        self._backoff = Backoff()
        self._session: Any = None
        self._accepting = False
        self._restarting = False  # a restart is under way (under _start_lock): callers wait for its end
        self._failure: str | None = None  # why calls fail now: the server exited, its connection broke, or was closed
        self._tools: dict[str, MCPTool] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self._stderr: StderrTail | None = None
        self._scope: Any = None  # the anyio cancel scope of the session's task, while connecting

    @classmethod
    def from_spec(cls, spec: str | Mapping[str, Any], *, relative_to: Path | None = None) -> MCPServer:
        """``"python server.py"``, ``"http://..."``, or ``{"command": [...], "env": {...}}`` / ``{"url": ...}``.

        ``{"command": "npx", "args": [...]}`` (the usual MCP client config) works too. A stdio server
        runs in ``relative_to`` (a folder, or a file's folder) unless ``cwd`` says otherwise, so a
        definition can name ``server.py`` next to itself.
        """
        options = server_options(spec, relative_to)
        try:
            return cls(options.pop("command", None), **options)
        except (TypeError, ValueError) as exc:  # a wrong type or value in the spec: say which, in one line
            raise MCPError(f"invalid MCP server spec: {one_line(str(exc))}") from None

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, {self._state})"

    def __enter__(self) -> MCPServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        if self._restarting:  # the new session is not ready yet: a call now would find nobody to answer it
            return self._failure or f"the MCP server '{self.name}' is restarting"
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
        import_sdk()
        quiet_sdk_logging()
        self._failure, self._tools, self._stderr = None, {}, None
        self._loop, self._stop, self._lost = asyncio.new_event_loop(), asyncio.Event(), asyncio.Event()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"mcp {self.name}", daemon=True)
        self._accepting = True
        self._thread.start()
        try:
            ready.result(self.timeout + GRACE)
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
        self._restarting = True  # down until the new session is ready: other callers wait on _start_lock
        try:
            self._open()
        except MCPError as exc:
            self._state, self._failure = "down", str(exc)
            logger.warning("%s", self._failure)
            return self._failure
        finally:
            self._restarting = False
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
            return future.result(limit + GRACE)
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


@atexit.register
def _close_all() -> None:
    """At interpreter exit: stop the servers nobody closed, so no child process outlives us."""
    for server in list(_live):
        with contextlib.suppress(Exception):
            server.close()
