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
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from llm_fsm import logic
from llm_fsm.definition import Approval, FSMDefinition, State, ToolErrorDetail
from llm_fsm.errors import ContextValueError, Problem
from llm_fsm.hooks import Hooks, ToolFunction
from llm_fsm.llm import ToolCallRequest
from llm_fsm.telemetry import NO_SPAN
from llm_fsm.values import as_json_data, derived_uid, exception_text

if TYPE_CHECKING:
    from llm_fsm.telemetry import NoSpan
    from llm_fsm.telemetry.spans import ToolSpan

ToolMode = Literal["native", "json"]
_log = logging.getLogger("llm_fsm.tools")
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
            from llm_fsm.wording import did_you_mean

            where = ", ".join(f"'{s}'" for s in states)
            message = f"state {where} lists tool '{name}', which is not registered"
            message += f" (@hooks.tool('{name}'), or an MCP server that serves it)"
            hint = did_you_mean(name, hooks.tools)
            problems.append(Problem(f"states.{states[0]}.tools", message, hint=hint, code="unbound_tool"))
            continue
        model = arguments_model(function.function)
        parameters = (declared.parameters if declared else None) or function.parameters
        parameters = parameters or (_schema_of(model) if model is not None else None)
        problem = _parameters_problem(function, parameters)
        if problem:
            problems.append(Problem(f"tools.{name}", f"tool '{name}': {problem}", code="tool_schema"))
            continue
        description = (declared.description if declared else "") or function.description
        bound[name] = BoundTool(
            name, description, parameters or {}, function,
            timeout=declared.timeout if declared else 30.0,
            approval=declared.approval if declared else "none",
            result_key=declared.result_key if declared else None,
            model=model, takes_key=takes_key(function.function),
            error_detail=(declared.error_detail if declared else None) or definition.tool_error_detail,
            secret_keys=definition.secret_keys if definition.mask_secrets else None,
        )  # fmt: skip
    return bound, problems


def takes_key(function: Any) -> bool:
    """Whether ``function`` names an ``idempotency_key`` parameter (a ``**kwargs`` alone does not ask for it)."""
    try:
        parameter = inspect.signature(function).parameters.get(KEY_PARAMETER)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)


def call_key(uid: str, turn: int | str, tool: str, ordinal: int) -> str:
    """The idempotency key of the ``ordinal``-th call (from 0) of ``tool`` in turn ``turn`` of the conversation
    ``uid``: the same in every retry of that turn, in any process; different for any other call."""
    return "llmfsm-" + derived_uid("tool-call", uid, turn, tool, ordinal)


def _parameters_problem(function: ToolFunction, parameters: dict[str, Any] | None) -> str | None:
    if parameters is None:
        return "no parameters schema (declare 'parameters', or type the function's arguments)"
    from llm_fsm.schemas import schema_problem

    problem = schema_problem(parameters)
    if problem:
        return f"invalid parameters schema: {problem}"
    if parameters.get("type", "object") != "object":
        return "its parameters are a JSON Schema of type object"
    try:
        positional = [
            p.name for p in inspect.signature(function.function).parameters.values() if p.kind is p.POSITIONAL_ONLY
        ]
    except (TypeError, ValueError):
        positional = []
    if positional:
        return f"the function takes {', '.join(positional)} by position only; a tool is called with keywords"
    mcp = getattr(function.function, "mcp_tool", False)  # an MCP tool's own idempotency_key argument gets the key
    if not mcp and takes_key(function.function) and KEY_PARAMETER in (parameters.get("properties") or {}):
        return (
            f"'{KEY_PARAMETER}' is in its parameters, but the runtime gives the function each call's key: the model"
            f" must not see or write it (every call that gives it is refused), so leave it out of 'parameters'"
        )
    return None


def signature_schema(function: Any) -> dict[str, Any] | None:
    """A JSON Schema of a function's keyword arguments, from its type hints (pydantic); None if it
    has none that can be called by keyword."""
    model = arguments_model(function)
    return _schema_of(model) if model is not None else None


