"""The request body's limit: a body longer than the server's ``max_body`` is refused (413) before any
route reads it, whether the request says its length or not."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llm_fsm.server.errors import APIError, body_for

DEFAULT_MAX_BODY = 64 * 1024


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
            await self._refuse(scope, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(scope, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        error = APIError(413, "request_too_large", f"the request body is longer than {self.limit} bytes")
        await JSONResponse(body_for(scope["path"], error), status_code=413)({"type": "http"}, _nothing, send)


async def _nothing() -> Message:  # pragma: no cover (a JSON response reads nothing)
    return {"type": "http.disconnect"}
