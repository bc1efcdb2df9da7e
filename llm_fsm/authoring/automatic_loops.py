"""The design warning ``automatic_cycle_may_loop``: a cycle of automatic moves, some with conditions, that
nothing on the way round can stop. An automatic move writes nothing to the context but what its
``clear_keys`` remove, and between two automatic moves only handlers run (a state's own, and code handlers
registered for timings such as ``state_enter``: the file cannot show those, a state naming ``handlers`` is the
sign) or a subflow. So once a run enters such a cycle with its conditions holding, they go on holding and the
run loops until ``max_run_steps``. A cycle whose conditions cannot all hold on one context (no witness is
found for them together) is left out: going round needs them all at once. A cycle whose moves all hold always
is the load-time error ``automatic_cycle`` (:mod:`llm_fsm.definition.workflow_checks`), not repeated here.

It is a warning of the analysis, not of the loader: whether the run loops depends on the context it enters
with, which the file cannot tell, and the loader's warnings are about fields it ignores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.authoring.requirements import reads
from llm_fsm.authoring.review import Finding
from llm_fsm.definition.graph import components
from llm_fsm.definition.models import RETURN, FSMDefinition, Transition
from llm_fsm.definition.workflow_checks import always_holds, cycle_from, forced_cycles

_HINT = (
    'let one move of the cycle clear a key its conditions read ("clear_keys"), give a state of it handlers '
    'that change them, or let the model decide one of the moves (no "automatic")'
)

Loc = tuple[Any, ...]
# (from, to) -> the automatic moves that can take a run from one to the other, each with where it is
Moves = dict[tuple[str, str], list[tuple[Loc, Transition]]]


def cycles_that_may_loop(definition: FSMDefinition) -> Iterator[Finding]:
    moves = (*(t for state in definition.states.values() for t in state.transitions), *definition.global_transitions)
    if not any(move.automatic for move in moves):
        return
    taken = _automatic_moves(definition)
    edges: dict[str, list[str]] = {sid: [] for sid in definition.states}
    for source, target in taken:
        edges[source].append(target)
    reported = {sid for cycle in forced_cycles(definition) for sid in cycle}
    for component in components(edges):
        inside = set(component)
        first = next(sid for sid in definition.states if sid in inside)  # in the definition's order
        if len(component) == 1 or inside & reported or _changed_on_the_way(definition, inside, taken):
            continue
        cycle = cycle_from(first, edges, inside)
        steps = [taken[(source, target)][0] for source, target in zip(cycle, [*cycle[1:], cycle[0]], strict=True)]
        if find_witness([move for _, move in steps], schema=definition.context_schema) is None:
            continue  # its conditions cannot all hold on one context (as they would going round): it cannot loop
        path = " → ".join([*cycle, cycle[0]])
        message = (
            f"a cycle of automatic moves: {path}; once its conditions hold nothing in between changes them (no "
            f"move of it clears a key they read, no state of it has handlers or runs a subflow), so a run that "
            f"enters it with them holding loops until max_run_steps ({definition.max_run_steps}) stops it"
        )
        loc, _ = steps[0]
        yield Finding(loc, "automatic_cycle_may_loop", message, _HINT)


def _automatic_moves(definition: FSMDefinition) -> Moves:
    """The automatic moves the runtime can take, by the states they join: in each state those by priority up to
    the first that always holds (the runtime never gets past it), none to the state itself; a ``"$return"``
    joins its state to each state with an automatic move into it (where the run came from)."""
    found: Moves = {}
    returning: list[tuple[str, Loc, Transition]] = []
    for sid, state in definition.states.items():
        own = [(("states", sid, "transitions", i), t) for i, t in enumerate(state.transitions)]
        everywhere = definition.global_transitions
        anywhere = [(("global_transitions", j), everywhere[j]) for j in definition.global_indices(sid)]
        for loc, move in sorted([*own, *anywhere], key=lambda pair: pair[1].priority):  # stable, as in moves()
            if not move.automatic or move.target_state == sid:
                continue
            if move.target_state == RETURN:
                returning.append((sid, loc, move))
            else:
                found.setdefault((sid, move.target_state), []).append((loc, move))
            if always_holds(move):
                break
    for sid, loc, move in returning:
        for source, _ in [pair for pair in found if pair[1] == sid]:
            found.setdefault((sid, source), []).append((loc, move))
    return found


def _changed_on_the_way(definition: FSMDefinition, inside: set[str], taken: Moves) -> bool:
    """Whether something on the way round the component can change what its moves' conditions read."""
    if any(definition.states[sid].handlers or definition.states[sid].subflow is not None for sid in inside):
        return True
    moves = [move for (source, target), pairs in taken.items() if {source, target} <= inside for _, move in pairs]
    cleared = {key for move in moves for key in move.clear_keys}
    if not cleared:
        return False
    read: set[str] = set()
    for move in moves:
        for condition in move.conditions:
            keys = reads(condition.logic) if condition.logic is not None else set()
            if keys is None:  # a key named by a computed value: it may be one that is cleared
                return True
            read |= {key.split(".")[0] for key in (*keys, *condition.requires_context_keys)}
    return bool(read & cleared)
