"""The states of a definition as a directed graph: successors, reachable sets, shortest paths, and
what flows along the edges.

The one walk that the loader (on raw data, before validation), the static analysis and the path
finder share. Edges are a mapping from each state to its successors, so each caller says what an
edge is: a transition's target, and for the analysis a fallback state too. Every walk visits each
state and edge at most once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_fsm.definition import FSMDefinition, State

Edges = Mapping[str, Iterable[str]]


def successors(
    definition: FSMDefinition, *, fallbacks: bool = False, skip: Collection[tuple[str, int]] = ()
) -> dict[str, list[str]]:
    """Each state's distinct targets in the order written; with ``fallbacks``, its ``fallback_state`` too.

    ``skip``: transitions to leave out, as (state id, index in its ``transitions``).
    """
    return {sid: _targets(sid, state, fallbacks, skip) for sid, state in definition.states.items()}


def _targets(sid: str, state: State, fallbacks: bool, skip: Collection[tuple[str, int]]) -> list[str]:
    targets = [t.target_state for i, t in enumerate(state.transitions) if (sid, i) not in skip]
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


def components(edges: Edges) -> list[list[str]]:
    """The strongly connected components (states that lead to each other), a component listed before
    every component it leads to (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges[root]))]
        while work:
            state, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    break
                if target in on_stack:
                    low[state] = min(low[state], index[target])
            else:  # every successor of ``state`` is done
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[state])
                if low[state] == index[state]:
                    component = []
                    while not component or component[-1] != state:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    found.append(component)
    return found[::-1]  # Tarjan's algorithm finds a component after every component it leads to


def carry(marks: Mapping[str, int], edges: Edges) -> Iterator[tuple[list[str], int]]:
    """Each strongly connected component, in the order of :func:`components`, with the union (bitwise
    or) of the ``marks`` of every state that has a path to it, its own states included.

    One pass: each component passes its union on to its successors and is then forgotten, so memory
    holds only the unions on their way, and a union is shared, not copied, where nothing is added.
    """
    order = components(edges)
    owner = {state: n for n, component in enumerate(order) for state in component}
    arriving: dict[int, int] = {}
    for n, component in enumerate(order):
        union = arriving.pop(n, 0)
        for state in component:
            if mark := marks.get(state, 0):
                union = union | mark if union else mark
        yield component, union
        if not union:
            continue
        for successor in {owner[target] for state in component for target in edges[state]} - {n}:
            before = arriving.get(successor, 0)
            arriving[successor] = before | union if before else union
