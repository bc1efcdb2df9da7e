"""Files in the llm-fsm format (3.0 and 4.1) load, and their conditions decide as llm-fsm decides.

The files under ``tests/data/llm_fsm_format/`` are our own, written to the published format: a 3.0-style
file, a 4.1-style file, files as llm-fsm's pydantic ``model_dump_json()`` writes them (every optional
field present, ``null`` when unset) and one file per llm-fsm operator. The expected outcomes below are
worked out by hand from llm-fsm's documented meaning of each operator.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.loader import inspect
from llm_fsm.definition.reply_schema import writable_keys
from llm_fsm.testing import ScriptedLLM, reply

FORMAT = Path(__file__).parents[1] / "data" / "llm_fsm_format"
FILES = sorted(FORMAT.glob("*.json"))
DUMPS = sorted(FORMAT.glob("dump_*.json"))


def load_quietly(path: Path) -> llm_fsm.FSMDefinition:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llm_fsm.load(path)


def holding(definition: llm_fsm.FSMDefinition, state: str, context: dict[str, Any]) -> list[str]:
    """The targets of the transitions of ``state`` whose conditions hold on ``context``, best first."""
    transitions = definition.states[state].transitions_by_priority()
    return [t.target_state for t in transitions if unmet_condition(t, context) is None]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_file_loads_without_errors(path):
    report = inspect(path)
    assert report.errors == [] and report.definition is not None
    assert all(p.code in ("ignored_field", "mapped_field") for p in report.warnings)


@pytest.mark.parametrize("path", DUMPS, ids=[p.name for p in DUMPS])
def test_model_dump_files_load_with_every_null_as_the_default_and_no_warning(path):
    raw = json.loads(path.read_text())
    assert None in [state.get("required_context_keys") for state in raw["states"].values()]  # the dump's nulls
    report = inspect(path)
    assert report.errors == [] and report.warnings == []
    definition = report.definition
    assert definition is not None and definition.persona == ""
    for state in definition.states.values():
        assert state.instructions == "" and state.example_dialogue == ()
        for transition in state.transitions:
            assert all(isinstance(c.requires_context_keys, tuple) for c in transition.conditions)


# (file, state, context, targets whose conditions hold there, best first), as llm-fsm decides them
OUTCOMES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("v30_plant_clinic.json", "welcome", {"plant_type": "fern"}, ["symptoms"]),
    ("v30_plant_clinic.json", "welcome", {}, []),
    ("v30_plant_clinic.json", "symptoms", {"symptom": "yellow leaves", "waterings_per_week": 7}, ["advice"]),
    ("v30_plant_clinic.json", "symptoms", {"symptom": "yellow leaves", "waterings_per_week": 20}, []),
    ("v30_plant_clinic.json", "symptoms", {"symptom": "yellow leaves"}, []),
    ("v30_plant_clinic.json", "symptoms", {"waterings_per_week": 3}, []),
    ("v41_tailor_shop.json", "garment", {"garment": "jacket"}, ["alteration"]),
    ("v41_tailor_shop.json", "garment", {"garment": "hat"}, []),
    ("v41_tailor_shop.json", "alteration", {"alteration": "hem", "amount_cm": 0.5}, ["quote", "garment"]),
    ("v41_tailor_shop.json", "alteration", {"alteration": "hem", "amount_cm": 20}, ["garment"]),
    ("v41_tailor_shop.json", "quote", {"quote_accepted": True}, ["done"]),
    ("v41_tailor_shop.json", "quote", {"quote_accepted": False}, []),
    ("dump_v30.json", "loaf", {"loaf": "rye"}, ["count"]),
    ("dump_v30.json", "loaf", {"loaf": "brioche"}, []),
    ("dump_v30.json", "count", {"count": 2}, ["ordered"]),
    ("dump_v30.json", "count", {"count": 0}, []),
    ("dump_v41.json", "colour", {"colour": "red"}, ["seat"]),
    ("dump_v41.json", "seat", {}, []),
    ("dump_v41_fsm_llm.json", "ask_code", {"tracking_code": "ZX81"}, ["ask_time"]),
    ("dump_v41_fsm_llm.json", "ask_time", {"pickup_hour": 9}, ["booked", "ask_code"]),
    ("dump_v41_fsm_llm.json", "ask_time", {"pickup_hour": 19}, ["ask_code"]),
    # has_context, one argument and llm-fsm's two-argument form [object, key]
    ("op_has_context.json", "contact", {"phone": "0612345678"}, ["call_back"]),
    ("op_has_context.json", "contact", {"email": "ann@example.org"}, ["write_back"]),
    (
        "op_has_context.json",
        "contact",
        {"phone": "0612345678", "email": "ann@example.org"},
        ["call_back", "write_back"],
    ),
    ("op_has_context.json", "contact", {}, []),
    ("op_has_context.json", "contact", {"address": {"city": "Lyon"}}, ["ask_street"]),
    ("op_has_context.json", "contact", {"address": {"city": "Lyon", "street": "Rue Neuve"}}, []),
    # contains: [container, item], on lists and strings
    ("op_contains.json", "allergies", {"allergies": ["peanuts", "milk"]}, ["nut_free_menu", "full_menu"]),
    ("op_contains.json", "allergies", {"allergies": ["milk"], "note": "ask the chef"}, ["call_chef", "full_menu"]),
    ("op_contains.json", "allergies", {"allergies": ["milk"], "note": "a window seat"}, ["full_menu"]),
    ("op_contains.json", "allergies", {"note": "a window seat"}, []),
    # context_length: [object, path] is the length of the list, string or object there; 0 when absent
    ("op_context_length.json", "members", {"members": ["Ann", "Bo"], "team_name": "Quizzly Bears"}, ["registered"]),
    ("op_context_length.json", "members", {"members": ["Ann"], "team_name": "Solo"}, []),
    ("op_context_length.json", "members", {"members": ["A", "B", "C"], "team_name": "The Extremely Long Team"}, []),
    ("op_context_length.json", "members", {"members": list("ABCDEFG"), "team_name": "Seven"}, []),
    ("op_context_length.json", "members", {"team_name": "Nobody"}, []),
    # in with an object on the right: is the left a key of it (whatever its value)
    ("op_in_object.json", "size", {"size": "42", "stock": {"41": 2, "42": 0}}, ["reserve"]),
    ("op_in_object.json", "size", {"size": "44", "stock": {"41": 2, "42": 0}}, []),
    ("op_in_object.json", "size", {"size": "42"}, []),
    ("op_in_object.json", "size", {"size": 42, "stock": {"42": 1}}, []),
    ("op_in_object.json", "size", {"gift_wrap": True}, ["gift_wrap"]),
]


@pytest.mark.parametrize(("name", "state", "context", "expected"), OUTCOMES)
def test_conditions_decide_as_llm_fsm_does(name, state, context, expected):
    definition = load_quietly(FORMAT / name)
    assert holding(definition, state, context) == expected


def test_the_keys_an_operator_reads_are_keys_the_model_may_write():
    definition = load_quietly(FORMAT / "op_has_context.json")
    assert {"phone", "email", "address"} <= set(writable_keys(definition.states["contact"]))
    definition = load_quietly(FORMAT / "op_context_length.json")
    assert {"members", "team_name"} <= set(writable_keys(definition.states["members"]))


def test_a_two_argument_has_context_transition_is_taken_in_a_conversation():
    definition = load_quietly(FORMAT / "op_has_context.json")
    llm = ScriptedLLM([reply("contact", "How can we reach you?"), reply("call_back", "We'll call!", phone="0612")])
    conversation = llm_fsm.Conversation(definition, llm)
    conversation.start()
    result = conversation.send("call me on 0612")
    assert (result.state, result.rejected) == ("call_back", ())


def test_ignored_fields_are_reported_once_per_field_with_a_count():
    report = inspect(FORMAT / "v41_tailor_shop.json")
    assert {p.code for p in report.warnings} == {"ignored_field", "mapped_field"}
    messages = sorted(p.message for p in report.warnings if p.code == "ignored_field")
    assert messages == [
        "'context_scope' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'evaluation_priority' in 2 conditions (llm-fsm 4.1; not used by this runtime)",
        "'extraction_confidence_threshold' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'extraction_retries' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'field_extractions' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'is_deterministic' in 1 transition (llm-fsm 4.1; not used by this runtime)",  # the other one is the default
        "'llm_description' in 4 transitions (llm-fsm 4.1; not used by this runtime)",
        "'response_type' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'transition_classification' in 1 state (llm-fsm 4.1; not used by this runtime)",
        "'transition_evaluation_mode' (llm-fsm 4.1; not used by this runtime)",
    ]
    first = next(p for p in report.warnings if "'llm_description'" in p.message)
    assert first.path == "states.garment.transitions[0].llm_description" and first.line is not None


def test_a_3_0_file_reports_its_handlers_once():
    report = inspect(FORMAT / "v30_plant_clinic.json")
    assert [(p.path, p.message) for p in report.warnings] == [
        ("function_handlers", "'function_handlers' (llm-fsm 3.0; not used by this runtime)")
    ]
    state = report.definition.states["welcome"] if report.definition else None
    assert state is not None and [line.role for line in state.example_dialogue] == ["user", "assistant"]


MINIMAL = {
    "name": "m",
    "initial_state": "a",
    "states": {
        "a": {"id": "a", "transitions": [{"target_state": "b", "conditions": [{"description": "always"}]}]},
        "b": {"id": "b"},
    },
}

# (where, field, a value that says nothing: null, empty or llm-fsm's default, a value that says something)
QUIET = [
    ("fsm", "function_handlers", None, [{"name": "h", "trigger_on": ["pre_transition"]}]),
    ("fsm", "function_handlers", [], [{"name": "h", "trigger_on": ["pre_transition"]}]),
    ("fsm", "transition_evaluation_mode", "hybrid", "llm"),
    ("state", "extraction_retries", 1, 2),
    ("state", "extraction_confidence_threshold", 0.0, 0.5),
    ("state", "response_type", "conversational", "form"),
    ("state", "field_extractions", [], [{"field_name": "x"}]),
    ("state", "context_scope", {}, {"read_keys": ["x"]}),
    ("state", "auto_transition_threshold", None, 0.9),
    ("state", "classification_extractions", None, [{"field_name": "x"}]),
    ("transition", "is_deterministic", True, False),
    ("transition", "llm_description", None, "Go on"),
    ("condition", "evaluation_priority", 100, 1),
]


def with_field(where: str, field: str, value: object) -> dict[str, Any]:
    data = json.loads(json.dumps(MINIMAL))
    state = data["states"]["a"]
    transition = state["transitions"][0]
    places = {"fsm": data, "state": state, "transition": transition, "condition": transition["conditions"][0]}
    places[where][field] = value
    return data


@pytest.mark.parametrize(("where", "field", "quiet", "loud"), QUIET, ids=[f"{q[1]}={q[2]!r}" for q in QUIET])
def test_no_ignored_field_warning_for_a_null_empty_or_default_value(where, field, quiet, loud):
    assert inspect(with_field(where, field, quiet)).warnings == []
    (warning,) = inspect(with_field(where, field, loud)).warnings
    # a threshold is mapped where it can be (see the tests below); here no move has a condition that can fail
    expected = "mapped_field" if field == "auto_transition_threshold" else "ignored_field"
    assert warning.code == expected and f"'{field}'" in warning.message


# ---------------------------------------------------------------- auto_transition_threshold (llm-fsm 4.x)


def automatic_moves(definition: llm_fsm.FSMDefinition) -> list[tuple[str, str]]:
    return [(sid, t.target_state) for sid, s in definition.states.items() for t in s.transitions if t.automatic]


def test_a_threshold_makes_the_states_conditioned_deterministic_moves_automatic():
    # llm-fsm 4.x takes a move with no model call where its conditions decide it; moves without conditions, and
    # those marked "is_deterministic": false, are the model's to choose. Ours: "automatic" moves.
    report = inspect(FORMAT / "v41_parcel_desk.json")
    assert report.errors == [] and report.definition is not None
    assert automatic_moves(report.definition) == [("ask_code", "ask_slot"), ("ask_slot", "booked")]


def test_each_threshold_is_one_warning_naming_the_state_and_what_was_mapped():
    report = inspect(FORMAT / "v41_parcel_desk.json")
    mapped = [p for p in report.warnings if p.code == "mapped_field"]
    assert [(p.path, p.line) for p in mapped] == [
        ("states.ask_code.auto_transition_threshold", 14),
        ("states.ask_slot.auto_transition_threshold", 40),
        ("states.clerk.auto_transition_threshold", 69),
    ]
    first, _, unused = mapped
    assert first.message == (
        "'auto_transition_threshold' (0.9) in state 'ask_code' (llm-fsm 4.1): transitions[0] load as "
        '"automatic": true, taken with no model call once their conditions hold; the threshold\'s number is not used'
    )
    assert first.hint is not None and '"is_deterministic": false' in first.hint
    assert "in state 'clerk'" in unused.message and "is not used" in unused.message


def test_is_deterministic_in_a_state_with_a_threshold_is_used_and_not_reported():
    report = inspect(FORMAT / "v41_parcel_desk.json")
    assert not any("is_deterministic" in p.message for p in report.warnings)
    # in a state without a threshold it means nothing here: still an ignored field
    tailor = inspect(FORMAT / "v41_tailor_shop.json")
    (ignored,) = [p for p in tailor.warnings if "'is_deterministic'" in p.message]
    assert ignored.path == "states.alteration.transitions[1].is_deterministic"


def test_a_move_whose_conditions_always_hold_stays_the_models():
    data = with_field("state", "auto_transition_threshold", 0.9)  # a → b on a condition with nothing to check
    definition = inspect(data).definition
    assert definition is not None and automatic_moves(definition) == []


def test_an_explicit_automatic_wins_over_the_threshold():
    data = json.loads((FORMAT / "v41_parcel_desk.json").read_text())
    data["states"]["ask_code"]["transitions"][0]["automatic"] = False
    definition = inspect(data).definition
    assert definition is not None and automatic_moves(definition) == [("ask_slot", "booked")]


def test_a_file_without_a_threshold_loads_no_automatic_move():
    for path in FILES:
        if "auto_transition_threshold" not in path.read_text():
            assert automatic_moves(load_quietly(path)) == [], path.name
