"""Paths through a definition, and test-file skeletons that walk them with the simulated model.

``covering_paths`` returns the shortest path from the initial state to each terminal state, plus,
for every state those paths miss, the shortest path through it to a terminal state: together
they visit every reachable state. ``skeleton`` turns them into a test file whose scripted replies
come from :class:`~llm_fsm.testing.simulation.SimulatedLLM`, so it runs offline as written.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Any

from llm_fsm.authoring.condition_solver import condition_keys, find_witness
from llm_fsm.conversation import Conversation
from llm_fsm.definition import FSMDefinition
from llm_fsm.errors import FSMError
from llm_fsm.testing.simulation import SimulatedLLM


def _edges(definition: FSMDefinition) -> dict[str, list[str]]:
    return {sid: list(dict.fromkeys(t.target_state for t in s.transitions)) for sid, s in definition.states.items()}


def shortest(definition: FSMDefinition, start: str, goals: set[str]) -> list[str] | None:
    """The shortest state path from ``start`` to any of ``goals`` (breadth-first), or None."""
    edges, previous, queue = _edges(definition), {start: ""}, deque([start])
    while queue:
        state = queue.popleft()
        if state in goals:
            path = [state]
            while previous[path[-1]]:
                path.append(previous[path[-1]])
            return path[::-1]
        for target in edges[state]:
            if target not in previous:
                previous[target] = state
                queue.append(target)
    return None


def covering_paths(definition: FSMDefinition) -> list[list[str]]:
    """Shortest paths to each terminal state, then through each state they miss."""
    terminals = {sid for sid, s in definition.states.items() if s.terminal}
    initial = definition.initial_state
    paths = [p for t in sorted(terminals) if (p := shortest(definition, initial, {t}))]
    for state in definition.states:
        if any(state in p for p in paths):
            continue
        there, onward = shortest(definition, initial, {state}), shortest(definition, state, terminals)
        if there and onward:
            paths.append(there + onward[1:])
    return paths


def _code_keys(definition: FSMDefinition, path: list[str]) -> dict[str, Any]:
    """Values for keys only code sets that the path's moves need (a case sets them up front)."""
    protected = set(definition.handler_only_keys)
    needed: dict[str, Any] = {}
    for source, target in zip(path, path[1:], strict=False):
        for transition in definition.states[source].transitions:
            keys = {k.split(".")[0] for c in transition.conditions for k in condition_keys(c)}
            if transition.target_state != target or not keys & protected:
                continue
            witness = find_witness([transition]) or {}
            needed.update({k: v for k, v in witness.items() if k in protected})
    return needed


def skeleton(definition: FSMDefinition, definition_path: str, seed: int = 0) -> dict[str, Any]:
    """A test file: one case per covering path, replies from the simulated model, expected states."""
    cases = []
    for path in covering_paths(definition):
        case = _case(definition, definition_path, path, seed)
        if case is not None:
            cases.append(case)
    return {"$schema": "../../schema/fsm-test.schema.json", "cases": cases}


def _case(definition: FSMDefinition, definition_path: str, path: list[str], seed: int) -> dict[str, Any] | None:
    context = _code_keys(definition, path)
    llm = SimulatedLLM(definition, path=path, seed=seed)
    conversation = Conversation(definition, llm, context=context)
    steps: list[dict[str, Any]] = []
    try:
        opening = conversation.start()
        steps.append({"user": None, "reply": _last_reply(llm), "expect": {"state": opening.state}})
        for n in range(len(path) * 2):
            if conversation.ended or conversation.state == path[-1]:
                break
            result = conversation.send(f"(user message {n + 1})")
            expect: dict[str, Any] = {"state": result.state, "max_llm_calls": 1}
            if result.ended:
                expect["status"] = "ended"
            steps.append({"user": f"(user message {n + 1})", "reply": _last_reply(llm), "expect": expect})
    except FSMError:
        return None
    if conversation.state != path[-1]:
        return None
    case: dict[str, Any] = {"name": " → ".join(path), "definition": definition_path}
    if context:
        case["context"] = context
    case["steps"] = steps
    return case


def _last_reply(llm: SimulatedLLM) -> dict[str, Any]:
    return llm.replies[-1]


def relative(target: str | os.PathLike[str], start: str | os.PathLike[str]) -> str:
    return os.path.relpath(Path(target).resolve(), Path(start).resolve())
