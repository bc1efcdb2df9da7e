"""The web page at ``/``: plain HTML, CSS and JavaScript from ``static/`` (no build step), with Mermaid vendored.

The page and its files hold no data, so they are served without a token (as ``/docs`` is); the page
then calls the API with the token the user types, as a bearer header. Its Content-Security-Policy lets
scripts come only from this server (no inline script, no ``eval``) and the page talk only to it;
styles may be inline because Mermaid writes a ``<style>`` into each graph it draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
# Every file is checked again on each load (its ETag makes that cheap), so an upgraded server's page is the one shown.
COMMON_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache", "Referrer-Policy": "no-referrer"}
PAGE_HEADERS = {**COMMON_HEADERS, "Content-Security-Policy": CSP, "X-Frame-Options": "DENY"}


class _Static(StaticFiles):
    """The page's files, with the headers every one of them gets; anything else is the API's JSON 404."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(COMMON_HEADERS)
        return response


def add_page(app: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/static/``, both left out of the OpenAPI document."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> Any:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    app.mount("/static", _Static(directory=STATIC), name="static")
