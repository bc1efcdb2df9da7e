"""What the HTTP API answers when a request fails: JSON with a stable ``type``, a message and a status.

Every error body is ``{"error": {"type": ..., "message": ..., "status": ...}}`` (plus ``problems`` for a
definition error, ``errors`` for a malformed request). Messages name what went wrong and where; they
never carry a traceback. An error the server did not expect is logged and answered with
``internal_error`` and no detail.

===========================  ======  ==========================================================
type                         status  when
===========================  ======  ==========================================================
``invalid_request``          400     the body is not JSON, or not the shape the route takes (or its context lacks
                                     a key the state's opening reads)
``unauthorized``             401     no bearer token, or one the server does not know
``not_found``                404     no such route, definition or conversation (for this client)
``method_not_allowed``       405     the route exists, not with this method
``busy``                     409     another turn holds the conversation (``--busy reject``, or the wait ran out)
``conversation_paused``      409     a message to a paused conversation: resume it first
``resume_refused``           409     the token is not the pending one, was used, or nothing is paused
``conversation_conflict``    409     the conversation cannot take this call now (e.g. started twice)
``conversation_ended``       410     the conversation reached a terminal state
``request_too_large``        413     the body is longer than the server's limit
``empty_message``            422     the user's message is empty or only whitespace: no turn ran
``definition_error``         422     the definition cannot run (``problems`` lists why), or changed
                                     since the stored conversation began
``idempotency_key_reused``   422     the ``Idempotency-Key`` came before with another request
``internal_error``           500     a bug or a handler that failed; the server's log has the details
``provider_error``           502     the model's provider failed or refused the request
``provider_timeout``         504     the model's provider did not answer in time
``store_unavailable``        503     the conversation store cannot be reached or read
===========================  ======  ==========================================================
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llm_fsm.errors import (
    ConflictError,
    ContextValueError,
    ConversationEnded,
    ConversationError,
    ConversationPaused,
    DefinitionError,
    EmptyMessageError,
    FSMError,
    HandlerError,
    IdempotencyKeyReused,
    LLMAuthError,
    LLMContextWindowError,
    LLMError,
    LLMRequestError,
    LLMUnavailableError,
    OpeningError,
    RefinementError,
    ResumeError,
    RunLimitError,
    StoreError,
)

logger = logging.getLogger("llm_fsm.server")

_TIMEOUT_NAMES = frozenset({"Timeout", "APITimeoutError", "ReadTimeout", "ConnectTimeout", "TimeoutException"})


class APIError(Exception):
    """An error the API answers as JSON: ``status``, a stable ``type`` and a message (and any ``extra`` fields)."""

    def __init__(self, status: int, type: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}  # the response's headers (the conversation an error is about...)

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "status": self.status, **self.extra}}

    def openai_body(self) -> dict[str, Any]:
        """The error in OpenAI's shape (the ``/v1`` routes): ``type`` OpenAI's kind of error, ``code`` ours
        (``not_found``, ``busy``...; ``model_not_found`` for an unknown model), ``param`` the field at fault."""
        param = self.extra.get("param")
        kind = "server_error" if self.status >= 500 else _OPENAI_KINDS.get(self.status, "invalid_request_error")
        code = "model_not_found" if param == "model" and self.status == 404 else self.type
        return {"error": {"message": self.message, "type": kind, "param": param, "code": code}}


_OPENAI_KINDS = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
OPENAI_PREFIX = "/v1/"  # the OpenAI-compatible routes, whose errors take OpenAI's shape


def body_for(path: str, error: APIError) -> dict[str, Any]:
    """The error's body for a request to ``path``: OpenAI's shape under ``/v1/``, else ours."""
    return error.openai_body() if path.startswith(OPENAI_PREFIX) else error.body()


def not_found(what: str) -> APIError:
    return APIError(404, "not_found", what)


def from_fsm_error(error: FSMError) -> APIError:
    """The API error for an error of the runtime: the first kind in ``_BY_KIND`` it is."""
    for kind, answer in _BY_KIND:
        if isinstance(error, kind):
            return answer(error)
    logger.error("unexpected runtime error: %s", error, exc_info=error)
    return APIError(500, "internal_error", "internal error")


def _definition_error(error: Any) -> APIError:
    problems = [str(problem) for problem in error.problems]
    return APIError(422, "definition_error", f"the definition cannot run: {'; '.join(problems)}", problems=problems)


def _model_call_failed(error: Any) -> APIError:
    logger.warning("model call failed: %s", error)  # the provider's own words, which may name hosts: logged only
    return _provider_error(error)


def _store_error(error: Any) -> APIError:
    logger.error("store error: %s", error)
    return APIError(503, "store_unavailable", "the conversation store cannot be used now")


def _handler_error(error: Any) -> APIError:
    logger.error("%s", error, exc_info=error)
    return APIError(500, "internal_error", f"handler '{error.name}' failed at '{error.timing}'")


# each kind of runtime error and its API error, in the order they are tried (a subclass before its base)
_BY_KIND: tuple[tuple[Any, Callable[[Any], APIError]], ...] = (
    (
        ConflictError,
        lambda e: APIError(409, "busy", "another turn of this conversation is in progress: try again later"),
    ),
    (ConversationEnded, lambda e: APIError(410, "conversation_ended", str(e), state=e.state)),
    (
        ConversationPaused,
        lambda e: APIError(409, "conversation_paused", str(e).replace("call resume()", "resume it"), state=e.state),
    ),
    (ResumeError, lambda e: APIError(409, "resume_refused", str(e), state=e.state)),
    (DefinitionError, _definition_error),
    (  # as the IETF draft on the Idempotency-Key header says
        IdempotencyKeyReused,
        lambda e: APIError(422, "idempotency_key_reused", str(e).replace("idempotency key", "Idempotency-Key")),
    ),
    (EmptyMessageError, lambda e: APIError(422, "empty_message", str(e))),
    (RunLimitError, lambda e: APIError(409, "run_limit", _run_limit_message(e), state=e.state, limit=e.limit)),
    (ConversationError, lambda e: APIError(409, "conversation_conflict", str(e), state=e.state)),
    (LLMError, _model_call_failed),
    (
        RefinementError,
        lambda e: APIError(502, "provider_error", f"the model's replies kept failing the state's checks: {e}"),
    ),
    (StoreError, _store_error),
    (
        ContextValueError | OpeningError,
        lambda e: APIError(400, "invalid_request", str(e)),
    ),  # the context lacks what the opening reads
    (HandlerError, _handler_error),
)


def _run_limit_message(error: RunLimitError) -> str:
    """The runtime's message, with the advice a client of the HTTP API can follow."""
    return str(error).replace("run it again to go on", "POST /conversations/{id}/run goes on")


