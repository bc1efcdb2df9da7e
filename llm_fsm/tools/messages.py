"""Tool calls and results as the model reads and writes them: result text (bounded, no tag can open),
the native exchange of messages, and the JSON form of a request (its schema, and reading it from a reply)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

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
            "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": tool.written_out},
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
