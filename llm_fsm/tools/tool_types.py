"""What a tool call is made of: :class:`BoundTool` (a declared tool joined to its code), :class:`Prepared`
(a call checked and ready, or refused) and :class:`ToolRun` (what ran, with what, and what came back)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict

from llm_fsm.definition.models import Approval, ToolErrorDetail
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

    @cached_property
    def written_out(self) -> dict[str, Any]:
        """``parameters`` with their local references written out, to embed in a request's schema (made once)."""
        return inlined(self.parameters)

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
            id=self.call.id, name=self.call.name, arguments=self.arguments, error=bounded(error, MAX_ERROR_CHARS),
            round=self.round, approval=approval,
        )  # fmt: skip


def bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[truncated {len(text) - limit} chars]"


_NAMED = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"})  # name: schema
_DATA = frozenset({"const", "enum", "default", "examples"})  # values, not schemas: nothing in them is a reference


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its local references (``#/$defs/Size``, as pydantic writes an Enum or a nested model's
    type) written out where they are used: embedded in a request's schema, ``#/$defs`` would point at that
    schema's root, where nothing is (a server refuses the request). A reference to where it is used from (a
    recursive model) takes any value there, a reference elsewhere stays; the call's arguments are still
    checked against ``schema``."""
    if '"$ref"' not in json.dumps(schema):
        return schema
    written_out: dict[str, Any] = _written(schema, schema, frozenset(), root=True)
    return written_out


def _pointed(schema: dict[str, Any], ref: str) -> Any:
    """The schema (a dict or a bool) the local reference ``ref`` points at within ``schema``, or None."""
    node: Any = schema
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, dict | bool) else None


def _written(schema: dict[str, Any], node: Any, within: frozenset[str], root: bool = False) -> Any:
    """``node`` with the references in it written out; ``within``: the references being written out
    around it (one met again is a recursive type)."""
    if not isinstance(node, dict):
        return node
    rest = _members_written(schema, node, within, root)
    ref = node.get("$ref")
    target = _pointed(schema, ref) if isinstance(ref, str) and ref.startswith("#") else None
    if target is None:
        return rest if ref is None else {**rest, "$ref": ref}
    assert isinstance(ref, str)  # a target was found for it
    if ref in within or ref == "#":
        return rest  # a recursive type: any value where it recurs
    if isinstance(target, bool):
        return target if not rest else rest if target else {**rest, "not": {}}
    return {**_written(schema, target, within | {ref}), **rest}


def _members_written(
    schema: dict[str, Any], node: dict[str, Any], within: frozenset[str], root: bool
) -> dict[str, Any]:
    """``node``'s members but its ``$ref`` (and the root's definitions), each schema in them written out."""
    rest: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" or (root and key in ("$defs", "definitions")):
            continue
        if key in _NAMED and isinstance(value, dict):
            rest[key] = {name: _written(schema, part, within) for name, part in value.items()}
        elif key in _DATA:
            rest[key] = value
        elif isinstance(value, list):
            rest[key] = [_written(schema, part, within) for part in value]
        else:
            rest[key] = _written(schema, value, within)
    return rest
