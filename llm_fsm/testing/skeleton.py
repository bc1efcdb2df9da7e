"""Test files written from a definition's paths, runnable offline as written.

:func:`skeleton` makes one case per path of :func:`~llm_fsm.authoring.paths.covering_paths`: the
simulated model walks the path, and its replies and the states reached become the case's steps
and expectations (``llm-fsm paths --write-tests FILE``). In states with tools the simulated model
calls each tool once: the calls become expectations, and a tool without code is stubbed in the
file (``"tools"``) with a placeholder result for the author to make real.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.authoring.paths import covering_paths
from llm_fsm.conversation import Conversation
from llm_fsm.definition.condition_values import condition_keys
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.models import Condition, FSMDefinition, Transition
from llm_fsm.errors import FSMError
from llm_fsm.hooks import Hooks
from llm_fsm.testing.conversation_tests import turn_caller, whole_run
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
    paths = covering_paths(definition)
    stubs = _placeholder_stubs(definition, hooks, paths)
    walking = hooks
    if stubs:
        tools = StubbedTools()
        tools.begin({name: ToolStub(result=result) for name, result in stubs.items()})
        walking = tools.hooks(hooks, stubs)
    Conversation(definition, SimulatedLLM(definition), hooks=walking)  # unregistered handlers: one error, up front
    cases, reasons = [], []
    with asyncio.Runner() as runner:
        for path in paths:
            case = _case(definition, definition_path, path, seed, walking, runner, set(stubs))
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


def _placeholder_stubs(definition: FSMDefinition, hooks: Hooks | None, paths: list[list[str]]) -> dict[str, Any]:
    """A placeholder result for each tool the states list that ``hooks`` has no code for: a value of
    the tool's ``result_key`` that the automatic moves the paths take after a call need (see
    :func:`_needed_result`), else one its context schema accepts, else a string to replace."""
    listed = dict.fromkeys(name for state in definition.states.values() for name in state.tools)
    stubs = {}
    for name in listed:
        if hooks is not None and name in hooks.tools:
            continue
        declared = definition.tools.get(name)
        key = declared.result_key if declared else None
        if not key:
            stubs[name] = f"sample result of {name}"
            continue
        needed = _needed_result(definition, name, key, paths)
        stubs[name] = needed if needed is not _NONE else sample_value(definition, key)
    return stubs


_NONE = object()  # no automatic move needs a value of the result


def _needed_result(definition: FSMDefinition, tool: str, key: str, paths: list[list[str]]) -> Any:
    """The value of ``key`` that makes the automatic moves hold that the paths take, out of a state listing
    ``tool``, on its result (their conditions read ``key``); ``_NONE`` when there are none or none is found."""
    wanted = []
    for path in paths:
        for source, target in zip(path, path[1:], strict=False):
            if tool in definition.states[source].tools:
                wanted += [m for m in definition.moves(source, target) if m.automatic and m.target_state == target]
    moves = [m for m in wanted if key in _keys_read(m)]
    if not moves:
        return _NONE
    witness = find_witness(moves, schema=definition.context_schema) or {}
    return witness.get(key, _NONE)


def _keys_read(move: Transition) -> set[str]:
    """The top-level context keys the conditions of ``move`` read."""
    return {k.split(".")[0] for c in move.conditions for k in condition_keys(c)}


def _case(
    definition: FSMDefinition,
    definition_path: str,
    path: list[str],
    seed: int,
    hooks: Hooks | None,
    runner: asyncio.Runner,
    stubbed: set[str],
) -> dict[str, Any] | str:
    """The case that walks ``path``, or why the simulated model cannot follow it to its end."""
    context = {} if hooks is not None else _code_keys(definition, path, 0)
    llm = SimulatedLLM(definition, path=path, seed=seed)
    conversation = Conversation(definition, llm, context=context, hooks=hooks)
    moved: list[tuple[str, str]] = []  # (from, to) of every step after the opening, in order
    try:
        steps = _walk(conversation, turn_caller(conversation, runner), llm, path, moved)
    except FSMError as exc:
        blamed = _placeholder_blamed(definition, conversation.state, path, stubbed)
        return f"stopped in {conversation.state}: {str(exc).splitlines()[0]}{blamed}"
    if conversation.state != path[-1]:
        blamed = _placeholder_blamed(definition, conversation.state, path, stubbed)
        return _stuck(llm, path, conversation, moved) + blamed
    case: dict[str, Any] = {"name": " → ".join(path), "definition": definition_path}
    if context:
        case["context"] = context
    case["steps"] = steps
    return case


def _placeholder_blamed(definition: FSMDefinition, state: str, path: list[str], stubbed: set[str]) -> str:
    """Words naming the stubbed tool of ``state`` whose placeholder result an automatic move out of it reads (the
    move the path wanted may need a real result), or "" when there is none."""
    if state not in path or path.index(state) + 1 == len(path):
        return ""
    wanted = path[path.index(state) + 1]
    tools = definition.tools
    for name in definition.states[state].tools:
        key = tools[name].result_key if name in tools else None
        if name not in stubbed or not key:
            continue
        for move in definition.moves(state, wanted):
            if move.automatic and move.target_state == wanted and key in _keys_read(move):
                return (
                    f"; tool '{name}' has no code, and its placeholder result (stored as '{key}') does not make "
                    f"the automatic move to '{wanted}' hold: give the tool's code with --hooks"
                )
    return ""


def _stuck(llm: SimulatedLLM, path: list[str], conversation: Conversation, moved: list[tuple[str, str]]) -> str:
    """Why the conversation, which stopped short of the end of ``path``, went no further."""
    state = conversation.state
    if state not in path:
        return _left(llm, path, conversation, moved)
    wanted = path[path.index(state) + 1]
    snapshot = conversation.snapshot()
    back_to = conversation.definition.return_target(state, snapshot.came_from)
    why = llm.unsatisfied(state, wanted, dict(conversation.context), back_to)
    return why or f"stayed in {state} instead of moving to {wanted}"


def _left(llm: SimulatedLLM, path: list[str], conversation: Conversation, moved: list[tuple[str, str]]) -> str:
    """Where the conversation left ``path``, by which move (its conditions), and why the path's move was not made."""
    state = conversation.state
    left = next(((a, b) for a, b in reversed(moved) if a in path and b not in path), None)
    if left is None or path.index(left[0]) + 1 == len(path):
        return f"left the path for {state}"
    source, target = left
    wanted = path[path.index(source) + 1]
    definition = conversation.definition
    taken = [m for m in definition.moves(source, target) if m.target_state == target]
    kind = "automatic move" if taken and taken[0].automatic else "move"
    held = "; ".join(_condition_text(c) for c in taken[0].conditions) if taken else ""
    said = f" (its condition {held} held)" if held else " (it has no conditions)" if taken else ""
    context = dict(conversation.context)
    unmet = [why for m in definition.moves(source) if m.target_state == wanted and (why := unmet_condition(m, context))]
    why = unmet[0] if unmet else llm.unsatisfied(source, wanted, context)
    instead = f"; {source} → {wanted}: {why}" if why else ""
    return f"left the path for {state}: the {kind} {source} → {target} was taken{said}{instead}"


def _condition_text(condition: Condition) -> str:
    rule = f" {json.dumps(condition.logic)}" if condition.logic is not None else ""
    keys = f" (needs {', '.join(condition.requires_context_keys)})" if condition.requires_context_keys else ""
    return f"'{condition.description or 'unnamed'}'{rule}{keys}"


def _walk(
    conversation: Conversation, turn: Turn, llm: SimulatedLLM, path: list[str], moved: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The opening, then a step per user message until the path's last state (two per state at most); the
    moves of every step go into ``moved``.

    A pause is resumed: a tool call waiting for approval is approved; a handler's pause gets the
    values the next move needs."""
    steps: list[dict[str, Any]] = []

    def step(start: dict[str, Any], method: str, *arguments: Any) -> None:
        mark = len(llm.replies)
        result = turn(method, *arguments)
        moved.extend((r.previous_state, r.state) for r in (*result.steps, result) if r.previous_state is not None)
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


def _expected(run: TurnResult) -> dict[str, Any]:
    """What a step expects: the state, status and pause of the run's last step, and the calls of its whole run
    (a workflow's steps, as the test runner counts them)."""
    result = whole_run(run)
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
