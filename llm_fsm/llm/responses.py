"""A provider's answer read into an :class:`~llm_fsm.llm.protocol.LLMResponse`: a whole response, or a
stream (sync or async) of text deltas and tool-call fragments, checked to have been finished."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

from llm_fsm.errors import LLMError, LLMUnavailableError
from llm_fsm.llm.fields import field
from llm_fsm.llm.protocol import LLMResponse, ToolCallRequest, Usage


def whole_response(response: Any, model: str) -> LLMResponse:
    """A non-streamed litellm response; ``model`` names the client's model in errors."""
    choices = field(response, "choices")
    if not choices:
        raise LLMError("the provider returned no choices", model=model)
    message = choices[0].message
    text = message.content or ""
    finish = field(choices[0], "finish_reason")
    calls = tuple(_tool_call(call, n) for n, call in enumerate(field(message, "tool_calls") or ()))
    return LLMResponse(text, _usage(response), field(response, "model"), finish, calls)


def _usage(response: Any) -> Usage:
    usage = field(response, "usage")
    hidden = field(response, "_hidden_params") or {}
    if usage is None:
        return Usage(cost=hidden.get("response_cost"))
    return _read_usage(usage, hidden.get("response_cost"))


def _read_usage(usage: Any, cost: float | None) -> Usage:
    """litellm's usage object as ours (the same for a whole response and a stream's usage chunk)."""
    prompt = usage.prompt_tokens or 0
    completion = usage.completion_tokens or 0
    total = usage.total_tokens or prompt + completion
    read, written = _cache_tokens(usage)
    # some providers count cached tokens apart from prompt_tokens, or report more than the prompt held:
    # what was served from the cache is part of the prompt, never more than all of it
    return Usage(prompt, completion, total, cost, min(read, prompt), written)


def _cache_tokens(usage: Any) -> tuple[int, int]:
    """Prompt tokens read from and written to the provider's prompt cache. litellm puts the read ones in
    ``prompt_tokens_details.cached_tokens`` for every provider (OpenAI, DeepSeek, Gemini; Anthropic's
    ``cache_read_input_tokens`` too, which it also keeps), the written ones in ``cache_creation_input_tokens``."""
    details = field(usage, "prompt_tokens_details")
    read = field(details, "cached_tokens") if details is not None else None
    if isinstance(details, dict):  # a provider's raw usage, not litellm's object
        read = details.get("cached_tokens")
    if not read:
        read = field(usage, "cache_read_input_tokens")
    written = field(usage, "cache_creation_input_tokens")
    return (read if isinstance(read, int) else 0), (written if isinstance(written, int) else 0)


def _check_finished(model: str, finished: bool, parts: list[str]) -> None:
    """A stream that ends without a finish reason was cut off: its text (and tool calls) must not be used."""
    if not finished:
        received = sum(len(p) for p in parts)
        raise LLMUnavailableError(
            f"{model}: the stream ended before the reply was complete ({received} characters received)",
            model=model,
        )


def _chunk_usage(chunk: Any) -> Usage | None:
    """The usage of a stream's usage chunk (the last, asked for with ``include_usage``), with its cost: litellm
    prices that chunk as it prices a whole response (``_hidden_params["response_cost"]``, also ``usage.cost``)."""
    usage = field(chunk, "usage")
    if not usage or not field(usage, "total_tokens"):
        return None
    hidden = field(chunk, "_hidden_params") or {}
    cost = hidden.get("response_cost")
    if not isinstance(cost, int | float):
        cost = field(usage, "cost")
    return _read_usage(usage, cost if isinstance(cost, int | float) else None)


class StreamReader:
    """Reads a provider stream (sync or async): text deltas, then the whole response with usage and
    the tool calls, put together from their fragments (which only the final response carries)."""

    def __init__(self, client: Any, chunks: Any) -> None:
        self.model: str = client.model  # a LiteLLMClient's: the reader names it in errors and the response
        self.chunks = chunks
        self.parts: list[str] = []
        self.calls = ToolCallParts()
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
        self.usage = _chunk_usage(chunk) or self.usage
        self.finish_reason = _finish_reason(chunk) or self.finish_reason
        delta = _delta(chunk)
        self.calls.add(field(delta, "tool_calls") or ())
        text: str = field(delta, "content") or ""
        if text:
            self.parts.append(text)
        return text

    def _response(self) -> LLMResponse:
        received = self.parts + self.calls.texts()
        _check_finished(self.model, _provider_finished(self.chunks, self.finish_reason is not None), received)
        # litellm closes every stream with a chunk of its own: the provider's reason is the one that counts
        finish = getattr(self.chunks, "received_finish_reason", None) or self.finish_reason
        calls = self.calls.finished()
        if calls and finish == "stop":  # what litellm reports for the same reply unstreamed
            finish = "tool_calls"
        return LLMResponse("".join(self.parts), self.usage, self.model, finish, calls)


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


class ToolCallParts:
    """Tool calls arriving in fragments: each carries the call's ``index``; the id and name usually come
    in the first, the arguments in pieces. The first id and name given win (some servers repeat them)."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.arguments: dict[int, list[str]] = {}

    def add(self, fragments: Any) -> None:
        for fragment in fragments:
            index = self._index(fragment)
            function = field(fragment, "function")
            if (call_id := field(fragment, "id")) and index not in self.ids:
                self.ids[index] = call_id
            if (name := field(function, "name")) and index not in self.names:
                self.names[index] = name
            self.arguments.setdefault(index, []).append(_text(field(function, "arguments")))

    def _index(self, fragment: Any) -> int:
        index = field(fragment, "index")
        if isinstance(index, int):
            return index
        # no index (some servers): a fragment with a new id starts a call, any other continues its own or the last
        call_id = field(fragment, "id")
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


def last_response(items: Iterator[str | LLMResponse]) -> LLMResponse:
    response = None
    for item in items:
        if isinstance(item, LLMResponse):
            response = item
    if response is None:  # pragma: no cover (every stream ends with its response)
        raise LLMError("the stream ended without a response")
    return response


async def alast_response(items: AsyncIterator[str | LLMResponse]) -> LLMResponse:
    response = None
    async for item in items:
        if isinstance(item, LLMResponse):
            response = item
    if response is None:  # pragma: no cover (every stream ends with its response)
        raise LLMError("the stream ended without a response")
    return response


def _provider_finished(stream: Any, seen_in_chunks: bool) -> bool:
    """Whether the provider itself ended the reply. litellm adds a closing chunk with a finish reason
    to every stream, cut or not; its stream wrapper records whether the provider sent one."""
    received = getattr(stream, "received_finish_reason", _UNKNOWN)
    return seen_in_chunks if received is _UNKNOWN else received is not None


_UNKNOWN = object()


def _finish_reason(chunk: Any) -> str | None:
    choices: Any = field(chunk, "choices")
    return field(choices[0], "finish_reason") if choices else None


def _delta(chunk: Any) -> Any:
    choices = field(chunk, "choices")
    return field(choices[0], "delta") if choices else None


def _tool_call(call: Any, position: int) -> ToolCallRequest:
    """A whole tool call from a (non-streamed) response message."""
    function = field(call, "function")
    call_id = field(call, "id") or f"call_{position}"
    return ToolCallRequest(call_id, field(function, "name") or "", _text(field(function, "arguments")))


def _text(arguments: Any) -> str:
    """Arguments as text: providers send a JSON string; a few adapters hand over the parsed object."""
    if arguments is None or isinstance(arguments, str):
        return arguments or ""
    return json.dumps(arguments, ensure_ascii=False)
