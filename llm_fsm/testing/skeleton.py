"""Test files written from a definition's paths, runnable offline as written.

:func:`skeleton` makes one case per path of :func:`~llm_fsm.authoring.paths.covering_paths`: the
simulated model walks the path, and its replies and the states reached become the case's steps
and expectations (``llm-fsm paths --write-tests FILE``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llm_fsm.authoring.condition_solver import condition_keys, find_witness
from llm_fsm.authoring.paths import covering_paths
from llm_fsm.conversation import Conversation
from llm_fsm.definition import FSMDefinition
from llm_fsm.errors import FSMError
from llm_fsm.hooks import Hooks
from llm_fsm.testing.conversation_tests import _turn_caller
from llm_fsm.testing.simulation import SimulatedLLM
from llm_fsm.turn import TurnResult

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
    Raises :class:`PathNotFollowed` when the simulated model cannot follow a path to its end, and
    :class:`~llm_fsm.errors.DefinitionError` when the definition names handlers or checks ``hooks`` lacks.
    """
    Conversation(definition, SimulatedLLM(definition), hooks=hooks)  # unregistered handlers: one error, up front
    cases, reasons = [], []
    with asyncio.Runner() as runner:
        for path in covering_paths(definition):
            case = _case(definition, definition_path, path, seed, hooks, runner)
            if isinstance(case, str):
                reasons.append(f"path {' → '.join(path)}: {case}")
            else:
                cases.append(case)
    if reasons:
        raise PathNotFollowed(reasons)
    document: dict[str, Any] = {} if schema is None else {"$schema": schema}
    if hooks_spec is not None:
        document["hooks"] = hooks_spec
    return {**document, "cases": cases}


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
        steps = _walk(conversation, _turn_caller(conversation, runner), llm, path)
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
    return (
        llm.unsatisfied(state, wanted, dict(conversation.context)) or f"stayed in {state} instead of moving to {wanted}"
    )


def _walk(conversation: Conversation, turn: Turn, llm: SimulatedLLM, path: list[str]) -> list[dict[str, Any]]:
    """The opening, then a step per user message until the path's last state (two per state at most)."""
    opening = turn("start")
    steps: list[dict[str, Any]] = [{"user": None, "reply": llm.replies[-1], "expect": _expected(opening)}]
    for n in range(len(path) * 2):
        if conversation.ended or conversation.state == path[-1]:
            break
        if conversation.pending is not None:  # a handler paused: resume with what the next move needs
            at = path.index(conversation.state) if conversation.state in path else len(path)
            value = _code_keys(conversation.definition, path, at)
            result = turn("resume", conversation.pending.token, value)
            steps.append({"resume": value, "reply": llm.replies[-1], "expect": _expected(result)})
            continue
        text = f"(user message {n + 1})"
        result = turn("send", text)
        steps.append({"user": text, "reply": llm.replies[-1], "expect": _expected(result)})
    return steps


def _expected(result: Any) -> dict[str, Any]:
    expect: dict[str, Any] = {"state": result.state, "max_llm_calls": 1}
    if result.ended:
        expect["status"] = "ended"
    elif result.paused:
        expect["status"] = "paused"
    return expect


def _code_keys(definition: FSMDefinition, path: list[str], start: int) -> dict[str, Any]:
    """Values for keys only code sets that the moves of ``path`` from position ``start`` need."""
    protected = set(definition.handler_only_keys)
    needed: dict[str, Any] = {}
    for source, target in zip(path[start:], path[start + 1 :], strict=False):
        for transition in definition.states[source].transitions:
            keys = {k.split(".")[0] for c in transition.conditions for k in condition_keys(c)}
            if transition.target_state != target or not keys & protected:
                continue
            witness = find_witness([transition], schema=definition.context_schema) or {}
            needed.update({k: v for k, v in witness.items() if k in protected})
    return needed
