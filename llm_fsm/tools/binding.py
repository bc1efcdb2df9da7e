"""Binding: a definition's tools joined to the functions registered for them, with their argument
schemas (declared, or read from the functions' type hints) checked; and each call's idempotency key."""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import Problem
from llm_fsm.hooks import Hooks, ToolFunction
from llm_fsm.tools.tool_types import KEY_PARAMETER, BoundTool
from llm_fsm.values import derived_uid


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
            from llm_fsm.definition.wording import did_you_mean

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
            # None when masking is off: the text of an error a tool raises is then given as it was raised
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
        # eval_str: hints written as text (from __future__ import annotations) are read as the types they name
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
    if not fields and not open_ended and any(name != KEY_PARAMETER for name in signature.parameters):  # *args only
        return None
    config = ConfigDict(extra="allow" if open_ended else "forbid", arbitrary_types_allowed=False)
    try:
        model = create_model(f"{getattr(function, '__name__', 'tool')}_arguments", __config__=config, **fields)
        # made now: a hint pydantic accepts but cannot write as a JSON Schema fails at binding, not at a call
        model.model_json_schema()
    except Exception:  # a hint pydantic cannot read: the author declares the schema instead
        return None
    return model


def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    # pydantic's titles only repeat the names, in the tokens of every request that lists the tool
    schema.pop("title", None)
    for value in schema.get("properties", {}).values():
        value.pop("title", None)
    if schema.get("additionalProperties") is False:
        del schema["additionalProperties"]  # the model refuses extras itself, with a clearer message
    return schema