def arguments_model(function: Any) -> type[BaseModel] | None:
    """A pydantic model of a function's keyword arguments (hints, defaults; extra arguments refused
    unless it takes ``**kwargs``); None when it takes ``*args`` only or a hint is not one pydantic reads."""
    from pydantic import create_model

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    fields: dict[str, Any] = {}
    open_ended = False
    try:
        hints = inspect.get_annotations(function, eval_str=True) if inspect.isfunction(function) else {}
    except Exception:  # a hint that names something undefined: read the signature's own
        hints = {}
    for name, parameter in signature.parameters.items():
        if name == KEY_PARAMETER:  # the runtime's to give, never the model's to write
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            open_ended = True
        elif parameter.kind is not parameter.VAR_POSITIONAL:
            hint = hints.get(name, Any if parameter.annotation is parameter.empty else parameter.annotation)
            fields[name] = (hint, ... if parameter.default is parameter.empty else parameter.default)
    if not fields and not open_ended and signature.parameters:
        return None
    config = ConfigDict(extra="allow" if open_ended else "forbid", arbitrary_types_allowed=False)
    try:
        model = create_model(f"{getattr(function, '__name__', 'tool')}_arguments", __config__=config, **fields)
        model.model_json_schema()
    except Exception:  # a hint pydantic cannot read: the author declares the schema instead
        return None
    return model


def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for value in schema.get("properties", {}).values():
        value.pop("title", None)
    if schema.get("additionalProperties") is False:
        del schema["additionalProperties"]  # the model refuses extras itself, with a clearer message
    return schema


# -- checking -----------------------------------------------------------------------------------


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
        return Prepared(call, tool, arguments, round_, f"the tool's schema cannot be checked: {_describe(exc)}")
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


# -- running ------------------------------------------------------------------------------------


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
POOL_SIZE = 64  # tool calls running at once in the sync API, across conversations


def _forget_pool_in_child() -> None:
    """After ``os.fork()``: the parent's pool has no threads in this process, so every call would wait out its
    timeout (a pre-fork server, multiprocessing with fork). The child makes its own pool on its first call."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # threads are reused: starting one per call would cost more than most tools
            _POOL = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="llm_fsm-tool")
        return _POOL


def _retire_pool(pool: ThreadPoolExecutor) -> None:
    """A call outlived its timeout in ``pool``: later calls get a fresh pool, so that threads stuck in
    tools that never return cannot starve them (the old pool's threads end when their calls do)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is pool:
            _POOL = None
    pool.shutdown(wait=False, cancel_futures=False)


def run_batch(calls: Sequence[Prepared], spans: Sequence[ToolSpan] | None = None) -> list[ToolRun]:
    """Run ``calls`` (each without an error) at once, in worker threads, each within its timeout.

    A call that has not started when its time is up is cancelled and never runs. One that started
    is reported as timed out, but its thread cannot be interrupted (Python cannot): the function
    runs on until it returns, and the pool is replaced so that it holds no later call back.
    """
    if not calls:
        return []
    pool = _pool()
    traced: Sequence[ToolSpan | NoSpan] = spans or [NO_SPAN] * len(calls)
    futures = [(p, s, time.perf_counter(), pool.submit(_call_sync, p, s)) for p, s in zip(calls, traced, strict=True)]
    return [span.ended(_outcome(p, started, future, pool)) for p, span, started, future in futures]


async def arun_batch(calls: Sequence[Prepared], spans: Sequence[ToolSpan] | None = None) -> list[ToolRun]:
    """Run ``calls`` concurrently on the running loop (plain functions in threads), each within its timeout."""
    traced: Sequence[ToolSpan | NoSpan] = spans or [NO_SPAN] * len(calls)
    runs = await asyncio.gather(*(_arun(p, span) for p, span in zip(calls, traced, strict=True)))
    return [span.ended(run) for span, run in zip(traced, runs, strict=True)]


def _call_sync(prepared: Prepared, span: ToolSpan | NoSpan) -> Any:
    tool = _tool(prepared)
    keywords = _keywords(tool, prepared)
    if tool.function.is_async:  # in this worker thread, on a loop of its own
        # Unlike a thread, a coroutine can be stopped: cancelled at the tool's timeout (when the
        # caller gives up on it), it frees this thread and ends its I/O (an MCP request) instead of
        # running on and holding the interpreter's exit back, which joins these threads.
        return asyncio.run(asyncio.wait_for(span.run(tool.function.function, keywords), tool.timeout))
    return span.run(tool.function.function, keywords)


def _outcome(prepared: Prepared, started: float, future: Any, pool: ThreadPoolExecutor) -> ToolRun:
    tool = _tool(prepared)
    remaining = max(0.0, tool.timeout - (time.perf_counter() - started))
    try:
        value = future.result(timeout=remaining)
    except FutureTimeout:
        if future.cancel():  # still waiting for a worker: it will never run
            return _failed(prepared, f"not run: no worker was free within {tool.timeout:g} s", started)
        _retire_pool(pool)
        return _failed(prepared, f"timed out after {tool.timeout:g} s (it may still finish)", started)
    except Exception as exc:  # the tool raised: the model is told, the turn goes on
        return _failed(prepared, raised(prepared, exc), started)
    return _succeeded(prepared, value, started)


async def _arun(prepared: Prepared, span: ToolSpan | NoSpan) -> ToolRun:
    tool, started = _tool(prepared), time.perf_counter()
    function = tool.function.function
    try:
        keywords = _keywords(tool, prepared)
        if tool.function.is_async:
            value = await asyncio.wait_for(span.run(function, keywords), tool.timeout)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(span.run, function, keywords), tool.timeout)
    except TimeoutError:
        return _failed(prepared, f"timed out after {tool.timeout:g} s", started)
    except Exception as exc:
        return _failed(prepared, raised(prepared, exc), started)
    return _succeeded(prepared, value, started)


