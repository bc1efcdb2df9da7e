"""``state_passed_through``: a state the runtime leaves at once by an automatic move with no conditions
(llm_fsm.authoring.workflow_warnings), and the load-time workflow errors as the analysis reports them."""

from __future__ import annotations

from typing import Any

from llm_fsm.authoring.analysis import Diagnostic, analyze


def fsm(states: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "w", "initial_state": next(iter(states)), "states": states, **top}


def passed(source: dict[str, Any]) -> list[Diagnostic]:
    return [d for d in analyze(source) if d.code == "state_passed_through"]


def auto(target: str, **fields: Any) -> dict[str, Any]:
    return {"target_state": target, "automatic": True, **fields}


def test_a_waiting_state_whose_only_move_is_automatic_without_conditions_is_passed_through():
    source = fsm({"ask": {"transitions": [{"target_state": "hub"}]}, "hub": {"transitions": [auto("end")]}, "end": {}})
    (found,) = passed(source)
    assert (found.severity, found.path) == ("warning", "states.hub.transitions[0]")
    assert "state 'hub' is passed through" in found.message and "never talks with a person" in found.message
    assert found.hint is not None and "conditions" in found.hint


def test_an_acting_state_with_a_forced_move_never_acts():
    source = fsm(
        {
            "ask": {"transitions": [{"target_state": "work"}]},
            "work": {"acts": True, "transitions": [{"target_state": "ask", "priority": 1}, auto("end")]},
            "end": {},
        }
    )
    (found,) = passed(source)
    assert found.path == "states.work.transitions[1]" and "never acts" in found.message


def test_conditions_handlers_or_a_terminal_state_are_not_passed_through():
    has_x = [{"requires_context_keys": ["x"]}]
    for hub in (
        {"transitions": [auto("end", conditions=has_x)]},  # it waits until x is there
        {"handlers": ["tally"], "transitions": [auto("end")]},  # code's step
        {"transitions": [auto("end", conditions=has_x, priority=1), auto("end")]},  # the first may not hold
    ):
        source = fsm({"ask": {"transitions": [{"target_state": "hub"}]}, "hub": hub, "end": {}})
        assert passed(source) == [], hub
    assert passed(fsm({"ask": {"transitions": [{"target_state": "end"}]}, "end": {"acts": True}})) == []


def test_a_global_automatic_move_without_conditions_is_one_warning_naming_the_states():
    source = fsm(
        {"a": {"transitions": [{"target_state": "b"}]}, "b": {"transitions": [{"target_state": "end"}]}, "end": {}},
        global_transitions=[auto("end", priority=1)],
    )
    (found,) = passed(source)
    assert found.path == "global_transitions[0]" and "a, b never act nor talk" in found.message


def test_the_workflow_errors_are_errors_of_the_analysis_with_their_hint():
    source = fsm(
        {"a": {"transitions": [auto("b"), {"target_state": "end"}]}, "b": {"transitions": [auto("a")]}, "end": {}}
    )
    (error,) = [d for d in analyze(source) if d.severity == "error"]
    assert error.code == "automatic_cycle" and "a → b → a" in error.message and error.hint
