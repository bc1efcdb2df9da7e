"""What a trace records, and how it stays safe: messages in the GenAI conventions' form, error events,
and :class:`Content` (text and values, recorded only when asked, with secrets masked).

Nothing here imports OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

from llm_fsm.secrets import KEY_SHAPED, MASK

# The objects of the modules that import the telemetry package, read here by duck typing: importing them,
# even for type checkers only (TYPE_CHECKING), would make an import cycle (tests/test_layout.py)
Conversation: TypeAlias = Any
LLMClient: TypeAlias = Any
LLMResponse: TypeAlias = Any
Prepared: TypeAlias = Any
ToolRun: TypeAlias = Any
Call: TypeAlias = Any
TurnResult: TypeAlias = Any
TurnRunner: TypeAlias = Any

logger = logging.getLogger("llm_fsm.telemetry")
_warned: set[str] = set()
_USERINFO = re.compile(r"(//)[^/@\s]+@")


def warn_once(message: str, *, setting: bool = False) -> None:
    """Say ``message`` once per process: a ``setting`` the user got wrong as a warning (shown by default,
    whether or not the application configured logging), anything else on the ``llm_fsm.telemetry`` log."""
    if message not in _warned:
        _warned.add(message)
        if setting:
            warnings.warn(message, UserWarning, stacklevel=5)
        else:
            logger.warning(message)


def harmless(method: Callable[..., Any]) -> Callable[..., Any]:
    """A tracing step that must never fail the turn (a provider that raises, a bug here): logged, skipped."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 (traces are best effort: the turn goes on)
            warn_once(f"tracing failed, the turn goes on without it: {type(exc).__name__}: {exc}")
            return None

    return guarded


def scrubbed(text: str) -> str:
    """``text`` without anything shaped like a key or a URL's user and password."""
    return KEY_SHAPED.sub("***", _USERINFO.sub(r"\1***@", text))


def error_attributes(error: BaseException, content: Content | None) -> dict[str, Any]:
    """``error`` as an exception event: its type and stack always; its message only when it cannot hold
    content (our model-call errors, scrubbed) or content is recorded."""
    from llm_fsm.errors import LLMError

    attributes: dict[str, Any] = {"exception.type": f"{type(error).__module__}.{type(error).__qualname__}"}
    if isinstance(error, LLMError) or content is not None:
        message = scrubbed(str(error).strip().splitlines()[0] if str(error).strip() else "")
        attributes["exception.message"] = content.text(message) if content is not None else message
    attributes["exception.stacktrace"] = "".join(traceback.format_tb(error.__traceback__))
    return attributes


class Content:
    """Message text and values recorded in spans (``LLM_FSM_TRACE_CONTENT=1``), with secrets masked:
    values under secret keys are learnt from every context, reply and tool call of the turn, and
    replaced wherever they appear in what is recorded."""

    def __init__(self, definition: Any) -> None:
        self.definition = definition
        self.secrets: set[str] = set()

    def learn(self, data: Any) -> None:
        if isinstance(data, dict):
            _hidden(data, self.definition.masked(data), self.secrets)

    def learn_reply(self, text: str) -> None:
        from llm_fsm.contract import reply_object
        from llm_fsm.errors import ReplyFormatError

        with contextlib.suppress(ReplyFormatError):  # no object: its text is still scrubbed of the secrets known
            self.learn(reply_object(text))

    def masked(self, value: Any) -> Any:
        return self.definition.masked({"value": value})["value"]

    def text(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text


def _hidden(original: Any, masked: Any, into: set[str]) -> None:
    """The values ``masked`` hides of ``original``, as text (and as JSON would write them)."""
    if masked == MASK and original != MASK:
        for leaf in _leaves(original):
            if len(leaf) >= 3:
                into.update((leaf, json.dumps(leaf, ensure_ascii=False)[1:-1]))
    elif isinstance(original, dict) and isinstance(masked, dict):
        for key, value in original.items():
            _hidden(value, masked.get(key), into)
    elif isinstance(original, list) and isinstance(masked, list):
        for value, hidden in zip(original, masked, strict=False):
            _hidden(value, hidden, into)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value)


def messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages in the GenAI conventions' form (``role`` and ``parts``)."""
    out = []
    for message in messages:
        role, parts = message.get("role", "user"), []
        if message.get("content"):
            kind = "tool_call_response" if role == "tool" else "text"
            key = "result" if role == "tool" else "content"
            part: dict[str, Any] = {"type": kind, key: message["content"]}
            if role == "tool":
                part["id"] = message.get("tool_call_id")
            parts.append(part)
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments")})  # fmt: skip
        out.append({"role": role, "parts": parts})
    return out
