"""Record a conversation's model calls to a file (a cassette), and replay them with no model.

``RecordingLLM(client, path)`` passes every call through and appends the request's messages and
the reply to ``path``: the file is written when recording starts (so a path that cannot be written
fails at once) and rewritten atomically after each call, readable by its owner only (0600), since
it holds what users said. ``ReplayLLM(path)`` answers the calls in order from the file; when the
runtime sends a prompt that differs from the recording, it raises :class:`CassetteMismatch` with a
diff, so a changed definition or template shows up at once. A file that is not a cassette is an
:class:`LLMError` naming it and saying what is wrong.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from llm_fsm.errors import CassetteMismatch, LLMError
from llm_fsm.jsonfiles import JSONFileError, not_a, read_json, write_private
from llm_fsm.llm import LLMClient, LLMRequest, LLMResponse, StreamingLLMClient, Usage

VERSION = 1


class RecordingLLM:
    """Wraps a client and records every call it makes."""

    def __init__(self, inner: LLMClient, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = Path(path)
        self.interactions: list[dict[str, Any]] = []
        self._write()

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
        self.interactions.append(
            {
                "kind": request.kind,
                "messages": request.messages,
                "response": {"text": response.text, "usage": asdict(response.usage), "model": response.model},
            }
        )
        self._write()
        return response

    def _write(self) -> None:
        try:
            cassette = {"version": VERSION, "interactions": self.interactions}
            write_private(self.path, json.dumps(cassette, ensure_ascii=False, indent=1))
        except OSError as exc:
            raise LLMError(f"cannot write the cassette {self.path}: {exc.strerror or exc}") from None


class ReplayLLM:
    """Answers from a cassette, in order, checking that each request matches the recorded one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.interactions: list[dict[str, Any]] = _interactions(self.path, read_json(self.path, "cassette"))
        except JSONFileError as exc:
            raise LLMError(str(exc), model="replay") from None
        self.position = 0

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
        self.position += 1
        response = recorded["response"]
        return LLMResponse(response["text"], Usage(**response.get("usage", {})), response.get("model"))

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
    return interactions


def _diff(recorded: list[dict[str, str]], sent: list[dict[str, str]]) -> str:
    def lines(messages: list[dict[str, str]]) -> list[str]:
        return [f"[{m.get('role')}] {line}" for m in messages for line in str(m.get("content", "")).splitlines()]

    diff = difflib.unified_diff(lines(recorded), lines(sent), "recorded", "sent", lineterm="", n=2)
    return "\n".join(list(diff)[:200])