def _keywords(tool: BoundTool, prepared: Prepared) -> dict[str, Any]:
    keywords = tool.keywords(prepared.arguments)
    if tool.takes_key:
        keywords[KEY_PARAMETER] = prepared.key
    return keywords


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
        duration=time.perf_counter() - started, round=prepared.round, idempotency_key=prepared.key,
    )  # fmt: skip


def _failed(prepared: Prepared, error: str, started: float) -> ToolRun:
    return ToolRun(
        id=prepared.call.id, name=prepared.call.name, arguments=prepared.arguments,
        error=_bounded(error, MAX_ERROR_CHARS), duration=time.perf_counter() - started, round=prepared.round,
        idempotency_key=prepared.key,
    )  # fmt: skip


def raised(prepared: Prepared, exc: BaseException) -> str:
    """What the model, ``rejected`` and the turn's result say of an exception the tool raised: its type
    and first line with secret-looking values masked (the call's secret arguments too), or its type only."""
    tool = _tool(prepared)
    text = _describe(exc)
    if tool.secret_keys is not None:
        from llm_fsm.secrets import mask_text, secret_values

        known = secret_values(prepared.arguments, tool.secret_keys)
        text = mask_text(text, tool.secret_keys, known)
    _log.debug("tool %r raised %s", tool.name, text)  # masked too: logs are no safer than prompts
    return type(exc).__name__ if tool.error_detail == "type" else text


def _describe(exc: BaseException) -> str:
    message = exception_text(exc).strip()
    text = message.splitlines()[0] if message else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- what the model reads -----------------------------------------------------------------------


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


def json_request_schema(tools: Sequence[BoundTool], most: int) -> dict[str, Any]:
    """:data:`JSON_REQUEST_SCHEMA` narrowed to ``tools``: each call names one of them, with its arguments,
    and at most ``most`` calls (a grammar then ends the list: a looping model repeats a call to the token limit)."""
    calls = [
        {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": tool.parameters},
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
