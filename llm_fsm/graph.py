"""The states of a definition as a directed graph: successors, reachable sets and shortest paths.

The one walk that the loader (on raw data, before validation), the static analysis and the path
finder share. Edges are a mapping from each state to its successors, so each caller says what an
edge is: a transition's target, and for the analysis a fallback state too. Every walk visits each
state and edge at most once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_fsm.definition import FSMDefinition, State

Edges = Mapping[str, Iterable[str]]


def successors(definition: FSMDefinition, *, fallbacks: bool = False) -> dict[str, list[str]]:
    """Each state's distinct targets in the order written; with ``fallbacks``, its ``fallback_state`` too."""
    return {sid: _targets(state, fallbacks) for sid, state in definition.states.items()}


def _targets(state: State, fallbacks: bool) -> list[str]:
    targets = [t.target_state for t in state.transitions]
    if fallbacks and state.fallback_state:
        targets.append(state.fallback_state)
    return list(dict.fromkeys(targets))


def predecessors(edges: Edges) -> dict[str, list[str]]:
    """The same graph with every edge reversed."""
    reverse: dict[str, list[str]] = {state: [] for state in edges}
    for state, targets in edges.items():
        for target in targets:
            reverse[target].append(state)
    return reverse


def reachable(starts: Iterable[str], edges: Edges) -> set[str]:
    """The states some path leads to from any of ``starts``, ``starts`` included."""
    seen = set(starts)
    todo = list(seen)
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def shortest_path(start: str, goals: Collection[str], edges: Edges) -> list[str] | None:
    """The states of a path with the fewest moves from ``start`` to any of ``goals`` (breadth-first), or None."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state in goals:
            return _back_to_start(state, previous)
        for target in edges[state]:
            if target not in previous:
                previous[target] = state
                queue.append(target)
    return None


def _back_to_start(state: str, previous: Mapping[str, str | None]) -> list[str]:
    path = [state]
    while (before := previous[path[-1]]) is not None:
        path.append(before)
    return path[::-1]
