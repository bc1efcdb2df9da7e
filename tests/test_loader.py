from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from pydantic import ValidationError

import llm_fsm
from llm_fsm.errors import DefinitionError
from llm_fsm.loader import DefinitionWarning, inspect
from tests.conftest import SIGNUP

DATA = Path(__file__).parent / "data"

BROKEN = """{
  "name": "broken",
  "initial_state": "greet",
  "states": {
    "greet": {
      "purpose": "Say hello",
      "transitions": [{"target_state": "ask_nme", "priority": "high"}]
    },
    "ask_name": {
      "purpose": "Ask the name",
      "transitions": [
        {"target_state": "done", "conditions": [{"logic": {"mising": ["name"]}}]}
      ]
    },
    "done": {"purpose": "Bye"}
  }
}
"""


def errors_of(tmp_path, text, **kwargs):
    path = tmp_path / "def.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DefinitionError) as info:
        llm_fsm.load(path, **kwargs)
    return info.value


def test_every_problem_is_reported_at_once_with_path_position_and_hint(tmp_path):
    error = errors_of(tmp_path, BROKEN)
    by_path = {p.path: p for p in error.problems}
    target = by_path["states.greet.transitions[0].target_state"]
    assert target.message == "unknown state 'ask_nme'" and target.hint == "did you mean 'ask_name'?"
    assert (target.line, target.column) == (7, 24)
    assert by_path["states.greet.transitions[0].priority"].line == 7
    logic = by_path["states.ask_name.transitions[0].conditions[0].logic"]
    assert "unknown operator 'mising'" in logic.message and "missing" in logic.message
    assert len(error.problems) >= 3
    assert str(target).startswith(f"{tmp_path / 'def.json'}:7:24: states.greet.transitions[0].target_state")


def test_initial_state_must_exist(tmp_path):
    data = json.loads(json.dumps(SIGNUP)) | {"initial_state": "ask_nam"}
    error = errors_of(tmp_path, json.dumps(data, indent=1))
    (problem,) = [p for p in error.problems if p.path == "initial_state"]
    assert problem.hint == "did you mean 'ask_name'?" and problem.line == 4


def test_a_terminal_state_must_be_reachable(tmp_path):
    data = {
        "name": "loop",
        "initial_state": "a",
        "states": {
            "a": {"transitions": [{"target_state": "b"}]},
            "b": {"transitions": [{"target_state": "a"}]},
            "end": {},
        },
    }
    error = errors_of(tmp_path, json.dumps(data))
    assert [p.code for p in error.problems] == ["no_terminal"]


def test_ids_must_be_identifiers_unique_and_match_their_key(tmp_path):
    listed = {
        "name": "x",
        "initial_state": "a",
        "states": [
            {"id": "a", "transitions": [{"target_state": "b c"}]},
            {"id": "b c"},
            {"id": "a"},
            {"purpose": "no id"},
        ],
    }
    codes = {p.code for p in errors_of(tmp_path, json.dumps(listed)).problems}
    assert {"bad_id", "duplicate_state", "missing_id"} <= codes
    mismatch = {"name": "x", "initial_state": "a", "states": {"a": {"id": "b"}}}
    assert [p.code for p in errors_of(tmp_path, json.dumps(mismatch)).problems] == ["id_mismatch"]


def test_states_may_be_a_list_and_positions_follow_the_list(tmp_path):
    listed = json.loads(json.dumps(SIGNUP))
    listed["states"] = [{"id": k, **v} for k, v in listed["states"].items()]
    path = tmp_path / "list.json"
    path.write_text(json.dumps(listed, indent=2))
    assert set(llm_fsm.load(path).states) == {"ask_name", "ask_email", "done"}
    listed["states"][1]["transitions"][0]["target_state"] = "dne"
    error = errors_of(tmp_path, json.dumps(listed, indent=2))
    (problem,) = [p for p in error.problems if p.code == "unknown_state"]
    assert problem.path == "states.ask_email.transitions[0].target_state" and problem.hint == "did you mean 'done'?"
    assert problem.line is not None


def test_invalid_json_duplicate_keys_and_encoding(tmp_path):
    error = errors_of(tmp_path, '{"name": "x",\n "states": }')
    assert error.problems[0].code == "json" and (error.problems[0].line, error.problems[0].column) == (2, 12)
    error = errors_of(tmp_path, '{"name": "x", "name": "y"}')
    assert "duplicate key 'name'" in error.problems[0].message
    path = tmp_path / "latin.json"
    path.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(DefinitionError, match="not UTF-8"):
        llm_fsm.load(path)
    with pytest.raises(DefinitionError, match="cannot read"):
        llm_fsm.load(tmp_path / "missing.json")
    assert errors_of(tmp_path, "[1, 2]").problems[0].message == "a definition must be a JSON object"


def test_missing_required_fields_are_reported_together(tmp_path):
    error = errors_of(tmp_path, '{"states": {"a": {"transitions": [{"priority": 1}]}}}')
    paths = {p.path for p in error.problems}
    assert {"name", "initial_state", "states.a.transitions[0].target_state"} <= paths


def test_unknown_fields_warn_by_default_and_fail_when_strict(tmp_path):
    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["trasitions"] = []
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    with pytest.warns(DefinitionWarning, match="unknown field 'trasitions'"):
        llm_fsm.load(path)
    error = errors_of(tmp_path, json.dumps(data), strict=True)
    (problem,) = error.problems
    assert problem.path == "states.ask_name.trasitions" and problem.hint == "did you mean 'transitions'?"


@pytest.mark.parametrize("name", ["v3_library_card.json", "v41_bike_repair.json"])
def test_llm_fsm_format_files_load_and_report_every_ignored_field(name):
    path = DATA / "llmfsm" / name
    raw = json.loads(path.read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        definition = llm_fsm.load(path)
    report = inspect(path)
    assert not report.errors and definition.name
    ignored = {p.path.split(".")[-1] for p in report.warnings if p.code == "ignored_field"}
    assert len(caught) == len(report.warnings) > 0
    # Every field of the file is either a field of the model or reported.
    used = set(llm_fsm.FSMDefinition.model_fields) | {"$schema"}
    state_fields = set(llm_fsm.State.model_fields)
    for key in raw:
        assert key in used or key in ignored, key
    for state in raw["states"].values():
        for key in state:
            assert key in state_fields or key in ignored, key


def test_llm_fsm_v3_fields_are_used():
    with pytest.warns(DefinitionWarning, match="function_handlers"):
        definition = llm_fsm.load(DATA / "llmfsm" / "v3_library_card.json")
    state = definition.states["hello"]
    assert state.instructions and state.example_dialogue[0].role == "user"


def test_loading_a_dict_does_not_change_it():
    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["transitions"][0]["unknown"] = 1
    before = json.dumps(data, sort_keys=True)
    with pytest.warns(DefinitionWarning):
        llm_fsm.load(data)
    assert json.dumps(data, sort_keys=True) == before


def test_definition_is_immutable_and_hashable_content(signup):
    with pytest.raises(ValidationError):
        signup.name = "other"  # type: ignore[misc]
    assert signup.content_hash == llm_fsm.load(json.loads(json.dumps(SIGNUP))).content_hash
    assert signup.states["ask_email"].transitions_by_priority()[0].target_state == "done"


def test_pathological_json_is_a_definition_error(tmp_path):
    assert "too deep" in errors_of(tmp_path, "[" * 100_000 + "]" * 100_000).problems[0].message
    assert errors_of(tmp_path, '{"name": ' + "9" * 5000 + "}").problems[0].code == "json"
