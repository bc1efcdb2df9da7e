"""Test files written from a definition's paths, runnable offline as written.

:func:`skeleton` makes one case per path of :func:`~llm_fsm.authoring.paths.covering_paths`: the
simulated model walks the path, and its replies and the states reached become the case's steps
and expectations (``llm-fsm paths --write-tests FILE``). In states with tools the simulated model
calls each tool once: the calls become expectations, and a tool without code is stubbed in the
file (``"tools"``) with a placeholder result for the author to make real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.authoring.paths import covering_paths
from llm_fsm.conversation import Conversation
from llm_fsm.definition.condition_values import condition_keys
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import FSMError
from llm_fsm.hooks import Hooks
from llm_fsm.testing.conversation_tests import turn_caller
from llm_fsm.testing.simulation import SimulatedLLM, sample_value
from llm_fsm.testing.tool_scripts import StubbedTools, ToolStub
from llm_fsm.turn.runner import TurnResult

Turn = Callable[..., TurnResult]  # turn("send", text): a conversation's sync method, or its async twin run


class PathNotFollowed(FSMError):
    """The simulated model could not walk some paths; ``reasons`` says why, one line per path."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("\n".join(reasons))


def skeleton(
    definition: FSMDefinition,
    definition_path: str,
    seed: int = 0,
    *,
    hooks: Hooks | None = None,
    hooks_spec: str | None = None,
    schema: str | None = None,
) -> dict[str, Any]:
    """A test file: one case per covering path, replies from the simulated model, expected states.

    Without ``hooks``, the keys only code sets are given values up front where a path needs them;
    with ``hooks``, the handlers run and set them, and a pause is resumed with the values the next
    move needs; async handlers and checks run on the async API (one event loop for the whole walk).
    ``hooks_spec`` is written into the file (``"hooks"``) so that it runs as written, and ``schema``
    as its ``"$schema"`` (where the test-file schema is, seen from the file; left out when None).
    Tools that ``hooks`` has no code for are stubbed (in the file too) with a placeholder result.
    Raises :class:`PathNotFollowed` when the simulated model cannot follow a path to its end, and
    :class:`~llm_fsm.errors.DefinitionError` when the definition names handlers or checks ``hooks`` lacks.
    """
    stubs = _placeholder_stubs(definition, hooks)
    walking = hooks
    if stubs:
        tools = StubbedTools()
        tools.begin({name: ToolStub(result=result) for name, result in stubs.items()})
        walking = tools.hooks(hooks, stubs)
    Conversation(definition, SimulatedLLM(definition), hooks=walking)  # unregistered handlers: one error, up front
    cases, reasons = [], []
    with asyncio.Runner() as runner:
        for path in covering_paths(definition):
            case = _case(definition, definition_path, path, seed, walking, runner)
            if isinstance(case, str):
                reasons.append(f"path {' → '.join(path)}: {case}")
            else:
                cases.append(case)
    if reasons:
        raise PathNotFollowed(reasons)
    document: dict[str, Any] = {} if schema is None else {"$schema": schema}
    if hooks_spec is not None:
        document["hooks"] = hooks_spec
    if stubs:
        document["tools"] = {name: {"result": result} for name, result in stubs.items()}
    return {**document, "cases": cases}


def _placeholder_stubs(definition: FSMDefinition, hooks: Hooks | None) -> dict[str, Any]:
    """A placeholder result for each tool the states list that ``hooks`` has no code for: a value of
    the tool's ``result_key`` (one its context schema accepts), else a string to replace."""
    listed = dict.fromkeys(name for state in definition.states.values() for name in state.tools)
    stubs = {}
    for name in listed:
        if hooks is not None and name in hooks.tools:
            continue
        declared = definition.tools.get(name)
        key = declared.result_key if declared else None
        stubs[name] = sample_value(definition, key) if key else f"sample result of {name}"
    return stubs


