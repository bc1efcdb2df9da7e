"""What the design checks of :mod:`llm_fsm.authoring.analysis` share: a :class:`Finding` (a warning before it
is placed in the file), and the :class:`Review` of a definition they all read: each transition's requirements,
the transitions that can never be taken, and the states as a graph of the moves that can."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from functools import cached_property
from typing import NamedTuple

from llm_fsm.authoring.requirements import Requirements, requirements
from llm_fsm.definition.graph import GLOBAL, carry, predecessors, reachable, stuck, successors
from llm_fsm.definition.models import RETURN, FSMDefinition, State, Transition
from llm_fsm.definition.reply_schema import model_writable_keys


class Finding(NamedTuple):
    """A warning before it is placed in the file: ``loc`` is a path as a tuple of keys and indices."""

    loc: tuple[str | int, ...]
    code: str
    message: str
    hint: str | None = None


def tool_keys(definition: FSMDefinition, state: State) -> set[str]:
    """The context keys the tools ``state`` lists store their results under."""
    tools = definition.tools
    return {key for name in state.tools if name in tools and (key := tools[name].result_key)}


Place = tuple[str, int]  # a transition: (state id, index in the state's transitions)


class Review:
    """What the checks share: each transition's requirements, the transitions that can never be taken
    (``dead``), and the states as a graph whose edges are the transitions that can (and fallbacks)."""

    def __init__(self, definition: FSMDefinition) -> None:
        self.definition = definition
        schema = definition.context_schema
        self.requirements = {
            (sid, i): requirements(transition, schema)
            for sid, state in definition.states.items()
            for i, transition in enumerate(state.transitions)
        }
        self.requirements.update(
            {(GLOBAL, j): requirements(move, schema) for j, move in enumerate(definition.global_transitions)}
        )
        self.dead = {place for place, found in self.requirements.items() if found.never}
        # A fallback state (where failed checks lead) is reached from its state like a transition target;
        # a global transition from each state it applies in.
        self.edges = successors(definition, fallbacks=True, skip=self.dead)
        self.reachable = reachable([definition.initial_state], self.edges)

    @cached_property
    def stuck(self) -> dict[str, list[tuple[str, str | None]]]:
        """Reachable states where some conversation can no longer end, with the ways in that doom it."""
        returning = {sid for sid in self.definition.states if self.live_return(sid)}
        return stuck(self.edges, self.terminals, returning, self.definition.initial_state, self.reachable)

    def live_return(self, sid: str) -> bool:
        """Whether ``sid`` has a ``"$return"`` move that can be taken (its own or a global one)."""
        return any(
            transition.target_state == RETURN and place not in self.dead for place, transition in self.moves(sid)
        )

    def moves(self, sid: str) -> Iterator[tuple[Place, Transition]]:
        """The transitions of ``sid`` and the global ones that apply there, each with its place."""
        for i, transition in enumerate(self.definition.states[sid].transitions):
            yield (sid, i), transition
        for j in self.definition.global_indices(sid):
            yield (GLOBAL, j), self.definition.global_transitions[j]

    @cached_property
    def applying_somewhere(self) -> set[int]:
        """The positions of the global transitions that apply in a reachable state."""
        return {j for sid in self.reachable for j in self.definition.global_indices(sid)}

    def transition_at(self, place: Place) -> Transition:
        sid, i = place
        return self.definition.global_transitions[i] if sid == GLOBAL else self.definition.states[sid].transitions[i]

    def global_exits(self, sid: str) -> list[str]:
        """The targets of the global moves that can take the conversation out of ``sid``."""
        return list(
            dict.fromkeys(
                t.target_state for place, t in self.moves(sid) if place[0] == GLOBAL and place not in self.dead
            )
        )

    @cached_property
    def global_endings(self) -> str:
        """The global transitions that can be taken to a state that ends by its own transitions, in words:
        ``to 'cancelled', 'human'``."""
        moves = self.definition.global_transitions
        live = [m.target_state for j, m in enumerate(moves) if (GLOBAL, j) not in self.dead]
        targets = dict.fromkeys(t for t in live if t in self.own_finishing) or dict.fromkeys(live)
        return "to " + ", ".join(f"'{t}'" if t != RETURN else f'"{t}"' for t in targets)

    @cached_property
    def own_finishing(self) -> set[str]:
        """The states a path of their own transitions (and fallbacks) leads from to a terminal state."""
        edges = successors(self.definition, fallbacks=True, skip=self.dead, global_moves=False)
        return reachable(self.terminals, predecessors(edges))

    @cached_property
    def terminals(self) -> list[str]:
        return [sid for sid, state in self.definition.states.items() if state.terminal]

    @cached_property
    def declared(self) -> dict[str, list[str]]:
        """The edges when every transition counts, dead ones included."""
        return successors(self.definition, fallbacks=True)

    @cached_property
    def declared_reachable(self) -> set[str]:
        return reachable([self.definition.initial_state], self.declared)

    @cached_property
    def declared_finishing(self) -> set[str]:
        return reachable(self.terminals, predecessors(self.declared))

    @cached_property
    def never_left(self) -> dict[str, list[tuple[str, str]]]:
        """Reachable states none of whose transitions to another state can be taken, with the reasons."""
        return exits_closed(self)

    def self_loop_only(self, sid: str) -> bool:
        """Whether every transition of the state's own (and its fallback) leads back to it."""
        state = self.definition.states[sid]
        return (
            bool(state.transitions)
            and all(t.target_state == sid for t in state.transitions)
            and (state.fallback_state in (None, sid))
        )

    def transitions(self, sid: str) -> Iterator[tuple[int, Transition, Requirements]]:
        for i, transition in enumerate(self.definition.states[sid].transitions):
            yield i, transition, self.requirements[(sid, i)]

    def missing_on_the_way(
        self, needs: Mapping[str, Collection[str]], provides: Mapping[str, Collection[str]]
    ) -> dict[str, set[str]]:
        """For each state of ``needs``, the keys it needs that no state on a path to it from a reachable
        state (itself included) provides: one pass over the graph for all keys, the keys as bits."""
        names = list(dict.fromkeys(key for keys in needs.values() for key in keys))
        position = {key: n for n, key in enumerate(names)}

        def bits(keys: Iterable[str]) -> int:
            mask = 0
            for key in keys:
                if (n := position.get(key)) is not None:
                    mask |= 1 << n
            return mask

        marks = {sid: bits(keys) for sid, keys in provides.items() if sid in self.reachable}
        missing = {}
        for component, union in carry(marks, self.edges):
            for sid in component:
                if lacking := bits(needs.get(sid, ())) & ~union:
                    missing[sid] = {names[n] for n in _ones(lacking)}
        return missing


