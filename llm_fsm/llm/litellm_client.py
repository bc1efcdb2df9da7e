"""Any provider litellm supports, as an :class:`~llm_fsm.llm.protocol.LLMClient`: :class:`LiteLLMClient`.

This is the only module that imports litellm, and it does so on the first call (see
:mod:`llm_fsm.llm`). Each form of call (sync or async, whole or streamed) is a short driver over the
same attempts (:class:`_Attempt`: retry what a retry can help, with backoff) and the same stream reader.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Iterator
from types import ModuleType, TracebackType
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from llm_fsm import telemetry
from llm_fsm.errors import LLMError, LLMUnavailableError
from llm_fsm.llm.protocol import LLMRequest, LLMResponse, ResponseFormat, ToolCalling, longer_budget, max_reply_chars
from llm_fsm.llm.provider_errors import provider_error
from llm_fsm.llm.responses import StreamReader, alast_response, last_response, whole_response
from llm_fsm.secrets import without_url_passwords

logger = logging.getLogger("llm_fsm.llm")  # retry notices (silent unless the application shows warnings)


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
    compatibility and changes nothing. ``prompt_order``: where conversations put the prompt's reply rules
    (see :attr:`prompt_order`). Further keyword arguments go to ``litellm.completion`` unchanged.
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
        prompt_order: Literal["auto", "recency", "cache"] = "auto",
        **extra: Any,
    ) -> None:
        self.model = model
        self.guided = guided  # conversations give this model guided reply schemas (see llm_fsm.guided.schema)
        if prompt_order not in ("auto", "recency", "cache"):
            raise ValueError(f"prompt_order is 'auto', 'recency' or 'cache', not {prompt_order!r}")
        self._prompt_order = prompt_order
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
            return last_response(self.stream_complete(request))
        for attempt in self._attempts():
            with attempt:
                return whole_response(self.litellm.completion(**self._params(request, stream=False)), self.model)
            time.sleep(attempt.delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        if self.stream:
            return await alast_response(self.astream_complete(request))
        for attempt in self._attempts():
            with attempt:
                response = await self.litellm.acompletion(**self._params(request, stream=False))
                return whole_response(response, self.model)
            await _sleep(attempt.delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        """Yield text deltas as they arrive, then the whole :class:`LLMResponse` (with usage).

        A failure before the first delta is retried like :meth:`complete`; after it, it is raised.
        """
        for attempt in self._attempts():
            with attempt:
                reader = iter(StreamReader(self, self.litellm.completion(**self._params(request, stream=True))))
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
                reader = aiter(StreamReader(self, chunks))
                async with contextlib.aclosing(reader):
                    async for item in reader:
                        yield attempt.passed(item)
                return
            await _sleep(attempt.delay)

    def _attempts(self) -> Iterator[_Attempt]:
        return _Attempts(self)

    def _params(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": _with_cache_marks(request.messages) if _wants_cache_marks(self.model) else request.messages,
            "timeout": self.timeout,
            "max_retries": 0,
            **self.extra,
        }
        for name in ("api_base", "api_key", "temperature"):
            if getattr(self, name) is not None:
                params[name] = getattr(self, name)
        if self.guided and "extra_body" not in self.extra and _local_server(self.model, self.api_base):
            params["extra_body"] = dict(GUIDED_SAMPLING)
        response_format = self._response_format(request)
        native_tools = bool(request.tools) and self.tool_mode() == "native"
        held = (response_format or {}).get("type") == "json_schema" and not native_tools
        _budget(params, request.strict_schema if held else None, longer=request.longer, guided=self.guided)
        if request.max_tokens is not None:  # never above the client's own budget
            ceiling = params.get("max_tokens")
            params["max_tokens"] = min(ceiling, request.max_tokens) if isinstance(ceiling, int) else request.max_tokens
        if response_format is not None:
            params["response_format"] = response_format
        if native_tools and request.tools:
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

    @property
    def prompt_order(self) -> Literal["recency", "cache"]:
        """Where conversations with this model put the prompt's reply rules (``llm_fsm.turn.prompt.PromptOrder``):
        ``"cache"`` first, with a map of every state's transitions, so that consecutive calls share most of the
        prompt across a change of state (what a provider's prompt cache bills cheaper; the prompt is longer);
        ``"recency"`` after the state, where a small model follows them (``benchmarks/REAL_MODEL.md``, issue 26).

        ``"auto"`` (the default) chooses ``"cache"`` for Anthropic models (cached reads cost a tenth) and for
        the models whose cached prompt tokens litellm's price table puts at 25 % of the price or less (GPT-4.1,
        GPT-5, o3, DeepSeek, Gemini 2.5, ...); ``"recency"`` for the rest: half-price caches (GPT-4o), an
        ``openai/<name>`` model at an ``api_base`` (a server of your own), a guided model, a model the price
        table does not know. Computed once per client (``benchmarks/RESULTS.md`` §15 has the costs).
        """
        if self._prompt_order == "auto":
            self._prompt_order = _auto_order(self.model, self.api_base, self.guided)
        return self._prompt_order

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
        return _format(kind, request.strict_schema, _own_server(self.model, self.api_base))

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

    # -- errors ---------------------------------------------------------------------------------

    def _translate(self, exc: Exception, attempt: int) -> LLMError:
        return provider_error(
            exc, attempt, model=self.model, api_base=self.api_base, api_key=self.api_key, timeout=self.timeout
        )

    def _should_retry(self, error: LLMError, attempt: int) -> bool:
        return isinstance(error, LLMUnavailableError) and attempt <= self.max_retries

    def _delay(self, attempt: int) -> float:
        delay: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return delay * (0.5 + random.random() / 2)  # jitter spreads retries of many conversations


class _Attempts:
    """The tries of one call, numbered from 1 to ``max_retries + 1``. An iterator, not a generator: a call that
    succeeds returns from inside the loop over them, and a generator left suspended so is closed by raising
    ``GeneratorExit`` in it, which cost a few microseconds on every call."""

    def __init__(self, client: LiteLLMClient) -> None:
        self.client = client
        self.number = 0
        self.last = client.max_retries + 1

    def __iter__(self) -> _Attempts:
        return self

    def __next__(self) -> _Attempt:
        if self.number >= self.last:
            raise StopIteration
        self.number += 1
        return _Attempt(self.client, self.number)


class _Attempt:
    """One try of a call: ``with attempt:`` turns a provider failure into our error, and swallows it
    (so the loop tries again after ``delay``) only when a retry can help and no text was passed on."""

    def __init__(self, client: LiteLLMClient, number: int) -> None:
        self.client = client
        self.number = number
        self.started = False

    @functools.cached_property
    def delay(self) -> float:
        """The seconds before a retry, jittered once (so the notice tells the truth); worked out only for an
        attempt that failed, the one that needs it."""
        return self.client._delay(self.number)

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


async def _sleep(seconds: float) -> None:
    import asyncio  # here, not at the top: the CLI's --help should not pay for importing asyncio

    await asyncio.sleep(seconds)


# litellm's provider names as the GenAI semantic conventions name them (others: as litellm names them)
_GENAI_PROVIDERS = {
    "openai": "openai", "text-completion-openai": "openai", "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference", "anthropic": "anthropic", "bedrock": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai", "vertex_ai_beta": "gcp.vertex_ai", "gemini": "gcp.gemini", "groq": "groq",
    "mistral": "mistral_ai", "cohere": "cohere", "cohere_chat": "cohere", "deepseek": "deepseek",
    "perplexity": "perplexity", "xai": "x_ai", "watsonx": "ibm.watsonx.ai",
}  # fmt: skip


# a small model on a server of your own, guided: llama.cpp's DRY sampler, at the value its author suggests,
# stops the loops a 135M model writes ("please, please, please, ..."); JSON's quotes and colons break its
# sequences, so the values it copies from the user's words are not held against it (benchmarks/REAL_MODEL.md,
# issue 28). Sent only to a server on this machine or your network; extra_body=... of your own replaces it
GUIDED_SAMPLING: dict[str, Any] = {"dry_multiplier": 0.8}


def _budget(params: dict[str, Any], schema: dict[str, Any] | None, *, longer: bool, guided: bool) -> None:
    """``params``' token budget for a reply held to ``schema`` (None: held to none), raised for a retry after a
    cut reply (``longer``), and for a guided call from the first: a grammar ends the reply where its JSON ends,
    so it gets what the retry would (what the schema can need, up to twice the budget), not a cut and then a
    second call (``llm_fsm.llm.protocol.longer_budget``)."""
    if not (longer or (guided and schema is not None and max_reply_chars(schema) is not None)):
        return
    for budget in ("max_tokens", "max_completion_tokens"):
        if isinstance(params.get(budget), int):
            params[budget] = longer_budget(params[budget], schema)


def _format(kind: str, strict: dict[str, Any] | None, own_server: bool) -> dict[str, Any] | None:
    """The ``response_format`` of a reply held to ``strict`` (None: no schema), for a client whose format is
    ``kind``. Alternatives at the root (a reply or a JSON-form tool request) are for a server of your own,
    whose grammar takes them: a provider's strict mode wants one object, and gets asked for JSON instead."""
    if kind == "json_schema" and strict is not None and (own_server or "anyOf" not in strict):
        return {"type": "json_schema", "json_schema": {"name": "fsm_reply", "schema": strict, "strict": True}}
    return {"type": "json_object"} if kind in ("json_schema", "json_object") else None


