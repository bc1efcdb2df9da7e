"""Streaming a turn: show the message as it arrives, but only once its transition is known valid.

The reply asks for ``transition`` before ``message``. While the JSON streams in, it is parsed
partially (pydantic_core's ``trailing-strings`` mode); when the ``message`` key appears, the
transition before it is complete, and is checked with the same rules as a whole reply. Only if it
is accepted are message deltas released. A reply whose move would be refused shows nothing; the
corrective reply streams instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json

from llm_fsm.contract import Reply, strip_thinking
from llm_fsm.definition import FSMDefinition
from llm_fsm.engine import Snapshot, decide


@dataclass(frozen=True)
class MessageDelta:
    """More text of the message being shown."""

    text: str


@dataclass(frozen=True)
class MessageReset:
    """Discard the text shown so far: the reply it came from was not accepted after all."""

    reason: str


class MessageWatcher:
    """Follows one streamed reply and releases its message text once its transition checks out."""

    def __init__(self, definition: FSMDefinition, snapshot: Snapshot) -> None:
        self.definition = definition
        self.snapshot = snapshot
        self.buffer = ""
        self.verdict: bool | None = None  # None: not decided yet
        self.shown = 0
        self.parsed = 0  # length of the buffer at the last parse

    def feed(self, delta: str) -> str:
        """Add a delta of raw model text; return the message text newly safe to show."""
        self.buffer += delta
        if self.verdict is False:
            return ""
        # Each parse reads the whole buffer: parsing once per 1/64 of growth keeps a long message
        # linear in total instead of quadratic (short messages still update on every delta).
        if self.verdict and len(self.buffer) - self.parsed < len(self.buffer) // 64:
            return ""
        return self._release()

    def flush(self) -> str:
        """At the end of the reply: the message text not released yet (if its transition checked out)."""
        return self._release() if self.verdict else ""

    def _release(self) -> str:
        self.parsed = len(self.buffer)
        data = _partial_object(self.buffer)
        if data is None or "message" not in data:
            return ""
        if self.verdict is None:
            # The transition must come first: if it is absent when the message starts, the move
            # cannot be checked before the text is shown, so nothing streams for this reply.
            self.verdict = "transition" in data and self._accepted(data["transition"])
            if not self.verdict:
                return ""
        message = data.get("message")
        if not isinstance(message, str) or len(message) <= self.shown:
            return ""
        new, self.shown = message[self.shown :], len(message)
        return new

    def _accepted(self, transition: Any) -> bool:
        try:
            reply = Reply.model_validate({"transition": transition, "message": "-"})
        except ValidationError:
            return False
        return decide(self.definition, self.snapshot, reply).accepted


def _partial_object(text: str) -> dict[str, Any] | None:
    text = strip_thinking(text)
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = from_json(text[start:], allow_partial="trailing-strings")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
