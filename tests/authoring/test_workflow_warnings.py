"""``state_passed_through``: a state the runtime leaves at once by an automatic move with no conditions
(llm_fsm.authoring.workflow_warnings); ``automatic_cycle_may_loop``: a cycle of conditioned automatic moves
nothing changes (llm_fsm.authoring.automatic_loops); and the load-time workflow errors as the analysis reports them."""

from __future__ import annotations

from typing import Any

from llm_fsm.authoring.analysis import Diagnostic, analyze
from llm_fsm.authoring.automatic_loops import cycles_that_may_loop
from llm_fsm.definition.models import FSMDefinition


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


def may_loop(source: dict[str, Any]) -> list[Diagnostic]:
    return [d for d in analyze(source) if d.code == "automatic_cycle_may_loop"]


def test_a_cycle_of_conditioned_automatic_moves_may_loop():
    has_x = [{"requires_context_keys": ["x"]}]
    source = fsm(
        {
            "a": {"transitions": [{"target_state": "b"}]},
            "b": {"transitions": [auto("c", conditions=has_x), {"target_state": "end"}]},
            "c": {"transitions": [auto("b", conditions=has_x), {"target_state": "end"}]},
            "end": {},
        }
    )
    (found,) = may_loop(source)
    assert (found.severity, found.path) == ("warning", "states.b.transitions[0]")
    assert "b → c → b" in found.message and "once its conditions hold nothing in between changes them" in found.message
    assert found.hint is not None and "clear_keys" in found.hint


def test_a_global_automatic_move_and_an_automatic_return_may_loop():
    source = fsm(
        {
            "a": {"transitions": [{"target_state": "end"}]},
            "help": {"transitions": [auto("$return")]},
            "end": {},
        },
        global_transitions=[auto("help", conditions=[{"requires_context_keys": ["need_help"]}])],
    )
    (found,) = may_loop(source)
    assert found.path == "global_transitions[0]" and "a → help → a" in found.message


def test_a_cycle_that_clears_what_it_reads_or_runs_handlers_is_not_warned():
    has_x = [{"requires_context_keys": ["x"]}]
    for b in (
        {"transitions": [auto("c", conditions=has_x, clear_keys=["x"]), {"target_state": "end"}]},
        {"handlers": ["tally"], "transitions": [auto("c", conditions=has_x), {"target_state": "end"}]},
    ):
        c = {"transitions": [auto("b", conditions=has_x), {"target_state": "end"}]}
        source = fsm({"a": {"transitions": [{"target_state": "b"}]}, "b": b, "c": c, "end": {}})
        assert may_loop(source) == [], b


def test_a_cycle_whose_conditions_cannot_hold_together_is_not_warned():
    def x_is(value: int) -> list[dict[str, Any]]:
        return [{"logic": {"==": [{"var": "x"}, value]}}]

    end = {"target_state": "end"}
    b = {"transitions": [auto("c", conditions=x_is(1)), end]}
    c = {"transitions": [auto("b", conditions=x_is(2)), end]}
    assert may_loop(fsm({"a": {"transitions": [{"target_state": "b"}]}, "b": b, "c": c, "end": {}})) == []
    c = {"transitions": [auto("b", conditions=x_is(1)), end]}  # the same condition both ways: it loops
    assert len(may_loop(fsm({"a": {"transitions": [{"target_state": "b"}]}, "b": b, "c": c, "end": {}}))) == 1


def test_a_cycle_with_no_conditions_is_the_error_alone():
    end = {"target_state": "end"}
    states = {"a": {"transitions": [auto("b"), end]}, "b": {"transitions": [auto("a"), end]}, "end": {}}
    codes = [d.code for d in analyze(fsm(states))]
    assert "automatic_cycle" in codes and "automatic_cycle_may_loop" not in codes
    # the loader stops at the error, so the warning is asked of the model alone: it leaves the cycle out
    named = {sid: {"id": sid, **state} for sid, state in states.items()}
    assert list(cycles_that_may_loop(FSMDefinition.model_validate(fsm(named)))) == []
