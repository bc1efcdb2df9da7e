"""Record a conversation's model calls to a file (a cassette), and replay them with no model.

``RecordingLLM(client, path)`` passes every call through and appends the request's messages and
the reply to ``path``: the file is written when recording starts (so a path that cannot be written
fails at once) and rewritten atomically after each call, readable by its owner only (0600), since
it holds what users said. ``ReplayLLM(path)`` answers the calls in order from the file; when the
runtime sends a prompt that differs from the recording, it raises :class:`CassetteMismatch` with a
diff, so a changed definition or template shows up at once. A file that is not a cassette is an
:class:`LLMError` naming it and saying what is wrong.

Tools: a request's messages may hold the assistant's ``tool_calls`` and ``role: "tool"`` messages
(``content`` may be null), and are recorded as sent; the tool specs sent natively are recorded as
``tools``, a response's tool calls as ``tool_calls``, and the way the recorded model took tools as
the cassette's ``tool_mode``, which replay reports so that the runtime sends the same prompts. A
cassette recorded before tools (none of these fields) replays as before.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from llm_fsm.errors import CassetteMismatch, LLMError
from llm_fsm.jsonfiles import JSONFileError, not_a, read_json, write_private
from llm_fsm.llm import LLMClient, LLMRequest, LLMResponse, StreamingLLMClient, ToolCallRequest, Usage

VERSION = 1


class RecordingLLM:
    """Wraps a client and records every call it makes."""

    def __init__(self, inner: LLMClient, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = Path(path)
        self.interactions: list[dict[str, Any]] = []
        self.mode: Literal["native", "json"] | None = None  # asked of the inner client when a state has tools
        self.guided = bool(getattr(inner, "guided", False))  # the prompts and schemas depend on it: noted too
        self.order: str | None = None  # the prompt order of the wrapped client, asked at the first call
        self._write()

    @property
    def prompt_order(self) -> Literal["recency", "cache"]:
        """The wrapped client's prompt order (``llm_fsm.turn.prompt.PromptOrder``), noted in the cassette."""
        order: Literal["recency", "cache"] = (
            "cache" if getattr(self.inner, "prompt_order", None) == "cache" else "recency"
        )
        if order != self.order:
            self.order = order
            self._write()
        return order

    def tool_mode(self) -> Literal["native", "json"]:
        """The wrapped client's way of taking tools (the JSON form when it says nothing), noted in the cassette."""
        mode = getattr(self.inner, "tool_mode", None)
        answer: Literal["native", "json"] = mode() if callable(mode) else "json"
        if answer != self.mode:
            self.mode = answer
            self._write()
        return answer

    def complete(self, request: LLMRequest) -> LLMResponse:
        return self._record(request, self.inner.complete(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self._record(request, await self.inner.acomplete(request))

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        items = (
            self.inner.stream_complete(request)
            if isinstance(self.inner, StreamingLLMClient)
            else iter([self.inner.complete(request)])
        )
        for item in items:
            if isinstance(item, LLMResponse):
                self._record(request, item)
            yield item

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        if isinstance(self.inner, StreamingLLMClient):
            async for item in self.inner.astream_complete(request):
                if isinstance(item, LLMResponse):
                    self._record(request, item)
                yield item
        else:
            yield self._record(request, await self.inner.acomplete(request))

    def _record(self, request: LLMRequest, response: LLMResponse) -> LLMResponse:
        # a copy: the turn goes on appending to its list of messages after this call
        interaction: dict[str, Any] = {"kind": request.kind, "messages": copy.deepcopy(request.messages)}
        if request.tools:
            interaction["tools"] = list(request.tools)
        recorded: dict[str, Any] = {"text": response.text, "usage": asdict(response.usage), "model": response.model}
        if response.finish_reason is not None:
            recorded["finish_reason"] = response.finish_reason
        if response.tool_calls:
            recorded["tool_calls"] = [asdict(call) for call in response.tool_calls]
        self.interactions.append({**interaction, "response": recorded})
        self._write()
        return response

    def _write(self) -> None:
        try:
            cassette: dict[str, Any] = {"version": VERSION, "interactions": self.interactions}
            if self.mode is not None:
                cassette["tool_mode"] = self.mode
            if self.guided:
                cassette["guided"] = True
            if self.order == "cache":
                cassette["prompt_order"] = "cache"
            write_private(self.path, json.dumps(cassette, ensure_ascii=False, indent=1))
        except OSError as exc:
            raise LLMError(f"cannot write the cassette {self.path}: {exc.strerror or exc}") from None


class ReplayLLM:
    """Answers from a cassette, in order, checking that each request matches the recorded one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            cassette = read_json(self.path, "cassette")
            self.interactions: list[dict[str, Any]] = _interactions(self.path, cassette)
        except JSONFileError as exc:
            raise LLMError(str(exc), model="replay") from None
        self.mode: Literal["native", "json"] = "native" if cassette.get("tool_mode") == "native" else "json"
        self.guided = cassette.get("guided") is True  # recorded with guided replies: replayed with them
        # recorded in the cache order: replayed so, for the prompts to match
        self.prompt_order: Literal["recency", "cache"] = (
            "cache" if cassette.get("prompt_order") == "cache" else "recency"
        )
        self.position = 0

    def tool_mode(self) -> Literal["native", "json"]:
        """How the recorded model took tools (the JSON form for a cassette that does not say)."""
        return self.mode

    @property
    def remaining(self) -> int:
        return len(self.interactions) - self.position

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.position >= len(self.interactions):
            raise CassetteMismatch(
                f"the cassette {self.path} has no call {self.position + 1} (it recorded {len(self.interactions)})", ""
            )
        recorded = self.interactions[self.position]
        if recorded["messages"] != request.messages:
            raise CassetteMismatch(
                f"call {self.position + 1} differs from the cassette {self.path}:",
                _diff(recorded["messages"], request.messages),
            )
        sent_tools = list(request.tools) if request.tools else None
        if recorded.get("tools") != sent_tools:
            raise CassetteMismatch(
                f"call {self.position + 1} offers other tools than the cassette {self.path}:",
                _tools_diff(recorded.get("tools"), sent_tools),
            )
        self.position += 1
        response = recorded["response"]
        calls = tuple(ToolCallRequest(**call) for call in response.get("tool_calls") or ())
        usage = Usage(**response.get("usage", {}))
        return LLMResponse(response["text"], usage, response.get("model"), response.get("finish_reason"), calls)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def _interactions(path: Path, cassette: Any) -> list[dict[str, Any]]:
    """The recorded calls of a cassette document; JSONFileError naming the first thing that is not one."""
    interactions = cassette.get("interactions") if isinstance(cassette, dict) else None
    if not isinstance(interactions, list):
        raise JSONFileError(not_a(path, cassette, "cassette", "it has no 'interactions' list"))
    for number, call in enumerate(interactions, 1):
        if not isinstance(call, dict) or not isinstance(call.get("messages"), list):
            raise JSONFileError(f"{path} is not a cassette: call {number} has no 'messages' list")
        response = call.get("response")
        if not isinstance(response, dict) or not isinstance(response.get("text"), str):
            raise JSONFileError(f"{path} is not a cassette: call {number} has no 'response' with a 'text'")
        calls = response.get("tool_calls", [])
        if not isinstance(calls, list) or not all(_is_tool_call(c) for c in calls):
            why = "'tool_calls' that are not a list of {id, name, arguments} with text values"
            raise JSONFileError(f"{path} is not a cassette: the response of call {number} has {why}")
    return interactions


def _is_tool_call(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and set(call) == {"id", "name", "arguments"}
        and all(isinstance(v, str) for v in call.values())
    )


def _diff(recorded: list[dict[str, Any]], sent: list[dict[str, Any]]) -> str:
    diff = difflib.unified_diff(_lines(recorded), _lines(sent), "recorded", "sent", lineterm="", n=2)
    return "\n".join(list(diff)[:200])


def _lines(messages: list[dict[str, Any]]) -> list[str]:
    """The messages as lines to compare: each line of the text, then each tool call asked for."""
    lines = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            role = f"tool {message.get('tool_call_id')}"
        lines += [f"[{role}] {line}" for line in str(message.get("content") or "").splitlines()]
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            lines.append(f"[{role} calls {function.get('name')}] {function.get('arguments')}")
    return lines


def _tools_diff(recorded: list[dict[str, Any]] | None, sent: list[dict[str, Any]] | None) -> str:
    def lines(tools: list[dict[str, Any]] | None) -> list[str]:
        if not tools:
            return ["(no tools)"]
        return [json.dumps(tool, ensure_ascii=False, sort_keys=True) for tool in tools]

    return "\n".join(difflib.unified_diff(lines(recorded), lines(sent), "recorded", "sent", lineterm="", n=1))
