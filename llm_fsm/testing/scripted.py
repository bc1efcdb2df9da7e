"""A scripted model that records what it was asked: the test double for code built on llm_fsm.

>>> llm = ScriptedLLM([{"transition": {"target_state": "greet", "context_update": {}}, "message": "Hi!"}])
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from llm_fsm.errors import LLMError, ScriptExhausted
from llm_fsm.jsonfiles import JSONFileError, not_a, read_json
from llm_fsm.llm import LLMRequest, LLMResponse, ToolCallRequest, Usage

__all__ = ["ScriptedLLM", "folded_summary", "reply", "tool_calls"]


def reply(target_state: str, message: str, **context_update: Any) -> dict[str, Any]:
    """A valid reply dict, for writing scripts tersely."""
    return {"transition": {"target_state": target_state, "context_update": context_update}, "message": message}


def tool_calls(*calls: tuple[str, dict[str, Any]] | str) -> dict[str, Any]:
    """A scripted request for tool calls: ``tool_calls(("lookup_order", {"order_id": "A-17"}))``
    (a bare name calls the tool with no arguments)."""
    items = [(c, {}) if isinstance(c, str) else c for c in calls]
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in items]}


def folded_summary(request: LLMRequest) -> dict[str, str]:
    """A stand-in summary for a summary call (``request.kind == "summary"``): the previous summary and
    the user's lines of the exchanges it is shown, the last 1,000 characters of them. For scripted runs,
    where no model writes summaries."""
    system = str(request.messages[0].get("content") or "") if request.messages else ""
    previous = re.search(r"<previous_summary>(.*?)</previous_summary>", system, re.DOTALL)
    said = re.findall(r"<user>(.*?)</user>", system, re.DOTALL)
    parts = [previous.group(1)] if previous and not previous.group(1).startswith("(none yet") else []
    return {"summary": " ".join([*parts, *(f"User: {line}" for line in said)])[-1000:] or "(nothing said yet)"}


class ScriptedLLM:
    """Answers each call with the next scripted reply and records every request in ``requests``.

    A reply is a dict (sent as JSON), a string (sent as is, to script malformed output), or an
    exception instance (raised, to script provider failures). Usage counts characters / 4.
    A dict ``{"tool_calls": [{"name", "arguments"}]}`` (see :func:`tool_calls`) asks for tool calls:
    as native function calls (``tool_calling="native"``, the default), or as that JSON text (``"json"``).

    ``summaries`` answers the summary calls (``request.kind == "summary"``, see ``llm_fsm.memory.summaries``)
    apart from the script: a function of the request returning the reply (text, a dict, or an exception
    to raise), or a list of such replies used in turn. Without it, summary calls take the next scripted reply.
    """

    def __init__(
        self,
        replies: Iterable[dict[str, Any] | str | BaseException] = (),
        *,
        chunk_size: int = 8,
        tool_calling: Literal["native", "json"] = "native",
        summaries: Callable[[LLMRequest], Any] | Iterable[dict[str, Any] | str | BaseException] | None = None,
    ) -> None:
        self.chunk_size = max(1, chunk_size)
        self._summaries: Callable[[LLMRequest], Any] | deque[Any] | None = (
            summaries if summaries is None or callable(summaries) else deque(summaries)
        )
        self.tool_calling = tool_calling
        self.prompt_order: Literal["recency", "cache"] = "recency"  # what a conversation's prompts are made in
        self._replies: deque[dict[str, Any] | str | BaseException] = deque(replies)
        self._lock = threading.Lock()
        self.requests: list[LLMRequest] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedLLM:
        """Replies from a JSON file: a list of replies, or an object with a ``replies`` list.

        :class:`LLMError` naming the file and what is wrong when it is not such a file.
        """
        try:
            data = read_json(path, "reply script")
        except JSONFileError as exc:
            raise LLMError(str(exc), model="scripted") from None
        replies = data.get("replies") if isinstance(data, dict) else data
        if not isinstance(replies, list) or not all(isinstance(r, (dict, str)) for r in replies):
            why = "it holds neither a list of replies nor an object with a 'replies' list"
            raise LLMError(not_a(path, data, "reply script", why), model="scripted")
        return cls(replies)

    def tool_mode(self) -> Literal["native", "json"]:
        return self.tool_calling

    def add(self, *replies: dict[str, Any] | str | BaseException) -> None:
        self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._replies)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def complete(self, request: LLMRequest) -> LLMResponse:
        with self._lock:
            self.requests.append(request)
            if request.kind == "summary" and self._summaries is not None:
                item = self._summary(request)
            elif not self._replies:
                raise ScriptExhausted(f"ScriptedLLM has no reply left for call {len(self.requests)}", model="scripted")
            else:
                item = self._replies.popleft()
        if isinstance(item, BaseException):
            raise item
        prompt = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
        if self.tool_calling == "native" and isinstance(item, dict) and set(item) == {"tool_calls"}:
            calls = tuple(_call(call, len(self.requests), n) for n, call in enumerate(item["tool_calls"], 1))
            completion = len(json.dumps(item)) // 4
            return LLMResponse("", Usage(prompt, completion, prompt + completion), "scripted", "tool_calls", calls)
        text = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        completion = len(text) // 4
        return LLMResponse(text, Usage(prompt, completion, prompt + completion), "scripted")

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)

    def _summary(self, request: LLMRequest) -> Any:
        if callable(self._summaries):
            return self._summaries(request)
        assert self._summaries is not None
        if not self._summaries:
            raise ScriptExhausted(f"ScriptedLLM has no summary left for call {len(self.requests)}", model="scripted")
        return self._summaries.popleft()

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        """The reply in pieces of ``chunk_size`` characters, then the whole response."""
        response = self.complete(request)
        for start in range(0, len(response.text), self.chunk_size):
            yield response.text[start : start + self.chunk_size]
        yield response

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        for item in self.stream_complete(request):
            yield item


def _call(call: dict[str, Any], request: int, number: int) -> ToolCallRequest:
    arguments = call.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCallRequest(str(call.get("id") or f"call_{request}_{number}"), str(call.get("name", "")), text)
