"""Tool calls within a turn: bind a definition's tools to their code, check each call, run it.

A call the model asks for is *prepared* first (:func:`prepare`): the tool must be listed by the
current state, its arguments must be a JSON object matching the tool's schema, and its approval
rule says whether a person must agree before it runs. Only a prepared call without an error ever
reaches code; everything else becomes an error result the model reads. Running (:func:`run_batch`,
:func:`arun_batch`) is done by the conversation's driver, several calls at once, each within the
tool's ``timeout``. Every call ends as a :class:`ToolRun`: what ran, with what, and what came back.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from llm_fsm import logic
from llm_fsm.definition import Approval, FSMDefinition, State
from llm_fsm.errors import Problem
from llm_fsm.hooks import Hooks, ToolFunction
from llm_fsm.llm import ToolCallRequest
from llm_fsm.values import ContextValueError, as_json_data

ToolMode = Literal["native", "json"]
MAX_RESULT_CHARS = 4000  # what the model reads of one result; the whole result is kept in the ToolRun
MAX_ERROR_CHARS = 500


class ToolRun(BaseModel):
    """One tool call of a turn: its arguments (an object, or the raw text when it was not JSON),
    and its ``result`` or ``error``; ``duration`` in seconds (0 for a call that never ran);
    ``approval``: ``approved``, ``rejected`` or ``supplied`` when a person decided."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: Any
    result: Any = None
    error: str | None = None
    duration: float = 0.0
    round: int = 1
    approval: str | None = None

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

    def refused(self, error: str, approval: str | None = None) -> ToolRun:
        return ToolRun(
            id=self.call.id, name=self.call.name, arguments=self.arguments, error=_bounded(error, MAX_ERROR_CHARS),
            round=self.round, approval=approval,
        )  # fmt: skip


# -- binding ------------------------------------------------------------------------------------


def bind(definition: FSMDefinition, hooks: Hooks) -> tuple[dict[str, BoundTool], list[Problem]]:
    """The tools the states list, bound to their code; a problem per tool without code or schema."""
    listed: dict[str, list[str]] = {}
    for sid, state in definition.states.items():
        for name in state.tools:
            listed.setdefault(name, []).append(sid)
    bound, problems = {}, []
    for name, states in listed.items():
        function = hooks.tools.get(name)
        declared = definition.tools.get(name)
        if function is None:
            from llm_fsm.loader import did_you_mean

            where = ", ".join(f"'{s}'" for s in states)
            message = f"state {where} lists tool '{name}', which is not registered"
            message += f" (@hooks.tool('{name}'), or an MCP server that serves it)"
            hint = did_you_mean(name, hooks.tools)
            problems.append(Problem(f"states.{states[0]}.tools", message, hint=hint, code="unbound_tool"))
            continue
        parameters = (declared.parameters if declared else None) or function.parameters
        parameters = parameters or signature_schema(function.function)
        if parameters is None:
            message = f"tool '{name}': no parameters schema (declare 'parameters', or type the function's arguments)"
            problems.append(Problem(f"tools.{name}", message, code="tool_schema"))
            continue
        description = (declared.description if declared else "") or function.description
        bound[name] = BoundTool(
            name, description, parameters, function,
            timeout=declared.timeout if declared else 30.0,
            approval=declared.approval if declared else "none",
            result_key=declared.result_key if declared else None,
        )  # fmt: skip
    return bound, problems


def signature_schema(function: Any) -> dict[str, Any] | None:
    """A JSON Schema of a function's keyword arguments, from its type hints (pydantic); None if it
    takes ``*args`` only."""
    from pydantic import create_model

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    fields: dict[str, Any] = {}
    open_ended = False
    for name, parameter in signature.parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:
            open_ended = True
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        hint = Any if parameter.annotation is parameter.empty else parameter.annotation
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[name] = (hint, default)
    if not fields and not open_ended and signature.parameters:
        return None
    try:
        hints = inspect.get_annotations(function, eval_str=True)
        fields = {n: (hints.get(n, hint), default) for n, (hint, default) in fields.items()}
        schema = create_model(f"{getattr(function, '__name__', 'tool')}_arguments", **fields).model_json_schema()
    except Exception:  # a hint pydantic cannot turn into a schema: the author declares one instead
        return None
    schema.pop("title", None)
    for value in schema.get("properties", {}).values():
        value.pop("title", None)
    if open_ended:
        schema["additionalProperties"] = True
    return schema


# -- checking -----------------------------------------------------------------------------------


def prepare(
    call: ToolCallRequest, state: State, tools: Mapping[str, BoundTool], context: Mapping[str, Any], round_: int
) -> Prepared:
    """``call`` checked: listed by ``state``, arguments a JSON object that matches the schema, approval."""
    arguments: Any = call.arguments
    tool = tools.get(call.name) if call.name in state.tools else None
    if tool is None:
        available = ", ".join(state.tools) or "none"
        error = f"tool '{call.name}' is not available in state '{state.id}' (available: {available})"
        return Prepared(call, None, arguments, round_, error)
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return Prepared(call, tool, arguments, round_, f"the arguments are not valid JSON: {exc.msg}")
    if not isinstance(arguments, dict):
        return Prepared(call, tool, arguments, round_, "the arguments must be a JSON object")
    from llm_fsm.schemas import violation

    problem = violation(tool.parameters, arguments)
    if problem:
        return Prepared(call, tool, arguments, round_, f"the arguments do not match the schema: {problem}")
    return Prepared(call, tool, arguments, round_, needs_approval=needs_approval(tool, arguments, context))


