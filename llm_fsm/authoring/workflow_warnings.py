"""The design warning about workflows: ``state_passed_through``, a state the runtime always leaves by an automatic
move with no conditions (its *forced* move, see :func:`llm_fsm.definition.workflow_checks.forced_move`) as soon as
a step ends there. The runtime looks for an automatic move before an acting state's turn, so such a state never
acts, and a state that waits for a person is never talked in (the initial one only for its opening): its
purpose, instructions and other moves are never used. A state with handlers is left out (code's step: its
handlers run on the way through), and so is one that runs a sub-conversation. A global move that passes
through states is one warning naming them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llm_fsm.authoring.review import Finding
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.workflow_checks import forced_move

_HINT = (
    "give the move conditions (what the state should produce first), or let the model name it "
    '(no "automatic"); a step of code alone is a state with handlers'
)


def states_passed_through(definition: FSMDefinition) -> Iterator[Finding]:
    moves = (*(t for state in definition.states.values() for t in state.transitions), *definition.global_transitions)
    if not any(move.automatic for move in moves):
        return
    by_global: dict[tuple[Any, ...], list[str]] = {}
    for sid, state in definition.states.items():
        if state.terminal or state.handlers or state.subflow is not None:
            continue
        found = forced_move(definition, sid)
        if found is None:
            continue
        loc, move = found
        if loc[0] == "global_transitions":
            by_global.setdefault(loc, []).append(sid)
            continue
        doing = "acts" if state.acts else "talks with a person"
        message = (
            f"state '{sid}' is passed through: its automatic move to '{move.target_state}' has no conditions, so the "
            f"runtime takes it as soon as a step ends there, and the state never {doing}"
        )
        yield Finding(loc, "state_passed_through", message, _HINT)
    for loc, states in by_global.items():
        target = definition.global_transitions[loc[1]].target_state
        message = (
            f"the automatic global move to '{target}' has no conditions, so the runtime takes it as soon as a step "
            f"ends in a state it applies in: {', '.join(states)} never act nor talk with a person"
        )
        yield Finding(loc, "state_passed_through", message, _HINT)
