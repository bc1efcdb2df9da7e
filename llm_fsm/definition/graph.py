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

from llm_fsm.definition.models import RETURN

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition, State

Edges = Mapping[str, Iterable[str]]


GLOBAL = "$global"  # where a global transition is, in a place: (GLOBAL, index in global_transitions)


def successors(
    definition: FSMDefinition,
    *,
    fallbacks: bool = False,
    skip: Collection[tuple[str, int]] = (),
    global_moves: bool = True,
) -> dict[str, list[str]]:
    """Each state's distinct targets in the order written, then those of the global transitions that
    apply there (unless ``global_moves`` is false); with ``fallbacks``, its ``fallback_state`` too.

    ``"$return"`` is no edge: it goes back to a state the conversation was in before, so it reaches
    nothing new (:func:`stuck` follows where it leads). ``skip``: transitions to leave out, as (state id,
    index in its ``transitions``), or (:data:`GLOBAL`, index in ``global_transitions``).
    """
    return {
        sid: _targets(definition, sid, state, fallbacks, skip, global_moves) for sid, state in definition.states.items()
    }


def _targets(
    definition: FSMDefinition,
    sid: str,
    state: State,
    fallbacks: bool,
    skip: Collection[tuple[str, int]],
    global_moves: bool,
) -> list[str]:
    targets = [t.target_state for i, t in enumerate(state.transitions) if (sid, i) not in skip]
    if global_moves:
        moves = definition.global_transitions
        targets += [moves[j].target_state for j in definition.global_indices(sid) if (GLOBAL, j) not in skip]
    if fallbacks and state.fallback_state:
        targets.append(state.fallback_state)
    return [target for target in dict.fromkeys(targets) if target != RETURN]


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
                    component: list[str] = []
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


def stuck(
    edges: Edges, terminals: Collection[str], returning: Collection[str], start: str, seen: Collection[str]
) -> dict[str, list[tuple[str, str | None]]]:
    """The reachable states (``seen``) where some conversation can no longer reach a terminal state,
    each with the ways in that doom it: (state entered, state it came from; None at the start).

    A conversation ends when a path of ``edges`` leads to a terminal state, or when it goes back
    (``"$return"``, from a state of ``returning``) to the state it came from and can end from there.
    Within a strongly connected component every state leads to every other, so the component's fate
    is decided where the conversation entered it: from there, going back leads below it only from the
    state it entered by. One pass over the components, the upstream ones first: linear in the edges.
    """
    finishing = reachable(terminals, predecessors(edges))
    order = components(edges)
    owner = {state: n for n, component in enumerate(order) for state in component}
    into = predecessors(edges)
    doomed: dict[int, list[tuple[str, str | None]]] = {}
    found: dict[str, list[tuple[str, str | None]]] = {}
    for n, component in enumerate(order):
        if component[0] not in seen or component[0] in finishing:
            continue
        entries: list[tuple[str, str | None]] = [(start, None)] if start in component else []
        entries += [(e, p) for e in component for p in into[e] if p in seen and owner[p] != n]
        bad = [(e, p) for e, p in entries if e not in returning or p is None or owner[p] in doomed]
        if bad:
            doomed[n] = bad
            found.update((state, bad) for state in component)
    return found
