"""The editor's local server: the page, and the JSON API it edits one file through.

It listens on 127.0.0.1 only, and still trusts nobody who cannot show the token minted for this run: a web
page the author has open elsewhere can send requests to localhost, and the API reads and writes a file.

- ``GET /?token=T`` with the right token sets the cookie ``llm_fsm_editor_PORT`` (HttpOnly, SameSite=Strict) and
  redirects to ``/``, which serves the page to whoever has the cookie. Without it, a short plain page says
  to open the address ``llm-fsm edit`` printed; it never holds the file's content.
- Every ``/api/*`` route needs the cookie (or ``Authorization: Bearer T``): 401 otherwise.
- The ``Host`` header must be ``127.0.0.1:PORT`` or ``localhost:PORT``: a name the attacker's DNS points at
  127.0.0.1 (DNS rebinding) is refused with 403, however the request came.
- A POST must say ``Content-Type: application/json`` (a form cannot) and, when it has an ``Origin``, come from
  this server's own origin: 403 otherwise.
- The page's files under ``/static/`` need no token (they hold no data); like the page, they get the
  security headers of ``serve``'s page (scripts from this server only, no inline script, no ``eval``).

Errors are ``{"error": {"code", "message"}}``, with a status that says which kind; never a traceback.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from llm_fsm.editor.catalog import catalog
from llm_fsm.editor.checks import check
from llm_fsm.editor.document import Conflict, EditedFile, EditorFileError, LayoutError
from llm_fsm.editor.refusal import Refused
from llm_fsm.editor.tryit import ClientFactory, TryIt
from llm_fsm.hooks import Hooks
from llm_fsm.server.page import COMMON_HEADERS, PAGE_HEADERS

logger = logging.getLogger("llm_fsm.editor")

STATIC = Path(__file__).parent / "static"
COOKIE = "llm_fsm_editor"


def cookie_name(port: int | None) -> str:
    """``llm_fsm_editor_PORT``: a browser keeps cookies by host, not port, so two editors open at once (two
    ports of 127.0.0.1) would overwrite each other's under one name, and the first page would lose its access."""
    return COOKIE if port is None else f"{COOKIE}_{port}"


# What / serves when the page's files are not installed (a checkout without them): text only, no data.
_MISSING_PAGE = (
    "<!doctype html>\n<title>llm-fsm edit</title>\n"
    "<p>The editor's page is not installed: llm_fsm/editor/static/index.html is missing.</p>\n"
)


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}, **extra}, status, headers=COMMON_HEADERS)


@functools.cache
def packaged_schema() -> Any:
    """The JSON Schema of definitions, as ``llm-fsm schema`` prints it (``schema/fsm.schema.json``)."""
    from llm_fsm.definition.json_schema import json_schema

    return json.loads(json.dumps(json_schema(), ensure_ascii=False))


class _Static(StaticFiles):
    """The page's files, with the page's headers; a missing one is the API's JSON 404."""

    async def get_response(self, path: str, scope: Any) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response


