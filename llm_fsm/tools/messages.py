"""Tool calls and results as the model reads and writes them: result text (bounded, no tag can open),
the native exchange of messages, and the JSON form of a request (its schema, and reading it from a reply)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from llm_fsm.llm import ToolCallRequest
from llm_fsm.tools.tool_types import MAX_RESULT_CHARS, BoundTool, ToolRun


def masked(run: ToolRun, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> ToolRun:
    """``run`` with secret-looking values of its arguments and result masked by ``mask`` (for
    displays and prompts; the run itself keeps them)."""
    result = mask({"result": run.result})["result"] if run.result is not None else None
    arguments = mask(run.arguments) if isinstance(run.arguments, dict) else run.arguments
    return run.model_copy(update={"result": result, "arguments": arguments})


def unique_ids(calls: Sequence[ToolCallRequest], round_: int) -> list[ToolCallRequest]:
    """``calls`` with an id each, none repeated (models do repeat them, and providers refuse that)."""
    seen: set[str] = set()
    unique = []
    for n, call in enumerate(calls, 1):
        if not call.id or call.id in seen:
            call = ToolCallRequest(f"call_{round_}_{n}_{len(seen)}", call.name, call.arguments)
        seen.add(call.id)
        unique.append(call)
    return unique


def result_text(run: ToolRun) -> str:
    """A call's outcome as the model reads it: its result as JSON, or ``{"error": ...}``; bounded."""
    body: dict[str, Any] = {"error": run.error} if run.error is not None else {"result": run.result}
    text = json.dumps(body, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_RESULT_CHARS:  # still one JSON object: its beginning, as text, and what was left out
        body = {"truncated": text[:MAX_RESULT_CHARS], "omitted_chars": len(text) - MAX_RESULT_CHARS}
        text = json.dumps(body, ensure_ascii=False)
    # JSON escapes, so that no tag can open or close in any prompt; the model reads the same data
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def native_exchange(runs: Sequence[ToolRun], text: str | None) -> list[dict[str, Any]]:
    """The assistant message that asked for ``runs`` and a ``tool`` message per result."""
    calls = [
        {"id": r.id, "type": "function", "function": {"name": r.name, "arguments": arguments_text(r.arguments)}}
        for r in runs
    ]
    asked: dict[str, Any] = {"role": "assistant", "content": text or None, "tool_calls": calls}
    return [asked, *({"role": "tool", "tool_call_id": r.id, "content": result_text(r)} for r in runs)]


def json_request_text(runs: Sequence[ToolRun]) -> str:
    """The reply that asks for ``runs`` in the JSON form (what the model wrote, canonically)."""
    calls = [{"name": r.name, "arguments": r.arguments} for r in runs]
    return json.dumps({"tool_calls": calls}, ensure_ascii=False)


def arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


JSON_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_calls": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["tool_calls"],
    "additionalProperties": False,
}


def json_request_schema(tools: Sequence[BoundTool], most: int) -> dict[str, Any]:
    """:data:`JSON_REQUEST_SCHEMA` narrowed to ``tools``: each call names one of them, with its arguments,
    and at most ``most`` calls (a grammar then ends the list: a looping model repeats a call to the token limit)."""
    calls = [
        {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": inlined(tool.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    items = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {
        "type": "object",
        "properties": {"tool_calls": {"type": "array", "minItems": 1, "maxItems": most, "items": items}},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }


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

    def pointed(ref: str) -> Any:
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

    def written(node: Any, within: frozenset[str], root: bool = False) -> Any:
        if not isinstance(node, dict):
            return node
        rest: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" or (root and key in ("$defs", "definitions")):
                continue
            if key in _NAMED and isinstance(value, dict):
                rest[key] = {name: written(part, within) for name, part in value.items()}
            elif key in _DATA:
                rest[key] = value
            elif isinstance(value, list):
                rest[key] = [written(part, within) for part in value]
            else:
                rest[key] = written(value, within)
        ref = node.get("$ref")
        target = pointed(ref) if isinstance(ref, str) and ref.startswith("#") else None
        if target is None:
            return rest if ref is None else {**rest, "$ref": ref}
        assert isinstance(ref, str)  # a target was found for it
        if ref in within or ref == "#":
            return rest  # a recursive type: any value where it recurs
        if isinstance(target, bool):
            return target if not rest else rest if target else {**rest, "not": {}}
        return {**written(target, within | {ref}), **rest}

    written_out: dict[str, Any] = written(schema, frozenset(), root=True)
    return written_out


def requested_in_text(text: str, round_: int) -> list[ToolCallRequest]:
    """The calls a reply written in the JSON form asks for (none when it is not that form)."""
    from llm_fsm.contract import reply_object
    from llm_fsm.errors import ReplyFormatError

    try:
        data = reply_object(text, exact=True)  # a key given twice is refused as a reply would be
    except ReplyFormatError:
        return []
    return tool_request(data, round_) or []


def tool_request(data: Any, round_: int = 1) -> list[ToolCallRequest] | None:
    """The calls of a reply in the JSON form, ``{"tool_calls": [{"name", "arguments"}]}``; None when
    ``data`` is not that shape."""
    if not isinstance(data, dict) or set(data) != {"tool_calls"} or not isinstance(data["tool_calls"], list):
        return None
    calls = []
    for index, item in enumerate(data["tool_calls"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        arguments = item.get("arguments", {})
        calls.append(ToolCallRequest(f"call_{round_}_{index + 1}", item["name"], arguments_text(arguments)))
    return calls or None
