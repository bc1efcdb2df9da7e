"""A provider's failure as one of our errors (:class:`~llm_fsm.errors.LLMError`'s kinds tell whether a
retry can help), in one line, without the API key or a URL's password."""

from __future__ import annotations

import re
from typing import Any

from llm_fsm.errors import (
    LLMAuthError,
    LLMContextWindowError,
    LLMError,
    LLMRequestError,
    LLMUnavailableError,
)
from llm_fsm.secrets import KEY_SHAPED, without_url_passwords


def provider_error(
    exc: Exception,
    attempt: int,
    *,
    model: str,
    api_base: str | None,
    api_key: str | None,
    timeout: float | None = None,
) -> LLMError:
    """``exc``, raised by litellm on the ``attempt``-th try of a call to ``model``, as our error; a timeout says
    the client's ``timeout`` it ran out of."""
    if isinstance(exc, LLMError):
        exc.attempts = attempt
        return exc
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    where = api_base or "the provider"
    if _cannot_connect(exc):
        message = f"{model}: cannot connect to {where}"
    elif name in ("Timeout", "APITimeoutError") and timeout is not None:
        message = f"{model} at {where}: no answer within the timeout of {timeout:g} s"
    else:
        message = f"{model} at {where}: {_without_prefixes(_first_line(exc))}"
    message = scrubbed(message, api_key)
    kwargs: dict[str, Any] = {"model": model, "status_code": status, "attempts": attempt, "cause": exc}
    if name == "ContextWindowExceededError":
        return LLMContextWindowError(message, **kwargs)
    if name in ("AuthenticationError", "PermissionDeniedError") or status in (401, 403):
        return LLMAuthError(message, **kwargs)
    if _is_transient(name, status):
        return LLMUnavailableError(message, **kwargs)
    return LLMRequestError(message, **kwargs)


def scrubbed(text: str, api_key: str | None) -> str:
    """``text`` without the API key (providers quote it back in auth errors) or anything shaped like one, nor
    the password of a URL (an ``api_base`` of ``https://user:PASSWORD@host``, or one an error quotes)."""
    text = without_url_passwords(text)
    if api_key and len(api_key) >= 8:  # a shorter "key" is a placeholder; replacing it mangles text
        text = text.replace(api_key, "***")
    return KEY_SHAPED.sub("***", text)


_TRANSIENT = {
    "Timeout",
    "APITimeoutError",
    "APIConnectionError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
}


def _is_transient(name: str, status: int | None) -> bool:
    return name in _TRANSIENT or status in (408, 409, 429) or (status is not None and status >= 500)


_PREFIXES = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")


def _without_prefixes(text: str) -> str:
    """A provider's message without litellm's class-name prefixes ("litellm.BadRequestError: ...")."""
    return _PREFIXES.sub("", text) or text


def _cannot_connect(exc: BaseException) -> bool:
    """Whether the connection itself failed (refused, unreachable, DNS), anywhere in the exception's chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ in _CONNECT_ERRORS:
            return True
        current = current.__cause__ or current.__context__
    return False


# httpx's and the socket layer's "no connection was made" (not a timeout or a dropped connection)
_CONNECT_ERRORS = {"ConnectError", "ConnectionRefusedError", "gaierror"}


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc or type(exc).__name__)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