class _Editing:
    """What the API shares between requests: the file, the text the page's edits are rendered over (the file's
    text when the page last read or saved it), and the chat."""

    def __init__(self, file: EditedFile, tryit: TryIt, hooks: Hooks, model: str, *, bind: bool = False) -> None:
        self.file = file
        self.tryit = tryit
        self.hooks = hooks
        self.bound_hooks = hooks if bind else None  # the hooks checks bind the definition to (given ones only)
        self.model = model
        self.base_text: str | None = None
        self._read = False  # whether the page read the file yet: until then, edits render over the disk's text
        # Whether the file was on disk when this editor last read or saved it: a file that was and is not any more
        # is "gone" (moved or deleted), which the page must not mistake for a new file and save empty over.
        self._existed = False
        self._lock = threading.Lock()

    def _base(self) -> str | None:
        with self._lock:
            if not self._read:
                snapshot = self.file.read()
                self.base_text, self._read, self._existed = snapshot.text, True, snapshot.exists
            return self.base_text

    def opened(self) -> dict[str, Any]:
        snapshot = self.file.read()
        with self._lock:
            gone = self._existed and not snapshot.exists
            if not gone:  # gone: the text it held stays the base, so writing it again keeps its format
                self.base_text, self._existed = snapshot.text, snapshot.exists
            self._read = True
        text = snapshot.text or ""
        value, parse_error = None, None
        if snapshot.problem is not None:
            parse_error = _diagnostic("encoding", snapshot.problem, self.file.shown)
        elif text.strip():
            try:
                value = json.loads(text.removeprefix("\ufeff"))
            except (ValueError, RecursionError):
                found = check(text, self.file.shown)
                parse_error = found[0] if found else _diagnostic("json", "the file is not JSON", self.file.shown)
        layout = self.file.read_layout()
        return {
            "path": self.file.shown,
            "name": self.file.name,
            "exists": snapshot.exists,
            "gone": gone,
            "text": text,
            "value": value,
            "parse_error": parse_error,
            "sha": snapshot.sha,
            "layout": layout.positions,
            "layout_direction": layout.direction,
            "layout_problem": layout.problem,
            "schema": packaged_schema(),
            "catalog": catalog(self.hooks, value),
            "model": self.model,
        }

    def rendered(self, value: Any) -> str:
        return self.file.render(value, self._base())

    def checked(self, value: Any) -> dict[str, Any]:
        base = self._base()
        text = self.file.render(value, base)
        diagnostics = check(text, self.file.shown, value, hooks=self.bound_hooks)
        return {"text": text, "changed": text != (base or ""), "diagnostics": diagnostics}

    def saved(self, value: Any, sha: Any, force: Any) -> dict[str, Any]:
        if not isinstance(sha, str):
            raise Refused(400, "invalid_request", "'sha' must be the sha the file was read with (a string)")
        if not isinstance(force, bool):
            raise Refused(400, "invalid_request", "'force' must be true or false")
        outcome = self.file.save(value, sha, force, base_text=self._base())
        if isinstance(outcome, Conflict) and outcome.missing:
            message = (
                f"{self.file.shown} is no longer on disk (moved or deleted): save it again here (overwrite) "
                "to write it anew, or keep editing"
            )
            raise Refused(409, "missing_on_disk", message, sha="")
        if isinstance(outcome, Conflict):
            message = (
                f"{self.file.shown} changed on disk since it was read: reload it (your edits are lost) "
                "or overwrite it (its change is lost)"
            )
            raise Refused(409, "changed_on_disk", message, sha=outcome.sha)
        with self._lock:
            self.base_text, self._read, self._existed = outcome.text, True, True
        return {"sha": outcome.sha, "text": outcome.text, "unchanged": outcome.unchanged}


def _diagnostic(code: str, message: str, file: str) -> dict[str, Any]:
    return {
        "severity": "error", "code": code, "file": file, "path": "", "line": None, "column": None,
        "message": message, "hint": None, "element": {"kind": "definition"},
    }  # fmt: skip


def create_editor_app(
    file: EditedFile,
    token: str,
    *,
    port: int | None,
    client_factory: ClientFactory | None = None,
    model: str = "simulated",
    hooks: Hooks | None = None,
    conversation_options: dict[str, Any] | None = None,
) -> FastAPI:
    """The editor of ``file`` behind ``token``, answering at ``127.0.0.1:port`` / ``localhost:port`` (``port``
    None: at any port of those names, for a server whose port is chosen after the app is made, as in tests).

    ``client_factory`` makes the chat's model for each definition tried (default: the simulated model of
    it); ``model`` is its name, shown on the page; ``hooks`` provide the handlers, checks and tools. Given
    hooks (``--hooks``; None: none given) are also what ``/api/check`` binds the definition to, as ``chat``
    would: a name they do not provide is a problem then, and only then."""
    given = hooks is not None
    hooks = hooks if hooks is not None else Hooks()
    tryit = TryIt(file.shown, client_factory, hooks, conversation_options=conversation_options)
    editing = _Editing(file, tryit, hooks, model, bind=given)
    guard = _Guard(token, port)
    application = FastAPI(title="llm-fsm edit", docs_url=None, redoc_url=None, openapi_url=None)
    application.state.editing = editing
    application.middleware("http")(guard)
    _answer_errors(application)
    application.add_api_route("/", guard.page, methods=["GET", "HEAD"])
    _add_api(application, editing)
    application.mount("/static", _Static(directory=STATIC, check_dir=False), name="static")
    return application


