"""The load-time checks of workflows (states that act, moves the runtime takes on its own):

- ``automatic_cycle``: a cycle of automatic moves that no condition can break. A state is left by its
  *forced* move: the first of its automatic moves by priority (its own and the global ones that apply,
  as :meth:`FSMDefinition.moves` orders them), when that move always holds (no conditions). A move
  before it that has conditions can still be taken first, so it breaks the cycle; a model's move cannot
  (the runtime does not wait for the model), nor can an automatic move after it. An automatic move to its own
  state is never taken (as in :func:`llm_fsm.turn.automatic.automatic_move`): it is passed over.
  A cycle of automatic moves that have conditions is a warning of the analysis instead
  (:mod:`llm_fsm.authoring.automatic_loops`): whether it loops depends on the context.
- ``acts_no_way_out``: an acting state from which no state can be reached that waits for a person (one
  that does not act, or runs a sub-conversation), is terminal, or goes back (``"$return"``) to where the
  conversation came from: a run there never stops but at ``max_run_steps``.

A state with no transitions is terminal: an acting terminal state acts once and the run ends, so it is
allowed. An ``acts`` state of a definition used as a subflow is judged as in any definition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llm_fsm.definition.graph import components, reachable, successors
from llm_fsm.definition.models import RETURN, Condition, FSMDefinition, Transition

# (where, message, code, hint): each an error
Problem = tuple[tuple[Any, ...], str, str, str | None]


def always_holds(transition: Transition) -> bool:
    """Whether no condition can stop ``transition``: it has none, or each is an empty ``true``."""
    return all(_empty(condition) for condition in transition.conditions)


def _empty(condition: Condition) -> bool:
    return not condition.requires_context_keys and condition.logic in (None, True)


def forced_move(definition: FSMDefinition, sid: str) -> tuple[tuple[Any, ...], Transition] | None:
    """Where the move is and the move that always leaves ``sid`` with no model call (see the module), or None."""
    state = definition.states[sid]
    own = [(("states", sid, "transitions", i), t) for i, t in enumerate(state.transitions)]
    anywhere = [(("global_transitions", j), definition.global_transitions[j]) for j in definition.global_indices(sid)]
    # sorted is stable: on equal priorities the state's own come first, as in FSMDefinition.moves
    for loc, move in sorted([*own, *anywhere], key=lambda pair: pair[1].priority):
        if move.automatic and move.target_state != sid:  # the runtime never takes an automatic move to its own state
            return (loc, move) if always_holds(move) else None
    return None


def problems(definition: FSMDefinition) -> Iterator[Problem]:
    """Every cycle of forced moves, then every acting state with no way out."""
    moves = (*(t for state in definition.states.values() for t in state.transitions), *definition.global_transitions)
    if any(move.automatic for move in moves):  # a definition without workflows pays one pass over its moves
        yield from _cycles(definition)
    if any(state.acts for state in definition.states.values()):
        yield from _acting_without_way_out(definition)


def _forced_edges(definition: FSMDefinition) -> tuple[dict[str, list[str]], dict[str, tuple[Any, ...]]]:
    """Each state's forced successor (as a list: none or one, or for a forced ``"$return"`` each state whose
    forced move leads here, where the conversation came from and goes back to), and where each forced move is."""
    forced = {sid: found for sid in definition.states if (found := forced_move(definition, sid)) is not None}
    edges: dict[str, list[str]] = {sid: [] for sid in definition.states}
    for sid, (_, move) in forced.items():
        if move.target_state != RETURN:
            edges[sid].append(move.target_state)
    for sid, (_, move) in forced.items():
        if move.target_state == RETURN:
            edges[sid] = [p for p, (_, m) in forced.items() if m.target_state == sid]
    return edges, {sid: loc for sid, (loc, _) in forced.items()}


def forced_cycles(definition: FSMDefinition) -> Iterator[list[str]]:
    """Each cycle of forced moves (one per strongly connected component of them), its states in order."""
    edges, _ = _forced_edges(definition)
    for component in components(edges):
        first = next(sid for sid in definition.states if sid in component)  # in the definition's order
        if len(component) > 1 or first in edges[first]:
            yield cycle_from(first, edges, set(component))


def _cycles(definition: FSMDefinition) -> Iterator[Problem]:
    _, where = _forced_edges(definition)
    for cycle in forced_cycles(definition):
        path = " → ".join([*cycle, cycle[0]])
        message = (
            f"a cycle of automatic moves that no condition can break: {path}; each is taken with no model call "
            f"and always holds, so a run that enters it loops until max_run_steps ({definition.max_run_steps}) stops it"
        )
        hint = 'give one of these moves conditions that a step can change, or let the model decide it (no "automatic")'
        yield where[cycle[0]], message, "automatic_cycle", hint


def cycle_from(start: str, edges: dict[str, list[str]], component: set[str]) -> list[str]:
    """The states of a cycle of ``edges`` inside ``component``, in order, walking from ``start``."""
    path = [start]
    while True:
        step = next(target for target in edges[path[-1]] if target in component)
        if step in path:
            return path[path.index(step) :]
        path.append(step)


def _acting_without_way_out(definition: FSMDefinition) -> Iterator[Problem]:
    states = definition.states
    exits = {
        sid
        for sid, state in states.items()
        if not state.acts or state.terminal or state.subflow is not None or definition.returns(sid)
    }
    if len(exits) == len(states):
        return
    edges = successors(definition)
    for sid in states:
        if sid in exits:
            continue
        found = reachable([sid], edges)
        if found & exits:
            continue
        names = ", ".join(s for s in states if s in found)
        message = (
            f"acting state '{sid}' has no way out: every state it can reach ({names}) acts on its own and none is "
            f"terminal, so a run from it never waits for a person nor ends (max_run_steps, "
            f"{definition.max_run_steps}, stops it)"
        )
        hint = 'add a move to a terminal state or to a state that waits for a person (one without "acts": true)'
        yield ("states", sid, "acts"), message, "acts_no_way_out", hint
