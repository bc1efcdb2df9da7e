"""Streaming a turn: show the message as it arrives, but only once its transition is known valid.

While the reply's JSON streams in, it is parsed partially (pydantic_core's ``trailing-strings``
mode). Once the ``transition`` object is complete (the reply asks for it before ``message``; if the
model writes it after, it is complete when a key follows it or the reply ends), it goes to the
turn's ``preview``, which applies the rules the turn will apply, to the context the turn will
decide on. Only if it says yes is the message text released. A reply whose move would be refused
shows nothing; the corrective reply streams instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import from_json

from llm_fsm.contract import strip_thinking, wrapped_in_list


@dataclass(frozen=True)
class MessageDelta:
    """More text of the message being shown."""

    text: str


@dataclass(frozen=True)
class MessageReset:
    """Discard the text shown so far: the reply it came from was not accepted after all."""

    reason: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call about to run (its arguments checked): ``id``, ``name``, ``arguments``."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolResult:
    """A tool call that ran: ``run`` holds its result or error and its duration."""

    run: Any  # a llm_fsm.tools.calling.ToolRun


class MessageWatcher:
    """Follows one streamed reply and releases its message text once ``preview`` accepts its transition."""

    def __init__(self, preview: Callable[[Any], bool]) -> None:
        self.preview = preview
        self.buffer = ""
        self.verdict: bool | None = None  # None: not decided yet
        self.shown = 0
        self.parsed = 0  # length of the buffer at the last parse

    def feed(self, delta: str) -> str:
        """Add a delta of raw model text; return the message text newly safe to show."""
        self.buffer += delta
        # Each parse reads the whole buffer: parsing once per 1/64 of growth keeps a long reply
        # linear in total instead of quadratic (short replies still update on every delta).
        if self.verdict is False or len(self.buffer) - self.parsed < len(self.buffer) // 64:
            return ""
        return self._release(final=False)

    def flush(self) -> str:
        """At the end of the reply: the message text not released yet (if its transition checked out)."""
        return "" if self.verdict is False else self._release(final=True)

    def _release(self, *, final: bool) -> str:
        self.parsed = len(self.buffer)
        data = _partial_object(self.buffer)
        if data is None or "message" not in data:
            return ""
        if self.verdict is None:
            if not (final or _complete(data, "transition")):
                return ""  # the move may still be streaming in: wait for it
            self.verdict = "transition" in data and self.preview(data)
            if not self.verdict:
                return ""
        message = data.get("message")
        if not isinstance(message, str) or len(message) <= self.shown:
            return ""
        new, self.shown = message[self.shown :], len(message)
        return new


def _complete(data: dict[str, Any], key: str) -> bool:
    """Whether ``key``'s value is whole in a partially parsed object: another key follows it."""
    keys = list(data)
    return key in data and keys.index(key) < len(keys) - 1


def _partial_object(text: str) -> dict[str, Any] | None:
    text = strip_thinking(text)
    start = text.find("{")
    if start < 0 or wrapped_in_list(text):  # a reply in a list is refused whole: show none of it
        return None
    try:
        data = from_json(text[start:], allow_partial="trailing-strings")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