class _Guard:
    """Who may use the editor: the rules of the module's docstring, checked before any route runs."""

    NAMES = ("127.0.0.1", "localhost")

    def __init__(self, token: str, port: int | None) -> None:
        self.token = token
        self.port = port
        self.cookie = cookie_name(port)

    def allowed(self, host: str) -> bool:
        """A ``Host`` header naming this server by its loopback name (and its port, when known)."""
        name, _, number = host.rpartition(":")
        if name not in self.NAMES:
            return False
        return number == str(self.port) if self.port is not None else number.isdigit()

    def holds_token(self, request: Request) -> bool:
        given = request.cookies.get(self.cookie)
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if not given and scheme.lower() == "bearer":
            given = bearer.strip()
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def refusal(self, request: Request, api: bool) -> Response | None:
        """The answer to a request that may not go on, else None."""
        host = request.headers.get("host", "").lower()
        if not self.allowed(host):
            where = f"http://127.0.0.1:{self.port or 'PORT'}/"
            message = f"this editor answers only at {where} (the address llm-fsm edit printed)"
            return error_response(403, "forbidden_host", message) if api else _plain(403, message)
        if request.method == "POST":
            kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return error_response(403, "forbidden", "a request to the editor must send JSON (application/json)")
            origin = request.headers.get("origin")
            if origin is not None and origin.lower() != f"http://{host}":
                return error_response(403, "forbidden_origin", f"requests from {origin} may not use this editor")
        if api and not self.holds_token(request):
            message = "open the address llm-fsm edit printed (with its ?token=...) to use the editor"
            return error_response(401, "unauthorized", message)
        return None

    async def __call__(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        api = request.url.path == "/api" or request.url.path.startswith("/api/")
        refused = self.refusal(request, api)
        if refused is not None:
            return refused
        response = await call_next(request)
        if api:
            response.headers.update(COMMON_HEADERS)
        return response

    async def page(self, request: Request) -> Response:
        """``/?token=T``: the cookie, and on to ``/``; ``/`` with the cookie: the page; else a short refusal."""
        given = request.query_params.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return _plain(403, "this address holds an old or wrong token: open the address llm-fsm edit printed")
            moved = RedirectResponse("/", 303, headers=COMMON_HEADERS)
            moved.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return moved
        if not self.holds_token(request):
            return _plain(403, "open the address llm-fsm edit printed (http://127.0.0.1:PORT/?token=...)")
        index = STATIC / "index.html"
        if not index.is_file():
            return HTMLResponse(_MISSING_PAGE, headers=PAGE_HEADERS)
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


def _answer_errors(application: FastAPI) -> None:
    """Every failure as ``{"error": {"code", "message"}}``: never a traceback, never HTML."""

    async def refused(request: Request, exc: Exception) -> Response:
        if isinstance(exc, Refused):
            return error_response(exc.status, exc.code, exc.message, **exc.extra)
        if isinstance(exc, EditorFileError):
            return error_response(500, "file_error", str(exc))
        if isinstance(exc, StarletteHTTPException):
            codes = {404: "not_found", 405: "method_not_allowed"}
            return error_response(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))
        logger.exception("the editor failed on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", f"the editor failed: {type(exc).__name__}: {exc}")

    for kind in (Refused, EditorFileError, StarletteHTTPException, Exception):
        application.add_exception_handler(kind, refused)


def _add_api(application: FastAPI, editing: _Editing) -> None:
    """The routes under ``/api/``; each reads its JSON body with :func:`_body` and works in a thread."""

    @application.get("/api/file")
    def read_file() -> dict[str, Any]:
        return editing.opened()

    @application.post("/api/check")
    async def check_value(request: Request) -> dict[str, Any]:
        body = await _body(request, "value")
        return await run_in_threadpool(editing.checked, body["value"])

    @application.post("/api/save")
    async def save(request: Request) -> dict[str, Any]:
        body = await _body(request, "value", "sha")
        return await run_in_threadpool(editing.saved, body["value"], body["sha"], body.get("force", False))

    @application.post("/api/layout")
    async def layout(request: Request) -> dict[str, Any]:
        body = await _body(request, "positions")
        given = {"direction": body["direction"]} if "direction" in body else {}  # absent: the file's is kept
        try:
            await run_in_threadpool(editing.file.write_layout, body["positions"], **given)
        except LayoutError as exc:
            raise Refused(400, "invalid_layout", str(exc)) from None
        return {"ok": True}

    @application.post("/api/chat/start")
    async def chat_start(request: Request) -> dict[str, Any]:
        body = await _body(request, "value")

        def start() -> dict[str, Any]:
            value = body["value"]
            return editing.tryit.start(value, body.get("state"), body.get("context"), text=editing.rendered(value))

        return await run_in_threadpool(start)

    @application.post("/api/chat/send")
    async def chat_send(request: Request) -> dict[str, Any]:
        body = await _body(request, "text")
        return await run_in_threadpool(editing.tryit.send, body["text"])


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity (Python's reader takes them): a value holding one could not be saved as JSON."""
    raise ValueError(f"{name} is not a JSON number")


def _plain(status: int, message: str) -> PlainTextResponse:
    return PlainTextResponse(message + "\n", status, headers=PAGE_HEADERS)


async def _body(request: Request, *required: str) -> dict[str, Any]:
    """The request's JSON object, with each ``required`` member; :class:`Refused` (400) saying what is wrong."""
    raw = await request.body()
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise Refused(400, "invalid_request", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Refused(400, "invalid_request", "the body must be a JSON object")
    missing = [name for name in required if name not in body]
    if missing:
        raise Refused(400, "invalid_request", f"the body needs {', '.join(repr(m) for m in missing)}")
    return body
