"""Tool calls within a turn: bind a definition's tools to their code, check each call, run it.

A call the model asks for is *prepared* first (:func:`prepare`): the tool must be listed by the
current state, its arguments must be a JSON object matching the tool's schema, and its approval
rule says whether a person must agree before it runs. Only a prepared call without an error ever
reaches code; everything else becomes an error result the model reads. Running (:func:`run_batch`,
:func:`arun_batch`) is done by the conversation's driver, several calls at once, each within the
tool's ``timeout``. Every call ends as a :class:`ToolRun`: what ran, with what, and what came back.

Every call that may run has an *idempotency key* (:func:`call_key`), the same in every retry of the
turn: the conversation's uid, the turn's number, the tool, and how many calls of that tool the turn
made before. A tool function that takes an ``idempotency_key`` keyword gets it (the model never sees
or writes it); MCP calls carry it in their request's ``_meta``. A process that dies after a call ran
but before its turn was saved runs the turn again on retry, and with it the call, with the same key:
a tool that passes the key on (payment APIs take one) or remembers it has its effect once.

By concern: :mod:`~llm_fsm.tools.tool_types` (the call's types), :mod:`~llm_fsm.tools.binding` (tools
joined to their code, keys), this module (checking a call), :mod:`~llm_fsm.tools.running` (running
calls) and :mod:`~llm_fsm.tools.messages` (what the model reads and writes). Everything is
importable from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from llm_fsm.definition.models import Approval, State
from llm_fsm.llm import ToolCallRequest
from llm_fsm.logic import rules as logic
from llm_fsm.tools.binding import arguments_model, bind, call_key, signature_schema, takes_key
from llm_fsm.tools.messages import (
    JSON_REQUEST_SCHEMA,
    arguments_text,
    json_request_schema,
    json_request_text,
    masked,
    native_exchange,
    requested_in_text,
    result_text,
    tool_request,
    unique_ids,
)
from llm_fsm.tools.running import arun_batch, bound_tool, describe, raised, run_batch
from llm_fsm.tools.tool_types import (
    KEY_PARAMETER,
    MAX_ERROR_CHARS,
    MAX_RESULT_CHARS,
    BoundTool,
    Prepared,
    ToolRun,
    bounded,
)

__all__ = [
    "JSON_REQUEST_SCHEMA",
    "KEY_PARAMETER",
    "MAX_ERROR_CHARS",
    "MAX_RESULT_CHARS",
    "BoundTool",
    "Prepared",
    "ToolMode",
    "ToolRun",
    "bounded",
    "bound_tool",
    "arguments_model",
    "arguments_text",
    "arun_batch",
    "bind",
    "call_key",
    "json_request_schema",
    "json_request_text",
    "masked",
    "native_exchange",
    "needs_approval",
    "prepare",
    "raised",
    "requested_in_text",
    "result_text",
    "run_batch",
    "signature_schema",
    "takes_key",
    "tool_request",
    "unique_ids",
]

ToolMode = Literal["native", "json"]


def prepare(
    call: ToolCallRequest, state: State, tools: Mapping[str, BoundTool], context: Mapping[str, Any], round_: int
) -> Prepared:
    """``call`` checked: listed by ``state``, arguments a JSON object that matches the schema, approval."""
    parse_error = None
    try:
        arguments: Any = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        arguments, parse_error = call.arguments, f"the arguments are not valid JSON: {exc.msg}"
    tool = tools.get(call.name) if call.name in state.tools else None
    if tool is None:
        available = ", ".join(state.tools) or "none"
        error = f"tool '{call.name}' is not available in state '{state.id}' (available: {available})"
        return Prepared(call, None, arguments, round_, error)
    if parse_error is not None:
        return Prepared(call, tool, arguments, round_, parse_error)
    if not isinstance(arguments, dict):
        return Prepared(call, tool, arguments, round_, "the arguments must be a JSON object")
    from llm_fsm.schemas import violation

    try:
        problem = violation(tool.parameters, arguments)
        if problem is None:
            tool.keywords(arguments)  # they also fit the function's types
    except ValueError as exc:
        problem = str(exc)
    except Exception as exc:  # a schema jsonschema cannot apply (an unresolvable $ref...): the call cannot be checked
        return Prepared(call, tool, arguments, round_, f"the tool's schema cannot be checked: {describe(exc)}")
    if problem:
        return Prepared(call, tool, arguments, round_, f"the arguments do not match the schema: {problem}")
    return Prepared(call, tool, arguments, round_, needs_approval=needs_approval(tool, arguments, context))


def needs_approval(tool: BoundTool, arguments: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """Whether a person must agree first. A rule that cannot be evaluated asks for approval: it fails closed."""
    if isinstance(tool.approval, Approval):
        try:
            return logic.truthy(logic.evaluate(tool.approval.when, {"args": arguments, "context": dict(context)}))
        except Exception:  # noqa: BLE001 (division by zero, a rule too deep...): safer to ask
            return True
    return tool.approval == "always"