def _own_server(model: str, api_base: str | None) -> bool:
    """An OpenAI-compatible server of your own (``openai/<name>`` at an ``api_base``)."""
    return bool(api_base) and _provider_and_model(model)[0] == "openai"


def _local_server(model: str, api_base: str | None) -> bool:
    """A server of your own on this machine or your network (loopback, private addresses, a bare host name
    such as a container's): the servers that take llama.cpp's sampling fields. A hosted API would refuse them."""
    if not _own_server(model, api_base) or api_base is None:
        return False
    host = urlsplit(api_base if "//" in api_base else f"//{api_base}").hostname or ""
    if host == "localhost" or host.endswith(".local") or ("." not in host and ":" not in host):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _auto_order(model: str, api_base: str | None, guided: bool) -> Literal["recency", "cache"]:
    """``prompt_order="auto"`` (see :attr:`LiteLLMClient.prompt_order`)."""
    if guided:
        return "recency"  # guided replies are for small local models
    if _own_server(model, api_base):
        return "recency"  # an OpenAI-compatible server of your own: most often a local model
    if _wants_cache_marks(model):
        return "cache"  # Anthropic's cached reads cost a tenth of the price
    try:
        info = _import_litellm().get_model_info(model)
        price, cached = info.get("input_cost_per_token"), info.get("cache_read_input_token_cost")
    except Exception:  # a model litellm's price table does not know
        return "recency"
    return "cache" if price and cached is not None and cached <= price / 4 else "recency"


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
def _wants_cache_marks(model: str) -> bool:
    """Whether ``model``'s provider caches a prompt prefix only where the request marks it: Anthropic's
    models, direct or on Bedrock and Vertex AI. OpenAI, DeepSeek and Gemini (2.5 on) cache a repeated prefix
    by themselves, and for Gemini litellm turns a marker into an explicit cached-content object (stored and
    billed by the hour), which a prompt whose end changes every turn must not make."""
    provider, name = _provider_and_model(model)
    if provider == "anthropic":
        return True
    return provider in ("bedrock", "vertex_ai", "vertex_ai_beta", "openrouter") and "claude" in name.lower()


def _with_cache_marks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the system prompt cut into text blocks at its cache-stable breaks (see
    ``PromptText``), each block that ends at a break marked ``cache_control: ephemeral``, as litellm passes
    it to Anthropic: the definition-wide part and the state's part are cached, the turn's part is not."""
    marked = []
    for message in messages:
        content = message.get("content")
        breaks = getattr(content, "breaks", ())
        if message.get("role") != "system" or not isinstance(content, str) or not breaks:
            marked.append(message)
            continue
        blocks: list[dict[str, Any]] = []
        start = 0
        for end in (*breaks, len(content)):
            if end > start:
                block: dict[str, Any] = {"type": "text", "text": str(content[start:end])}
                if end in breaks:
                    block["cache_control"] = {"type": "ephemeral"}
                blocks.append(block)
                start = end
        marked.append({**message, "content": blocks})
    return marked


@functools.cache
def _has_mcp_gateway() -> bool:
    """Whether this litellm checks ``tools`` for its MCP gateway (and knows the flag that skips the check)."""
    from importlib.util import find_spec

    try:
        return find_spec("litellm.responses.mcp.chat_completions_handler") is not None
    except ImportError:  # a parent package is missing: an older litellm, without the gateway
        return False