def _ones(bits: int) -> Iterator[int]:
    """The positions of the bits set in ``bits``."""
    while bits:
        lowest = bits & -bits
        yield lowest.bit_length() - 1
        bits ^= lowest


def transition_loc(sid: str, i: int, loc: tuple[str | int, ...] = ()) -> tuple[str | int, ...]:
    if sid == GLOBAL:
        return ("global_transitions", i, *loc)
    return ("states", sid, "transitions", i, *loc)


def exits_closed(review: Review) -> dict[str, list[tuple[str, str]]]:
    """Reachable states none of whose transitions to another state can be taken, each with the reasons,
    as (cause, words): each never holds, or needs a key that cannot be written there or on the way to it."""
    definition = review.definition
    by_code = frozenset(definition.code_only_keys)
    tools_of = {tool.result_key: name for name, tool in definition.tools.items() if tool.result_key}
    needs = {
        sid: {key for _, _, found in review.transitions(sid) for key, _ in found.needed if not key.startswith("_")}
        for sid in review.reachable
    }

    def writable(sid: str) -> set[str]:
        state = definition.states[sid]
        keys = (set(model_writable_keys(definition, sid)) - by_code) | tool_keys(definition, state)
        return keys | by_code if state.handlers else keys

    missing = review.missing_on_the_way(needs, {sid: writable(sid) for sid in review.reachable})
    closed = {}
    for sid, state in definition.states.items():
        if sid not in review.reachable or state.fallback_state not in (None, sid):
            continue
        reasons = []
        for i, transition, found in review.transitions(sid):
            if transition.target_state == sid:
                continue
            unset = [key for key, _ in found.needed if key in missing.get(sid, ())]
            name = f"transitions[{i}] (to '{transition.target_state}')"
            if (sid, i) in review.dead:
                reasons.append(("never_holds", f"the conditions of {name} never hold"))
            elif unset:
                reasons.append(_unwritable(name, unset[0], by_code, sid, tools_of))
            else:
                break
        else:
            if reasons:
                closed[sid] = reasons
    return closed


def _unwritable(
    name: str, key: str, by_code: Collection[str], sid: str, tools_of: Mapping[str, str]
) -> tuple[str, str]:
    if key.split(".")[0] in tools_of:
        why = f"the result of tool '{tools_of[key.split('.')[0]]}', which neither '{sid}' nor a state on the way lists"
        return "tool_result", f"{name} needs '{key}', {why}"
    if key in by_code:
        why = f"a handler-only key, and no handler is named in '{sid}' or in a state on the way to it"
        return "handler_only", f"{name} needs '{key}', {why}"
    why = f"not writable by the model in '{sid}' (writable_keys) nor in a state on the way to it"
    return "not_writable", f"{name} needs '{key}', {why}"
