"""Paths through a definition: the shortest ones that, together, visit every reachable state.

``covering_paths`` returns the shortest path from the initial state to each terminal state, plus,
for every state those paths miss, the shortest path through it to a terminal state (a state that goes
back, ``"$return"``, goes back to the state before it on the path, and on from there).
:mod:`llm_fsm.testing.skeleton` turns them into a test file.
"""

from __future__ import annotations

from llm_fsm.definition.graph import shortest_path, successors
from llm_fsm.definition.models import FSMDefinition


def covering_paths(definition: FSMDefinition) -> list[list[str]]:
    """Shortest paths to each terminal state, then through each state they miss."""
    edges = successors(definition)
    terminals = {sid for sid, s in definition.states.items() if s.terminal}
    initial = definition.initial_state
    paths = [p for t in sorted(terminals) if (p := shortest_path(initial, {t}, edges))]
    for state in definition.states:
        if any(state in p for p in paths):
            continue
        there, onward = shortest_path(initial, {state}, edges), shortest_path(state, terminals, edges)
        if there and len(there) > 1 and definition.returns(state):  # back where it came from, then on from there
            back = shortest_path(there[-2], terminals, edges)
            onward = [state, *back] if back else onward
        if there and onward:
            paths.append(there + onward[1:])
    return paths
