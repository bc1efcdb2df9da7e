"""The load-time checks of workflows: a cycle of automatic moves no condition can break, and an acting state
with no way out, each an error with its line:column (llm_fsm.definition.workflow_checks)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_fsm.definition.loader import inspect, load_text
from llm_fsm.definition.models import RETURN
from llm_fsm.errors import Problem


def auto(target: str, **fields: Any) -> dict[str, Any]:
    return {"target_state": target, "automatic": True, **fields}


HAS_DONE = [{"requires_context_keys": ["done"]}]


def definition(states: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "w", "initial_state": next(iter(states)), "states": states, **top}


def errors(data: dict[str, Any]) -> list[Problem]:
    report = inspect(data)
    assert (report.definition is None) == bool(report.errors)
    return report.errors


def codes(data: dict[str, Any]) -> list[str]:
    return [p.code for p in errors(data)]


def test_a_cycle_of_automatic_moves_without_conditions_is_an_error_naming_its_states_in_order():
    data = definition(
        {
            "ask": {"transitions": [{"target_state": "fetch"}]},
            "fetch": {"acts": True, "transitions": [auto("check"), {"target_state": "done"}]},
            "check": {"transitions": [auto("fetch")]},
            "done": {},
        }
    )
    (problem,) = errors(data)
    assert problem.code == "automatic_cycle" and problem.path == "states.fetch.transitions[0]"
    assert "fetch → check → fetch" in problem.message and "max_run_steps (20)" in problem.message
    assert problem.hint is not None and "conditions" in problem.hint


def test_the_cycle_error_has_the_line_and_column_of_the_move():
    text = json.dumps(
        definition(
            {"a": {"transitions": [auto("b")]}, "b": {"transitions": [auto("a"), {"target_state": "end"}]}, "end": {}}
        ),
        indent=2,
    )
    (problem,) = load_text(text).errors
    line = text[: text.index('"target_state": "b"')].count("\n") + 1
    assert (problem.code, problem.line) == ("automatic_cycle", line - 1)  # the move's "{" is on the line before
    assert problem.column is not None


def test_an_automatic_move_to_its_own_state_is_passed_over_as_the_runtime_does():
    data = definition({"a": {"transitions": [auto("a"), {"target_state": "end"}]}, "end": {}})
    assert codes(data) == []
    # passed over: the next automatic move is the forced one
    data = definition(
        {
            "a": {"transitions": [auto("a", priority=1), auto("b")]},
            "b": {"transitions": [auto("a"), auto("end")]},
            "end": {},
        }
    )
    assert codes(data) == ["automatic_cycle"]


def test_a_condition_on_a_move_of_the_cycle_breaks_it():
    data = definition(
        {
            "a": {"transitions": [auto("b", conditions=HAS_DONE), {"target_state": "end"}]},
            "b": {"transitions": [auto("a")]},
            "end": {},
        }
    )
    assert codes(data) == []


def test_an_automatic_move_with_conditions_taken_before_the_cycle_breaks_it():
    # a handler may write "done" on a step: the move to "end" comes first (priority 10 < 100)
    data = definition(
        {
            "a": {"transitions": [auto("b"), auto("end", conditions=HAS_DONE, priority=10)]},
            "b": {"transitions": [auto("a")]},
            "end": {},
        }
    )
    assert codes(data) == []


def test_a_conditioned_automatic_move_after_the_forced_one_does_not_break_it():
    data = definition(
        {
            "a": {"transitions": [auto("b", priority=10), auto("end", conditions=HAS_DONE, priority=50)]},
            "b": {"transitions": [auto("a")]},
            "end": {},
        }
    )
    assert codes(data) == ["automatic_cycle"]


def test_a_move_the_model_names_does_not_break_a_cycle_of_automatic_moves():
    data = definition(
        {
            "a": {"transitions": [{"target_state": "end", "priority": 1}, auto("b")]},
            "b": {"transitions": [auto("a")]},
            "end": {},
        }
    )
    assert codes(data) == ["automatic_cycle"]


def test_a_condition_that_always_holds_breaks_nothing():
    always = [{"description": "always", "logic": True}]
    data = definition(
        {"a": {"transitions": [auto("b", conditions=always)]}, "b": {"transitions": [auto("a")]}, "end": {}},
        global_transitions=[{"target_state": "end"}],
    )
    assert codes(data) == ["automatic_cycle"]


def test_a_global_automatic_move_counts_in_every_state_it_applies_in():
    data = definition(
        {
            "a": {"transitions": [auto("b"), {"target_state": "end"}]},
            "b": {"transitions": [{"target_state": "end"}]},
            "end": {},
        },
        global_transitions=[auto("a", priority=1)],
    )
    (problem,) = errors(data)
    assert problem.code == "automatic_cycle" and "a → b → a" in problem.message
    assert problem.path == "states.a.transitions[0]"


def test_a_global_automatic_move_excepted_in_a_state_of_the_cycle_does_not_close_it():
    data = definition(
        {
            "a": {"transitions": [auto("b"), {"target_state": "end"}]},
            "b": {"transitions": [{"target_state": "end"}]},
            "end": {},
        },
        global_transitions=[auto("a", priority=1, except_states=["b"])],
    )
    assert codes(data) == []


def test_an_automatic_return_to_the_state_that_moved_there_automatically_is_a_cycle():
    data = definition(
        {
            "a": {"transitions": [auto("helper"), {"target_state": "end"}]},
            "helper": {"transitions": [auto(RETURN)]},
            "end": {},
        }
    )
    (problem,) = errors(data)
    assert problem.code == "automatic_cycle" and "a → helper → a" in problem.message


def test_an_automatic_return_to_a_state_the_model_left_is_no_cycle():
    data = definition(
        {
            "a": {"transitions": [{"target_state": "helper"}, {"target_state": "end"}]},
            "helper": {"transitions": [auto(RETURN)]},
            "end": {},
        }
    )
    assert codes(data) == []


def test_the_cycle_error_names_the_definitions_max_run_steps():
    data = definition(
        {"a": {"transitions": [auto("b"), {"target_state": "end"}]}, "b": {"transitions": [auto("a")]}, "end": {}},
        max_run_steps=5,
    )
    (problem,) = errors(data)
    assert "max_run_steps (5)" in problem.message


# ---------------------------------------------------------------- acting states


def test_an_acting_state_that_reaches_only_acting_states_has_no_way_out():
    data = definition(
        {
            "ask": {"transitions": [{"target_state": "research"}, {"target_state": "end"}]},
            "research": {"acts": True, "transitions": [{"target_state": "write"}]},
            "write": {"acts": True, "transitions": [{"target_state": "research"}]},
            "end": {},
        }
    )
    found = [(p.code, p.path) for p in errors(data)]
    assert found == [("acts_no_way_out", "states.research.acts"), ("acts_no_way_out", "states.write.acts")]
    first = errors(data)[0]
    assert "(research, write)" in first.message and first.hint is not None and '"acts"' in first.hint


@pytest.mark.parametrize(
    "exit_state",
    [
        {},  # terminal
        {"transitions": [{"target_state": "end"}]},  # waits for a person
        {"acts": True},  # acts once, and the run ends
    ],
    ids=["terminal", "waits", "acting terminal"],
)
def test_an_acting_state_that_reaches_a_terminal_or_a_waiting_state_is_fine(exit_state):
    data = definition(
        {
            "research": {"acts": True, "transitions": [{"target_state": "write"}]},
            "write": {"acts": True, "transitions": [{"target_state": "research"}, {"target_state": "out"}]},
            "out": exit_state,
            "end": {},
        }
    )
    assert codes(data) == []


def test_a_global_move_is_a_way_out_of_an_acting_state():
    data = definition(
        {
            "research": {"acts": True, "transitions": [{"target_state": "write"}]},
            "write": {"acts": True, "transitions": [{"target_state": "research"}]},
            "cancelled": {},
        },
        global_transitions=[{"target_state": "cancelled", "description": "Give up"}],
    )
    assert codes(data) == []


def test_going_back_is_a_way_out_of_an_acting_state():
    data = definition(
        {
            "ask": {"transitions": [{"target_state": "lookup"}, {"target_state": "end"}]},
            "lookup": {"acts": True, "transitions": [{"target_state": RETURN}]},
            "end": {},
        }
    )
    assert codes(data) == []


def test_an_acting_state_in_a_definitions_without_way_out_part_is_reported_even_if_unreachable():
    data = definition(
        {
            "ask": {"transitions": [{"target_state": "end"}]},
            "loop": {"acts": True, "transitions": [{"target_state": "loop2"}]},
            "loop2": {"acts": True, "transitions": [{"target_state": "loop"}]},
            "end": {},
        }
    )
    assert codes(data) == ["acts_no_way_out", "acts_no_way_out"]


def test_a_definition_without_acting_states_or_automatic_moves_reports_nothing_new():
    data = definition(
        {
            "a": {"transitions": [{"target_state": "b"}]},
            "b": {"transitions": [{"target_state": "a"}, {"target_state": "c"}]},
            "c": {},
        }
    )
    assert codes(data) == []
