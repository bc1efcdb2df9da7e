"""The errors of MCP servers and calls, and how a failure the SDK raised is told apart and worded in one line."""

from __future__ import annotations

import asyncio
import re

from llm_fsm.errors import FSMError


class MCPError(FSMError):
    """An MCP server cannot be started, reached or kept (connection-level)."""


class MCPToolError(FSMError):
    """One tool call failed: the tool reported an error, did not answer in time, or does not exist."""

    def __init__(self, message: str, *, tool: str | None = None, server: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.server = server


CONNECTION_CLOSED = -32000  # the SDK's error code when the transport ends
_INVALID_REQUEST = -32600
_SESSION_GONE = re.compile(r"\bsession (not found|terminated|expired)\b", re.IGNORECASE)


def session_gone(exc: BaseException) -> bool:
    """Whether an HTTP server no longer knows our session (HTTP 404): it restarted, or dropped it.

    The spec tells the client to start a new session then; the SDK reports the 404 as an
    invalid-request error whose message is the only thing telling it apart from other such errors.
    """
    return error_code(exc) == _INVALID_REQUEST and bool(_SESSION_GONE.search(str(exc)))


def root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup):
        real = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (real or list(exc.exceptions))[0]
    return exc


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of the SDK's error (``McpError`` in 1.x, ``MCPError`` in 2.x), else None."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return code if isinstance(code, int) else None


def is_closed_stream(exc: BaseException) -> bool:
    import anyio

    return isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, EOFError))


def os_error(exc: OSError, executable: str) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename not in (None, executable):
        return f"no such folder '{exc.filename}'"
    if isinstance(exc, FileNotFoundError):
        return f"no such command '{executable}'"
    if isinstance(exc, PermissionError):
        return f"'{exc.filename or executable}' cannot be run (permission denied)"
    return exc.strerror or str(exc)


def describe(exc: BaseException) -> str:
    text = one_line(str(exc))
    if not text and is_closed_stream(exc):
        return "the connection closed"
    return text or type(exc).__name__


def one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
