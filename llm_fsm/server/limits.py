"""The request body's limits, checked before any route reads the body: a body longer than the server's
``max_body`` is refused (413), whether the request says its length or not, and one whose JSON nests objects
and lists more than :data:`MAX_JSON_DEPTH` levels deep (400: Python's parser would run out of stack on it,
and no request needs it)."""

from __future__ import annotations

import itertools
import re

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llm_fsm.server.errors import OPENAI_PREFIX, APIError, body_for, invalid_body

DEFAULT_MAX_BODY = 64 * 1024
MAX_JSON_DEPTH = 64  # levels of objects and lists in a request body (a context value nests within it)
TOO_DEEP = (
    f"the body's JSON nests objects and lists more than {MAX_JSON_DEPTH} levels deep: "
    f"the server reads {MAX_JSON_DEPTH} at most"
)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string: its brackets are text
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_STEP = tuple(1 if byte in b"[{" else -1 for byte in range(256))  # a bracket's change of depth


def too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body``, as JSON, nests objects and lists more than ``limit`` levels deep. Its bytes are read
    as they came (UTF-8 never puts an ASCII byte inside another character), each step in C: the strings
    dropped, then the brackets' running depth."""
    if body.count(b"[") + body.count(b"{") <= limit:  # the usual body: too few brackets to nest that deep
        return False
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


class BodyLimit:
    """Refuse a request body longer than ``limit`` bytes (413), whether it says its length or not."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, send, int(declared) if declared.isdigit() else None)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(scope, send, None)
                return
        if too_deep(body):
            await _answer(scope, send, invalid_body(scope["path"], TOO_DEEP))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, size: int | None) -> None:
        """The 413, naming the body's size (None: more than the limit, its length not said), the limit and
        the option that sets it."""
        how_long = f"is {size} bytes, more than" if size is not None else "is longer than"
        message = (
            f"the request body {how_long} the server's limit of {self.limit} bytes "
            "(--max-body of llm-fsm serve, max_body of create_app)"
        )
        if scope["path"].startswith(OPENAI_PREFIX):
            message += (
                ": a chat client resends the whole conversation with each message, so a long chat needs a larger one"
            )
        await _answer(scope, send, APIError(413, "request_too_large", message))


async def _answer(scope: Scope, send: Send, error: APIError) -> None:
    """Answer ``error`` before the app sees the request, in the shape of the route asked."""
    await JSONResponse(body_for(scope["path"], error), status_code=error.status)({"type": "http"}, _nothing, send)


async def _nothing() -> Message:  # pragma: no cover (a JSON response reads nothing)
    return {"type": "http.disconnect"}