def needs_approval(tool: BoundTool, arguments: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    if isinstance(tool.approval, Approval):
        return logic.truthy(logic.evaluate(tool.approval.when, {"args": arguments, "context": dict(context)}))
    return tool.approval == "always"


# -- running ------------------------------------------------------------------------------------


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
POOL_SIZE = 64  # tool calls running at once in the sync API, across conversations


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # threads are reused: starting one per call would cost more than most tools
            _POOL = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="llm_fsm-tool")
        return _POOL


def run_batch(calls: Sequence[Prepared]) -> list[ToolRun]:
    """Run ``calls`` (each without an error) at once, in worker threads, each within its timeout.

    A call that times out is reported as failed at once, but its thread is not interrupted (Python
    cannot): it holds a worker until the function returns.
    """
    if not calls:
        return []
    pool = _pool()
    futures = [(p, time.perf_counter(), pool.submit(_call_sync, p)) for p in calls]
    return [_outcome(p, started, future) for p, started, future in futures]


async def arun_batch(calls: Sequence[Prepared]) -> list[ToolRun]:
    """Run ``calls`` concurrently on the running loop (plain functions in threads), each within its timeout."""
    return list(await asyncio.gather(*(_arun(p) for p in calls)))


def _call_sync(prepared: Prepared) -> Any:
    tool = _tool(prepared)
    if tool.function.is_async:  # in this worker thread, on a loop of its own
        return asyncio.run(tool.function.function(**prepared.arguments))
    return tool.function.function(**prepared.arguments)


def _outcome(prepared: Prepared, started: float, future: Any) -> ToolRun:
    tool = _tool(prepared)
    remaining = max(0.0, tool.timeout - (time.perf_counter() - started))
    try:
        value = future.result(timeout=remaining)
    except FutureTimeout:
        return _failed(prepared, f"timed out after {tool.timeout:g} s", started)
    except Exception as exc:  # the tool raised: the model is told, the turn goes on
        return _failed(prepared, _describe(exc), started)
    return _succeeded(prepared, value, started)


async def _arun(prepared: Prepared) -> ToolRun:
    tool, started = _tool(prepared), time.perf_counter()
    function = tool.function.function
    try:
        if tool.function.is_async:
            value = await asyncio.wait_for(function(**prepared.arguments), tool.timeout)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(function, **prepared.arguments), tool.timeout)
    except TimeoutError:
        return _failed(prepared, f"timed out after {tool.timeout:g} s", started)
    except Exception as exc:
        return _failed(prepared, _describe(exc), started)
    return _succeeded(prepared, value, started)


def _tool(prepared: Prepared) -> BoundTool:
    if prepared.tool is None or prepared.error is not None:
        raise ValueError(f"tool call {prepared.call.name!r} was refused and must not run")
    return prepared.tool


def _succeeded(prepared: Prepared, value: Any, started: float) -> ToolRun:
    try:
        result = as_json_data({"result": value}, source=f"the result of tool '{prepared.call.name}'")["result"]
    except ContextValueError as exc:
        return _failed(prepared, str(exc), started)
    return ToolRun(
        id=prepared.call.id, name=prepared.call.name, arguments=prepared.arguments, result=result,
        duration=time.perf_counter() - started, round=prepared.round,
    )  # fmt: skip


def _failed(prepared: Prepared, error: str, started: float) -> ToolRun:
    return ToolRun(
        id=prepared.call.id, name=prepared.call.name, arguments=prepared.arguments,
        error=_bounded(error, MAX_ERROR_CHARS), duration=time.perf_counter() - started, round=prepared.round,
    )  # fmt: skip


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- what the model reads -----------------------------------------------------------------------


def result_text(run: ToolRun) -> str:
    """A call's outcome as the model reads it: its result as JSON, or ``{"error": ...}``; bounded."""
    body: dict[str, Any] = {"error": run.error} if run.error is not None else {"result": run.result}
    text = json.dumps(body, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_RESULT_CHARS:  # still one JSON object: its beginning, as text, and what was left out
        body = {"truncated": text[:MAX_RESULT_CHARS], "omitted_chars": len(text) - MAX_RESULT_CHARS}
        text = json.dumps(body, ensure_ascii=False)
    # JSON escapes, so that no tag can open or close in any prompt; the model reads the same data
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[truncated {len(text) - limit} chars]"


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


def requested_in_text(text: str, round_: int) -> list[ToolCallRequest]:
    """The calls a reply written in the JSON form asks for (none when it is not that form)."""
    from llm_fsm.contract import reply_object
    from llm_fsm.errors import ReplyFormatError

    try:
        data = reply_object(text)
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
