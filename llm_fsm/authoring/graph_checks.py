"""The design checks of the states as a graph (see :mod:`llm_fsm.authoring.analysis` for each code): conditions
that never hold or compare a key with a constant of another type, states that cannot be reached, are never left,
or lead to no end (or only by a global move), and a first state that goes back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from llm_fsm.authoring.review import Finding, Place, Review, transition_loc
from llm_fsm.definition.graph import GLOBAL
from llm_fsm.definition.loader import dotted
from llm_fsm.definition.models import RETURN


def conditions_never_holding(review: Review) -> Iterator[Finding]:
    """``condition_never_holds``: a part of a transition's conditions that no context satisfies."""
    for (sid, i), found in review.requirements.items():
        target = review.transition_at((sid, i)).target_state
        which = (
            f"the global transition to '{target}'" if sid == GLOBAL else f"the transition from '{sid}' to '{target}'"
        )
        for reason in found.never:
            yield Finding(
                transition_loc(sid, i, reason.loc),
                "condition_never_holds",
                f"{reason.message}: {which} can never be taken",
                reason.hint or "fix the condition, or remove the transition",
            )


def type_mismatches(review: Review) -> Iterator[Finding]:
    """``type_mismatch``: a condition compares a key with a constant of a type its schema does not give it."""
    for (sid, i), found in review.requirements.items():
        for reason in found.mismatches:
            yield Finding(transition_loc(sid, i, reason.loc), "type_mismatch", reason.message, reason.hint)


def unreachable_states(review: Review) -> Iterator[Finding]:
    """``unreachable_state``, naming the dead transitions on the way when there are paths on paper."""
    initial = review.definition.initial_state
    dead_into: dict[str, list[Place]] = {}  # state -> the dead transitions to it from reachable states
    for place in review.requirements:  # in the file's order: the states' transitions, then the global ones
        if place in review.dead and (
            place[0] in review.reachable or (place[0] == GLOBAL and place[1] in review.applying_somewhere)
        ):
            dead_into.setdefault(review.transition_at(place).target_state, []).append(place)
    for sid in review.definition.states:
        if sid in review.reachable:
            continue
        message = f"state '{sid}' cannot be reached from the initial state '{initial}'"
        hint = "add a transition to it from a reachable state, or remove it"
        if sid in review.declared_reachable:
            message += ": every path to it takes a transition that can never be taken"
            if sid in dead_into:
                message += " (" + ", ".join(dotted(transition_loc(*place)) for place in dead_into[sid][:3]) + ")"
            hint = "fix the conditions that can never hold (see condition_never_holds)"
        yield Finding(("states", sid), "unreachable_state", message, hint)


def self_loops_without_exit(review: Review) -> Iterator[Finding]:
    """``self_loop_no_exit``: every own transition of a state leads back to it."""
    for sid in review.definition.states:
        if review.self_loop_only(sid):
            left = _only_by(review.global_exits(sid)) or "it can never be left"
            yield Finding(
                ("states", sid, "transitions"),
                "self_loop_no_exit",
                f"state '{sid}' only has transitions back to itself: once entered, {left}",
                "add a transition to another state, or remove the transitions to make it terminal",
            )


def _only_by(targets: Sequence[str]) -> str:
    """How a state whose own transitions never lead out is still left: by its global moves (or "")."""
    if not targets:
        return ""
    listed = ", ".join(f"'{t}'" if t != RETURN else f'"{RETURN}"' for t in targets)
    return f"it can be left only by the global transitions (to {listed})"


def states_never_left(review: Review) -> Iterator[Finding]:
    """``state_never_left``: no own transition to another state can be taken (:func:`exits_closed`)."""
    for sid, reasons in review.never_left.items():
        texts = [text for _, text in reasons]
        listed = "; ".join(texts[:3]) + (f"; and {len(texts) - 3} more" if len(texts) > 3 else "")
        causes = dict.fromkeys(cause for cause, _ in reasons)
        hint = "; ".join(_NEVER_LEFT_HINTS[cause] for cause in causes)
        if causes.keys() - {"never_holds"}:  # a key the model cannot set: code might
            hint += "; code that sets the key with update_context can ignore this"
        left = "can never be left"
        if by := _only_by(review.global_exits(sid)):
            left = f"can never be left by its own transitions ({by.removeprefix('it ')})"
        yield Finding(("states", sid, "transitions"), "state_never_left", f"state '{sid}' {left}: {listed}", hint)


# What to do about each cause of a state that is never left.
_NEVER_LEFT_HINTS = {
    "never_holds": "fix the conditions that never hold (see condition_never_holds), or add a transition that can "
    "be taken",
    "not_writable": "let the model write the key here or on the way (writable_keys)",
    "handler_only": "name the handler that sets the key in this state's handlers (or a state's on the way)",
    "tool_result": "list the tool in this state's tools (or a state's on the way), so that it can be called",
}


def states_without_path_to_terminal(review: Review) -> Iterator[Finding]:
    """``no_path_to_terminal``: a conversation entering the state (from somewhere) never ends."""
    for sid in review.definition.states:
        ways_in = review.stuck.get(sid)
        if ways_in is None or sid in review.never_left or review.self_loop_only(sid):
            continue
        back = sorted({came for entered, came in ways_in if came is not None and review.live_return(entered)})
        if back:  # it ends only by going back, and where it came from does not end either
            places = ", ".join(f"'{came}'" for came in back[:3]) + (" ..." if len(back) > 3 else "")
            message = (
                f"no path leads from state '{sid}' to a terminal state when the conversation comes from {places}: "
                f'going back ("{RETURN}") leads there, and no path leads from there to one either'
            )
        else:
            message = f"no path leads from state '{sid}' to a terminal state: a conversation that enters it never ends"
        if sid in review.declared_finishing:
            message += " (every path to one takes a transition that can never be taken)"
        yield Finding(
            ("states", sid),
            "no_path_to_terminal",
            message,
            "add a transition towards a terminal state (a state without transitions)",
        )


def states_ending_only_by_global_moves(review: Review) -> Iterator[Finding]:
    """States whose own transitions never lead to an end: only a global move (cancel...) ends the
    conversation there. A state that goes back ("$return") ends where it goes back to: not judged here."""
    for sid, state in review.definition.states.items():
        if (
            sid not in review.reachable
            or state.terminal
            or sid in review.own_finishing
            or sid in review.stuck
            or sid in review.never_left
            or review.self_loop_only(sid)
            or any(t.target_state == RETURN for t in state.transitions)
        ):
            continue
        yield Finding(
            ("states", sid),
            "ends_only_by_global_move",
            f"no path of the states' own transitions leads from state '{sid}' to a terminal state: only the global "
            f"transitions ({review.global_endings}) end a conversation that enters it",
            "add a transition towards a terminal state; fine if only a global move is meant to end the conversation "
            "from here",
        )


def returns_at_start(review: Review) -> Iterator[Finding]:
    """``nowhere_to_return``: the initial state goes back, with nothing to go back to."""
    initial = review.definition.initial_state
    for i, transition in enumerate(review.definition.states[initial].transitions):
        if transition.target_state == RETURN:
            yield Finding(
                ("states", initial, "transitions", i, "target_state"),
                "nowhere_to_return",
                f"the initial state '{initial}' goes back (\"{RETURN}\"), but a conversation starts there with "
                "nowhere to go back to: the move is not offered until it came back from another state",
                "lead to a state by its id, or start the conversation elsewhere",
            )
