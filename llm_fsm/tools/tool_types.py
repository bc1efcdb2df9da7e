"""What a tool call is made of: :class:`BoundTool` (a declared tool joined to its code), :class:`Prepared`
(a call checked and ready, or refused) and :class:`ToolRun` (what ran, with what, and what came back)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from llm_fsm.definition import Approval, ToolErrorDetail
from llm_fsm.hooks import ToolFunction
from llm_fsm.llm import ToolCallRequest

MAX_RESULT_CHARS = 4000  # what the model reads of one result; the whole result is kept in the ToolRun
MAX_ERROR_CHARS = 500
KEY_PARAMETER = "idempotency_key"  # a tool function taking a keyword of this name is given its call's key


class ToolRun(BaseModel):
    """One tool call of a turn: its arguments (an object, or the raw text when it was not JSON),
    and its ``result`` or ``error``; ``duration`` in seconds (0 for a call that never ran);
    ``approval``: ``approved``, ``rejected`` or ``supplied`` when a person decided (``running`` only in a
    stored pause, while an approved call runs); ``idempotency_key``: the key the call ran with."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: Any
    result: Any = None
    error: str | None = None
    duration: float = 0.0
    round: int = 1
    approval: str | None = None
    idempotency_key: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BoundTool:
    """A tool as the runtime calls it: the definition's declaration merged with its code."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: ToolFunction
    timeout: float = 30.0
    approval: Literal["none", "always"] | Approval = "none"
    result_key: str | None = None
    model: type[BaseModel] | None = None  # the function's typed arguments: what the JSON becomes before the call
    takes_key: bool = False  # the function takes an ``idempotency_key`` keyword
    error_detail: ToolErrorDetail = "message"  # what the model reads of an exception the tool raises
    secret_keys: tuple[str, ...] | None = ()  # extra secret key patterns for masking; None: masking is off

    def keywords(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` as the function takes them: converted to its type hints (pydantic models,
        dates, enums...), defaults filled in; ValueError (in words) when they do not fit."""
        if self.model is None:
            return dict(arguments)
        from pydantic import ValidationError

        try:
            values = self.model.model_validate(dict(arguments))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"]) or "arguments"
            message = "unexpected argument" if error["type"] == "extra_forbidden" else error["msg"]
            raise ValueError(f"{where}: {message}") from None
        return {name: getattr(values, name) for name in self.model.model_fields} | dict(values.model_extra or {})

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style function spec that native tool calling sends."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Prepared:
    """A call checked and ready: ``error`` set means it will not run; ``needs_approval`` that a
    person must agree first."""

    call: ToolCallRequest
    tool: BoundTool | None
    arguments: Any
    round: int
    error: str | None = None
    needs_approval: bool = False
    key: str | None = None  # the idempotency key it runs with (see call_key)

    def refused(self, error: str, approval: str | None = None) -> ToolRun:
        return ToolRun(
            id=self.call.id, name=self.call.name, arguments=self.arguments, error=_bounded(error, MAX_ERROR_CHARS),
            round=self.round, approval=approval,
        )  # fmt: skip


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[truncated {len(text) - limit} chars]"