def _provider_error(error: LLMError) -> APIError:
    """What a client is told of a failed model call: its kind, not the provider's text (hosts, models, keys)."""
    tries = f" after {error.attempts} attempt{'s' if error.attempts != 1 else ''}"
    if is_timeout(error):
        return APIError(504, "provider_timeout", "the model's provider did not answer in time" + tries)
    if isinstance(error, LLMAuthError):
        message = "the model's provider refused the server's credentials"
    elif isinstance(error, LLMContextWindowError):
        message = "the conversation's prompt is longer than the model's context window"
    elif isinstance(error, LLMRequestError):
        message = "the model's provider refused the request"
    elif isinstance(error, LLMUnavailableError):
        message = "the model's provider is unavailable (overloaded, rate-limited or unreachable)" + tries
    else:
        message = "the model call failed"
    return APIError(502, "provider_error", message + "; the server's log has the provider's answer")


def is_timeout(error: BaseException) -> bool:
    """Whether a model call failed because the provider did not answer in time (its cause, at any depth)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError) or type(current).__name__ in _TIMEOUT_NAMES:
            return True
        if getattr(current, "status_code", None) in (408, 504):
            return True
        current = getattr(current, "cause", None) or current.__cause__
    return False


def api_error(error: BaseException) -> APIError:
    """The API error for any error of a request (an unexpected one is logged: its text may hold secrets)."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, FSMError):
        return from_fsm_error(error)
    logger.error("unexpected error in a turn: %s", error, exc_info=error)
    return APIError(500, "internal_error", "internal error")


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error as the JSON body above: ours, the runtime's, FastAPI's and unexpected ones."""

    async def on_api_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, APIError)
        headers = {**error.headers, **({"WWW-Authenticate": "Bearer"} if error.status == 401 else {})}
        if error.status == 409 and request.url.path.startswith(OPENAI_PREFIX):
            # OpenAI's SDKs retry a 409 unless told not to; a paused or busy conversation answers the same again
            headers["x-should-retry"] = "false"
        return JSONResponse(body_for(request.url.path, error), status_code=error.status, headers=headers)

    async def on_fsm_error(request: Request, error: Exception) -> JSONResponse:
        return await on_api_error(request, api_error(error))

    async def on_invalid(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = [_problem(e) for e in error.errors()]
        summary = "; ".join(f"{p['where']}: {p['message']}" if p["where"] else p["message"] for p in problems)
        extra: dict[str, Any] = {"errors": problems}
        if request.url.path.startswith(OPENAI_PREFIX):  # OpenAI's shape names the field at fault, not a list
            extra = {"param": problems[0]["where"].removeprefix("body.") if problems else None}
        return await on_api_error(request, APIError(400, "invalid_request", f"invalid request: {summary}", **extra))

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        status = error.status_code
        if status == 400:  # a body FastAPI could not parse: not UTF-8, a number too long...
            return await on_api_error(request, invalid_body(request.url.path, _unparsed(error.__cause__)))
        kinds = {404: "not_found", 405: "method_not_allowed"}
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return await on_api_error(
            request, APIError(status, kinds.get(status, "http_error"), message.get(status, str(error.detail)))
        )

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=error)
        return JSONResponse(
            body_for(request.url.path, APIError(500, "internal_error", "internal error")), status_code=500
        )

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(FSMError, on_fsm_error)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


def invalid_body(path: str, message: str) -> APIError:
    """The 400 for a body that cannot be read, for a request to ``path``: ``errors`` names the body, or, in
    OpenAI's shape, ``param``."""
    extra: dict[str, Any] = {"param": "body"}
    if not path.startswith(OPENAI_PREFIX):
        extra = {"errors": [{"where": "body", "message": message}]}
    return APIError(400, "invalid_request", f"invalid request: body: {message}", **extra)


def _unparsed(cause: BaseException | None) -> str:
    """Why a body could not be read (FastAPI says only "There was an error parsing the body"). Its nesting
    is bounded before it is parsed (:mod:`llm_fsm.server.limits`): what is left is its encoding and numbers
    too long for Python to convert."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not UTF-8 text at byte {cause.start}: send JSON encoded as UTF-8"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        limit = sys.get_int_max_str_digits()
        return f"a number in the body's JSON has more than {limit} digits: the server reads {limit} at most"
    if isinstance(cause, RecursionError):  # the nesting limit is below Python's: not expected
        return "the body's JSON nests objects and lists too deeply"
    return "the body cannot be read as JSON"


def _problem(error: Mapping[str, Any]) -> dict[str, str]:
    """One problem of a request, where it is (``body.message``) and what is wrong; never the value sent."""
    location = [str(part) for part in error["loc"]]
    if error.get("type") == "json_invalid":  # ("body", position)
        reason = (error.get("ctx") or {}).get("error", "")
        where = f" at character {location[1]}" if len(location) > 1 else ""
        return {"where": "body", "message": f"the body is not valid JSON{where}" + (f" ({reason})" if reason else "")}
    return {"where": ".".join(location), "message": str(error["msg"])}
