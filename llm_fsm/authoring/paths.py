"""Paths through a definition: the shortest ones that, together, visit every reachable state.

``covering_paths`` returns the shortest path from the initial state to each terminal state, plus,
for every state those paths miss, the shortest path through it to a terminal state.
:mod:`llm_fsm.testing.skeleton` turns them into a test file.
"""

from __future__ import annotations

from collections import deque

from llm_fsm.definition import FSMDefinition


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
