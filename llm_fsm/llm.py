"""The model layer: a small protocol, and its litellm implementation.

This is the only module that imports litellm, and it does so on the first call: importing litellm
takes seconds and, by default, fetches a cost map over the network. Before that import we set
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (unless the host application chose otherwise) so that no
import touches the network. Retries are ours: litellm gets ``max_retries=0`` so that no hidden
retry runs under ours, and we retry only what can succeed on a second try.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import re
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, Literal, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit

from llm_fsm import telemetry
from llm_fsm.errors import (
    LLMAuthError,
    LLMContextWindowError,
    LLMError,
    LLMRequestError,
    LLMUnavailableError,
)
from llm_fsm.secrets import KEY_SHAPED, without_url_passwords

Message = dict[str, Any]  # role and content; an assistant's may carry "tool_calls", a tool's "tool_call_id"
logger = logging.getLogger("llm_fsm.llm")  # retry notices (silent unless the application shows warnings)


@dataclass(frozen=True)
class Usage:
    """Tokens (and cost in USD when litellm knows the model's price) of one or more calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost, other.cost) if c is not None]
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            sum(costs) if costs else None,
        )


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for."""

    id: str  # the provider's call id ("call_<n>", n its position in the reply, when the provider gave none)
    name: str
    # the raw JSON text of the arguments as the model wrote them (may be invalid JSON: the runtime reports that)
    arguments: str


@dataclass(frozen=True)
class LLMRequest:
    """One model call. ``schema``/``strict_schema`` describe a valid reply (see ``contract.reply_schema``).

    ``kind`` (``reply``, ``judge``, or ``summary``: see ``llm_fsm.summaries``), ``state`` and ``context``
    describe the call for test doubles and recorders (the simulated model reads them); they are never
    sent to a provider. ``max_tokens`` bounds this call's completion (never above the client's own
    ``max_tokens``). ``longer``: the previous reply
    was cut off at the token limit, so a client with a ``max_tokens`` budget doubles it for this call.
    ``tools``: OpenAI function-tool specs (``{"type": "function", "function": {"name", "description",
    "parameters"}}``) and ``tool_choice`` (``"auto"``, ``"none"``, ``"required"``), sent to the provider
    only when the client calls tools natively (see ``LiteLLMClient.tool_mode``). ``back_to``: where a
    ``"$return"`` move of this state goes (the state the conversation came from), for test doubles too.
    ``definition``: the name of the definition ``state`` belongs to (a sub-conversation's, inside one).
    """

    messages: list[Message]
    schema: dict[str, Any] | None = None
    strict_schema: dict[str, Any] | None = None
    kind: Literal["reply", "judge", "summary"] = "reply"
    state: str | None = None
    context: dict[str, Any] | None = field(default=None, repr=False)
    longer: bool = False
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | None = None
    definition: str | None = None
    max_tokens: int | None = None  # a bound of this call's own (a summary's), under the client's
    back_to: str | None = None


@dataclass(frozen=True)
class LLMResponse:
    """The model's text (``""`` when it only called tools) and the tool calls it asked for, in order.

    ``finish_reason`` as the provider gave it: ``length`` means the text (or a tool call's arguments)
    was cut off; ``tool_calls`` that the model stopped to call tools. A provider may say ``stop`` with
    tool calls: a streamed reply reports that as ``tool_calls``, as litellm already does for the others.
    """

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    finish_reason: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()


@runtime_checkable
class LLMClient(Protocol):
    """What a conversation needs from a model: one completion, sync or async."""

    def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def acomplete(self, request: LLMRequest) -> LLMResponse: ...


@runtime_checkable
class StreamingLLMClient(LLMClient, Protocol):
    """A client that can also stream: text deltas, then the whole response."""

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]: ...

    def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]: ...


ResponseFormat = Literal["auto", "json_schema", "json_object", "none"]
ToolCalling = Literal["auto", "native", "json"]


def _import_litellm() -> ModuleType:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with _no_import_chatter():
        import litellm

    _keep_quiet(litellm)
    return cast(ModuleType, litellm)  # untyped for mypy (pyproject: litellm is not followed)


_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


@contextlib.contextmanager
def _no_import_chatter() -> Iterator[None]:
    """While litellm imports, its loggers drop records below WARNING: it logs DEBUG lines as it loads,
    through its own handler, which writes them to stdout before :func:`_keep_quiet` can remove it.
    A level the application set on those loggers is left alone."""
    if "litellm" in sys.modules:
        yield
        return
    held = [log for log in map(logging.getLogger, _LITELLM_LOGGERS) if log.level == logging.NOTSET]
    for log in held:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for log in held:
            log.setLevel(logging.NOTSET)


def _keep_quiet(litellm: ModuleType) -> None:
    """A library prints nothing: stop litellm's own output, so that what it says goes through ``logging``.

    litellm prints a coloured "Give Feedback / Get Help" banner on stdout for every failed call unless
    ``suppress_debug_info`` is set, and its loggers carry a handler of their own that writes to stdout
    (below WARNING) and stderr whatever the application configured. That handler is swapped for a
    ``NullHandler``, as llm_fsm's own logger has: records still reach the application's handlers.
    Both are process-wide settings of litellm's; idempotent.
    """
    setattr(litellm, "suppress_debug_info", True)  # noqa: B010 (a module global)
    own = getattr(getattr(litellm, "_logging", None), "handler", None)
    for name in _LITELLM_LOGGERS:
        log = logging.getLogger(name)
        if own is not None and own in log.handlers:
            log.removeHandler(own)
        if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
            log.addHandler(logging.NullHandler())


class LiteLLMClient:
    """Any provider litellm supports (``model`` as litellm names it, e.g. ``openai/gpt-4o-mini``).

    ``max_retries`` counts our retries after the first attempt, on timeouts, connection errors,
    429 and 5xx, with exponential backoff from ``backoff`` seconds, capped at ``max_backoff``.
    ``response_format``: ``auto`` asks for a strict JSON schema where litellm says the model
    supports one, else JSON mode where supported, else nothing. ``stream`` streams each call (with
    usage). ``tool_calling``: how tools reach the model (see :meth:`tool_mode`). litellm is kept
    quiet (no banners on stdout, its log records through ``logging`` only): ``quiet`` is accepted for
    compatibility and changes nothing. Further keyword arguments go to ``litellm.completion`` unchanged.
    """

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        *,
        temperature: float | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        response_format: ResponseFormat = "auto",
        tool_calling: ToolCalling = "auto",
        stream: bool = False,
        quiet: bool = True,
        guided: bool = False,
        **extra: Any,
    ) -> None:
        self.model = model
        self.guided = guided  # conversations give this model guided reply schemas (see llm_fsm.guided)
        self.api_base = api_base
        self.api_key = api_key
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.response_format = response_format
        self.tool_calling = tool_calling
        self.stream = stream
        self.quiet = quiet
        self.extra = extra
        self._litellm: ModuleType | None = None
        self._format_kind: str | None = None
        self._tool_mode: Literal["native", "json"] | None = None

    def __repr__(self) -> str:  # never shows the key
        api_base = without_url_passwords(self.api_base) if self.api_base else None
        return f"LiteLLMClient(model={self.model!r}, api_base={api_base!r})"

    def trace_attributes(self) -> dict[str, Any]:
        """How traces name this client's requests (GenAI conventions): provider, model, server, settings;
        never the key, and of ``api_base`` only the host and port."""
        provider, model = _provider_and_model(self.model)
        attributes: dict[str, Any] = {"gen_ai.provider.name": _GENAI_PROVIDERS.get(provider, provider)}
        attributes["gen_ai.request.model"] = model
        if self.api_base:
            where = urlsplit(self.api_base if "//" in self.api_base else f"//{self.api_base}")
            if where.hostname:
                attributes["server.address"] = where.hostname
                with contextlib.suppress(ValueError):  # a port that is not a number: none to name
                    if where.port:
                        attributes["server.port"] = where.port
        settings = {"temperature": self.temperature, **self.extra}
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            value = settings.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"gen_ai.request.{name}"] = value
        return attributes

    @property
    def litellm(self) -> ModuleType:
        if self._litellm is None:
            self._litellm = _import_litellm()
        return self._litellm

    # -- calls: each form is a short driver over the same attempts and the same stream reader ----

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.stream:
            return _last_response(self.stream_complete(request))
        for attempt in self._attempts():
            with attempt:
                return self._response(self.litellm.completion(**self._params(request, stream=False)))
            time.sleep(attempt.delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        if self.stream:
            return await _alast_response(self.astream_complete(request))
        for attempt in self._attempts():
            with attempt:
                return self._response(await self.litellm.acompletion(**self._params(request, stream=False)))
            await _sleep(attempt.delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        """Yield text deltas as they arrive, then the whole :class:`LLMResponse` (with usage).

        A failure before the first delta is retried like :meth:`complete`; after it, it is raised.
        """
        for attempt in self._attempts():
            with attempt:
                reader = iter(_StreamReader(self, self.litellm.completion(**self._params(request, stream=True))))
                with contextlib.closing(reader):  # closed now, not when collected, if our caller stops early
                    for item in reader:
                        yield attempt.passed(item)
                return
            time.sleep(attempt.delay)

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        """The async form of :meth:`stream_complete`."""
        for attempt in self._attempts():
            with attempt:
                chunks = await self.litellm.acompletion(**self._params(request, stream=True))
                reader = aiter(_StreamReader(self, chunks))
                async with contextlib.aclosing(reader):
                    async for item in reader:
                        yield attempt.passed(item)
                return
            await _sleep(attempt.delay)

    def _attempts(self) -> Iterator[_Attempt]:
        return (_Attempt(self, number) for number in range(1, self.max_retries + 2))

    def _params(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "timeout": self.timeout,
            "max_retries": 0,
            **self.extra,
        }
        for name in ("api_base", "api_key", "temperature"):
            if getattr(self, name) is not None:
                params[name] = getattr(self, name)
        if request.longer:
            for budget in ("max_tokens", "max_completion_tokens"):
                if isinstance(params.get(budget), int):
                    params[budget] *= 2
        if request.max_tokens is not None:  # never above the client's own budget
            ceiling = params.get("max_tokens")
            params["max_tokens"] = min(ceiling, request.max_tokens) if isinstance(ceiling, int) else request.max_tokens
        response_format = self._response_format(request)
        if response_format is not None:
            params["response_format"] = response_format
        if request.tools and self.tool_mode() == "native":
            params["tools"] = list(request.tools)
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
            if _has_mcp_gateway():
                # litellm (1.106 at least) checks tools for its proxy's MCP gateway, and that check imports
                # the optional `mcp` package, which litellm does not install: ModuleNotFoundError. Function
                # tools never name the gateway; litellm's own flag skips the check and is not sent on.
                params["_skip_mcp_handler"] = True
        if stream:
            params.update(stream=True, stream_options={"include_usage": True})
        return params

    def tool_mode(self) -> Literal["native", "json"]:
        """How this client offers tools: ``native`` sends them as the provider's ``tools`` parameter and
        reads the calls back from the response; ``json`` sends none (the prompt describes them and the
        reply's JSON asks for calls).

        ``tool_calling="native"`` or ``"json"`` forces the mode. ``"auto"`` is native exactly when
        ``litellm.supports_function_calling`` says so for ``model``. litellm answers False, without
        raising, for models it has no entry for, and that includes every ``openai/<name>`` served at an
        ``api_base`` (a local vLLM, llama.cpp, LM Studio or Ollama server): those get ``json``, because
        JSON in the prompt works with any server while ``tools`` fails outright (HTTP 400) on servers
        or models without tool support (vLLM started without ``--enable-auto-tool-choice``, Ollama
        models whose template has no tools). For such a server that does support tools, pass
        ``tool_calling="native"`` or describe the model to litellm with ``litellm.register_model``
        (``"supports_function_calling": True``). The answer is computed once per client.
        """
        if self._tool_mode is None:
            self._tool_mode = self._pick_tool_mode()
        return self._tool_mode

    def _pick_tool_mode(self) -> Literal["native", "json"]:
        if self.tool_calling != "auto":
            return self.tool_calling
        try:
            return "native" if self.litellm.supports_function_calling(model=self.model) else "json"
        except Exception:  # litellm documents raising for unknown models (1.106 returns False): the same answer
            return "json"

    def _response_format(self, request: LLMRequest) -> dict[str, Any] | None:
        kind = self._format_kind or self._pick_format()
        if kind == "json_schema" and request.strict_schema is not None:
            schema = {"name": "fsm_reply", "schema": request.strict_schema, "strict": True}
            return {"type": "json_schema", "json_schema": schema}
        if kind in ("json_schema", "json_object"):
            return {"type": "json_object"}
        return None

    def _pick_format(self) -> str:
        kind = self.response_format
        if kind == "auto":
            kind = "none"
            try:
                if self.litellm.supports_response_schema(model=self.model):
                    kind = "json_schema"
                elif "response_format" in (self.litellm.get_supported_openai_params(model=self.model) or ()):
                    kind = "json_object"
            except Exception:  # litellm raises for models it has no entry for: ask for nothing special
                kind = "none"
        self._format_kind = kind
        return kind

    # -- responses ------------------------------------------------------------------------------

    def _response(self, response: Any) -> LLMResponse:
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError("the provider returned no choices", model=self.model)
        message = choices[0].message
        text = message.content or ""
        finish = getattr(choices[0], "finish_reason", None)
        calls = tuple(_tool_call(call, n) for n, call in enumerate(getattr(message, "tool_calls", None) or ()))
        return LLMResponse(text, self._usage(response), getattr(response, "model", None), finish, calls)

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        hidden = getattr(response, "_hidden_params", None) or {}
        if usage is None:
            return Usage(cost=hidden.get("response_cost"))
        prompt = usage.prompt_tokens or 0
        completion = usage.completion_tokens or 0
        return Usage(prompt, completion, usage.total_tokens or prompt + completion, hidden.get("response_cost"))

    def _check_finished(self, finished: bool, parts: list[str]) -> None:
        """A stream that ends without a finish reason was cut off: its text (and tool calls) must not be used."""
        if not finished:
            received = sum(len(p) for p in parts)
            raise LLMUnavailableError(
                f"{self.model}: the stream ended before the reply was complete ({received} characters received)",
                model=self.model,
            )

    def _chunk_usage(self, chunk: Any) -> Usage | None:
        usage = getattr(chunk, "usage", None)
        if not usage or not getattr(usage, "total_tokens", None):
            return None
        return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0, usage.total_tokens)

    # -- errors ---------------------------------------------------------------------------------

    def _translate(self, exc: Exception, attempt: int) -> LLMError:
        if isinstance(exc, LLMError):
            exc.attempts = attempt
            return exc
        name = type(exc).__name__
        status = getattr(exc, "status_code", None)
        where = self.api_base or "the provider"
        if _cannot_connect(exc):
            message = f"{self.model}: cannot connect to {where}"
        else:
            message = f"{self.model} at {where}: {_without_prefixes(_first_line(exc))}"
        message = self._scrubbed(message)
        kwargs: dict[str, Any] = {"model": self.model, "status_code": status, "attempts": attempt, "cause": exc}
        if name == "ContextWindowExceededError":
            return LLMContextWindowError(message, **kwargs)
        if name in ("AuthenticationError", "PermissionDeniedError") or status in (401, 403):
            return LLMAuthError(message, **kwargs)
        if _is_transient(name, status):
            return LLMUnavailableError(message, **kwargs)
        return LLMRequestError(message, **kwargs)

    def _scrubbed(self, text: str) -> str:
        """``text`` without the API key (providers quote it back in auth errors) or anything shaped like one, nor
        the password of a URL (an ``api_base`` of ``https://user:PASSWORD@host``, or one an error quotes)."""
        text = without_url_passwords(text)
        if self.api_key and len(self.api_key) >= 8:  # a shorter "key" is a placeholder; replacing it mangles text
            text = text.replace(self.api_key, "***")
        return KEY_SHAPED.sub("***", text)

    def _should_retry(self, error: LLMError, attempt: int) -> bool:
        return isinstance(error, LLMUnavailableError) and attempt <= self.max_retries

    def _delay(self, attempt: int) -> float:
        delay: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return delay * (0.5 + random.random() / 2)  # jitter spreads retries of many conversations


class _Attempt:
    """One try of a call: ``with attempt:`` turns a provider failure into our error, and swallows it
    (so the loop tries again after ``delay``) only when a retry can help and no text was passed on."""

    def __init__(self, client: LiteLLMClient, number: int) -> None:
        self.client = client
        self.number = number
        self.started = False
        self.delay = client._delay(number)  # before a retry (jittered once, so the notice tells the truth)

    def passed(self, item: str | LLMResponse) -> str | LLMResponse:
        """``item`` goes to the caller: from now on a failure is raised, not retried."""
        self.started = True
        return item

    def __enter__(self) -> _Attempt:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if not isinstance(exc, Exception):  # success, or GeneratorExit/KeyboardInterrupt: not ours to handle
            return False
        error = self.client._translate(exc, self.number)
        if self.started or not self.client._should_retry(error, self.number):
            raise error from exc
        retries = self.client.max_retries
        logger.warning("%s; retry %d of %d in %.1f s", error, self.number, retries, self.delay)
        telemetry.retrying(error, self.number, self.delay)
        return True


class _StreamReader:
    """Reads a provider stream (sync or async): text deltas, then the whole response with usage and
    the tool calls, put together from their fragments (which only the final response carries)."""

    def __init__(self, client: LiteLLMClient, chunks: Any) -> None:
        self.client = client
        self.chunks = chunks
        self.parts: list[str] = []
        self.calls = _ToolCallParts()
        self.usage = Usage()
        self.finish_reason: str | None = None

    def __iter__(self) -> Generator[str | LLMResponse, None, None]:  # a generator: the caller may close it early
        try:
            for chunk in self.chunks:
                if text := self._read(chunk):
                    yield text
            yield self._response()
        finally:  # a reader that stops early closes the HTTP response, so the server stops writing
            _close_stream(self.chunks)

    async def __aiter__(self) -> AsyncGenerator[str | LLMResponse, None]:
        try:
            async for chunk in self.chunks:
                if text := self._read(chunk):
                    yield text
            yield self._response()
        finally:
            await _aclose_stream(self.chunks)

    def _read(self, chunk: Any) -> str:
        self.usage = self.client._chunk_usage(chunk) or self.usage
        self.finish_reason = _finish_reason(chunk) or self.finish_reason
        delta = _delta(chunk)
        self.calls.add(getattr(delta, "tool_calls", None) or ())
        text: str = getattr(delta, "content", None) or ""
        if text:
            self.parts.append(text)
        return text

    def _response(self) -> LLMResponse:
        received = self.parts + self.calls.texts()
        self.client._check_finished(_provider_finished(self.chunks, self.finish_reason is not None), received)
        # litellm closes every stream with a chunk of its own: the provider's reason is the one that counts
        finish = getattr(self.chunks, "received_finish_reason", None) or self.finish_reason
        calls = self.calls.finished()
        if calls and finish == "stop":  # what litellm reports for the same reply unstreamed
            finish = "tool_calls"
        return LLMResponse("".join(self.parts), self.usage, self.client.model, finish, calls)


def _close_stream(chunks: Any) -> None:
    """Close a sync provider stream: litellm's wrapper has no ``close()``, the stream it wraps does."""
    for stream in (chunks, getattr(chunks, "completion_stream", None)):
        if callable(close := getattr(stream, "close", None)):
            with contextlib.suppress(Exception):
                close()
            return


async def _aclose_stream(chunks: Any) -> None:
    if callable(aclose := getattr(chunks, "aclose", None)):
        with contextlib.suppress(Exception):
            await aclose()


class _ToolCallParts:
    """Tool calls arriving in fragments: each carries the call's ``index``; the id and name usually come
    in the first, the arguments in pieces. The first id and name given win (some servers repeat them)."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.arguments: dict[int, list[str]] = {}

    def add(self, fragments: Any) -> None:
        for fragment in fragments:
            index = self._index(fragment)
            function = getattr(fragment, "function", None)
            if (call_id := getattr(fragment, "id", None)) and index not in self.ids:
                self.ids[index] = call_id
            if (name := getattr(function, "name", None)) and index not in self.names:
                self.names[index] = name
            self.arguments.setdefault(index, []).append(_text(getattr(function, "arguments", None)))

    def _index(self, fragment: Any) -> int:
        index = getattr(fragment, "index", None)
        if isinstance(index, int):
            return index
        # no index (some servers): a fragment with a new id starts a call, any other continues its own or the last
        call_id = getattr(fragment, "id", None)
        for known, seen_id in self.ids.items():
            if seen_id == call_id:
                return known
        last = max(self.arguments, default=-1)
        return last + 1 if last < 0 or call_id else last

    def texts(self) -> list[str]:
        return [part for parts in self.arguments.values() for part in parts]

    def finished(self) -> tuple[ToolCallRequest, ...]:
        return tuple(
            ToolCallRequest(self.ids.get(index) or f"call_{n}", self.names.get(index, ""), "".join(parts))
            for n, (index, parts) in enumerate(sorted(self.arguments.items()))
        )


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


async def _sleep(seconds: float) -> None:
    import asyncio  # here, not at the top: the CLI's --help should not pay for importing asyncio

    await asyncio.sleep(seconds)


def _last_response(items: Iterator[str | LLMResponse]) -> LLMResponse:
    response = None
    for item in items:
        if isinstance(item, LLMResponse):
            response = item
    if response is None:  # pragma: no cover (every stream ends with its response)
        raise LLMError("the stream ended without a response")
    return response


async def _alast_response(items: AsyncIterator[str | LLMResponse]) -> LLMResponse:
    response = None
    async for item in items:
        if isinstance(item, LLMResponse):
            response = item
    if response is None:  # pragma: no cover (every stream ends with its response)
        raise LLMError("the stream ended without a response")
    return response


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


def _provider_finished(stream: Any, seen_in_chunks: bool) -> bool:
    """Whether the provider itself ended the reply. litellm adds a closing chunk with a finish reason
    to every stream, cut or not; its stream wrapper records whether the provider sent one."""
    received = getattr(stream, "received_finish_reason", _UNKNOWN)
    return seen_in_chunks if received is _UNKNOWN else received is not None


_UNKNOWN = object()


def _finish_reason(chunk: Any) -> str | None:
    choices: Any = getattr(chunk, "choices", None)
    return getattr(choices[0], "finish_reason", None) if choices else None


def _delta(chunk: Any) -> Any:
    choices = getattr(chunk, "choices", None)
    return getattr(choices[0], "delta", None) if choices else None


def _tool_call(call: Any, position: int) -> ToolCallRequest:
    """A whole tool call from a (non-streamed) response message."""
    function = getattr(call, "function", None)
    call_id = getattr(call, "id", None) or f"call_{position}"
    return ToolCallRequest(call_id, getattr(function, "name", None) or "", _text(getattr(function, "arguments", None)))


def _text(arguments: Any) -> str:
    """Arguments as text: providers send a JSON string; a few adapters hand over the parsed object."""
    if arguments is None or isinstance(arguments, str):
        return arguments or ""
    return json.dumps(arguments, ensure_ascii=False)


# litellm's provider names as the GenAI semantic conventions name them (others: as litellm names them)
_GENAI_PROVIDERS = {
    "openai": "openai", "text-completion-openai": "openai", "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference", "anthropic": "anthropic", "bedrock": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai", "vertex_ai_beta": "gcp.vertex_ai", "gemini": "gcp.gemini", "groq": "groq",
    "mistral": "mistral_ai", "cohere": "cohere", "cohere_chat": "cohere", "deepseek": "deepseek",
    "perplexity": "perplexity", "xai": "x_ai", "watsonx": "ibm.watsonx.ai",
}  # fmt: skip


@functools.cache
def _provider_and_model(model: str) -> tuple[str, str]:
    """(provider, the model as the provider names it) for a litellm model name."""
    prefix, _, rest = model.partition("/")
    if rest:
        return prefix, rest
    try:  # no prefix: litellm knows the provider of its models (it is imported for the call anyway)
        _, provider, _, _ = _import_litellm().get_llm_provider(model)
        return str(provider), model
    except Exception:  # a model litellm does not know: the conventions' "other"
        return "_OTHER", model


@functools.cache
def _has_mcp_gateway() -> bool:
    """Whether this litellm checks ``tools`` for its MCP gateway (and knows the flag that skips the check)."""
    from importlib.util import find_spec

    try:
        return find_spec("litellm.responses.mcp.chat_completions_handler") is not None
    except ImportError:  # a parent package is missing: an older litellm, without the gateway
        return False