def _case(
    definition: FSMDefinition,
    definition_path: str,
    path: list[str],
    seed: int,
    hooks: Hooks | None,
    runner: asyncio.Runner,
) -> dict[str, Any] | str:
    """The case that walks ``path``, or why the simulated model cannot follow it to its end."""
    context = {} if hooks is not None else _code_keys(definition, path, 0)
    llm = SimulatedLLM(definition, path=path, seed=seed)
    conversation = Conversation(definition, llm, context=context, hooks=hooks)
    try:
        steps = _walk(conversation, turn_caller(conversation, runner), llm, path)
    except FSMError as exc:
        return f"stopped in {conversation.state}: {str(exc).splitlines()[0]}"
    if conversation.state != path[-1]:
        return _stuck(llm, path, conversation)
    case: dict[str, Any] = {"name": " → ".join(path), "definition": definition_path}
    if context:
        case["context"] = context
    case["steps"] = steps
    return case


def _stuck(llm: SimulatedLLM, path: list[str], conversation: Conversation) -> str:
    """Why the conversation, which stopped short of the end of ``path``, went no further."""
    state = conversation.state
    if state not in path:
        return f"left the path for {state}"
    wanted = path[path.index(state) + 1]
    snapshot = conversation.snapshot()
    back_to = conversation.definition.return_target(state, snapshot.came_from)
    why = llm.unsatisfied(state, wanted, dict(conversation.context), back_to)
    return why or f"stayed in {state} instead of moving to {wanted}"


def _walk(conversation: Conversation, turn: Turn, llm: SimulatedLLM, path: list[str]) -> list[dict[str, Any]]:
    """The opening, then a step per user message until the path's last state (two per state at most).

    A pause is resumed: a tool call waiting for approval is approved; a handler's pause gets the
    values the next move needs."""
    steps: list[dict[str, Any]] = []

    def step(start: dict[str, Any], method: str, *arguments: Any) -> None:
        mark = len(llm.replies)
        result = turn(method, *arguments)
        made = llm.replies[mark:]
        replies = {"reply": made[0]} if len(made) == 1 else {"replies": made} if made else {}
        steps.append({**start, **replies, "expect": _expected(result)})

    step({"user": None}, "start")
    for n in range(len(path) * 2):
        if conversation.ended or conversation.state == path[-1]:
            break
        pending = conversation.pending
        if pending is not None and pending.kind == "tool_approval":
            step({"resume": {"approved": True}}, "resume", pending.token, {"approved": True})
            continue
        if pending is not None:  # a handler paused: resume with what the next move needs
            at = path.index(conversation.state) if conversation.state in path else len(path)
            value = _code_keys(conversation.definition, path, at)
            step({"resume": value}, "resume", pending.token, value)
            continue
        text = f"(user message {n + 1})"
        step({"user": text}, "send", text)
    return steps


def _expected(result: Any) -> dict[str, Any]:
    expect: dict[str, Any] = {"state": result.state, "max_llm_calls": max(1, result.llm_calls)}
    if result.ended:
        expect["status"] = "ended"
    elif result.paused:
        expect["status"] = "paused"
    if result.tool_calls:
        expect["tool_calls"] = [{"name": run.name, "arguments": run.arguments} for run in result.tool_calls]
    if result.pending is not None and result.pending.kind == "tool_approval":
        waiting = result.pending.tool_call or {}
        expect["awaiting_approval"] = {"name": waiting.get("name"), "arguments": waiting.get("arguments")}
    return expect


def _code_keys(definition: FSMDefinition, path: list[str], start: int) -> dict[str, Any]:
    """Values for keys only code sets that the moves of ``path`` from position ``start`` need."""
    protected = set(definition.handler_only_keys)
    needed: dict[str, Any] = {}
    for source, target in zip(path[start:], path[start + 1 :], strict=False):
        for transition in definition.moves(source, target):  # a "$return" on a path goes to the next state
            keys = {k.split(".")[0] for c in transition.conditions for k in condition_keys(c)}
            if transition.target_state != target or not keys & protected:
                continue
            witness = find_witness([transition]) or {}
            needed.update({k: v for k, v in witness.items() if k in protected})
    return needed
