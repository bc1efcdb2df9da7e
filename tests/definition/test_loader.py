from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

import llm_fsm
import llm_fsm.definition.loader
from llm_fsm.definition.json_schema import json_schema
from llm_fsm.definition.loader import DefinitionWarning, inspect
from llm_fsm.errors import DefinitionError
from tests.conftest import SIGNUP

DATA = Path(__file__).parents[1] / "data"

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


def test_a_problem_after_a_bad_condition_keeps_its_own_path(tmp_path):
    # the check of a condition once reused the transitions' path variable: the next transition's problems
    # were then reported at "[1].target_state", line 1 column 1
    data = {"name": "x", "initial_state": "a", "states": {
        "a": {"purpose": "A", "transitions": [
            {"target_state": "b", "conditions": [{"logic": {"mising": ["k"]}}]},
            {"target_state": "bb"},
        ]},
        "b": {"purpose": "B"},
    }}  # fmt: skip
    problems = errors_of(tmp_path, json.dumps(data, indent=2)).problems
    assert [(p.code, p.path) for p in problems] == [
        ("logic", "states.a.transitions[0].conditions[0].logic"),
        ("unknown_state", "states.a.transitions[1].target_state"),
    ]
    assert problems[1].line == 21


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
    assert errors_of(tmp_path, "[1, 2]").problems[0].message == "a definition must be a JSON object, got a list"


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


# ---------------------------------------------------------------- JSON syntax, in plain words


def problem_of(text: str):
    report = llm_fsm.definition.loader.load_text(text, source="def.json")
    assert report.definition is None
    (problem,) = report.errors
    return problem


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        ('{\n  "name": "x",\n}', "JSON does not allow a trailing comma: remove the ',' at 2:14", (2, 14)),
        ('{"tags": ["a", "b",]}', "JSON does not allow a trailing comma: remove the ',' at 1:19", (1, 19)),
        ('{\n  // the name\n  "name": "x"\n}', "JSON does not allow comments: remove the '//' comment at 2:3", (2, 3)),
        ('{"name": /* later */ "x"}', "JSON does not allow comments: remove the '/* */' comment at 1:10", (1, 10)),
        ("{'name': 'x'}", "JSON needs double quotes around keys and strings: replace the ' at 1:2", (1, 2)),
        ("{\"name\": 'x'}", "JSON needs double quotes around keys and strings: replace the ' at 1:10", (1, 10)),
        (
            "name: signup\nstates:\n  a: {}\n",
            "this looks like YAML, but a definition file must be JSON (starting with '{') at 1:1",
            (1, 1),
        ),
        (
            "---\nname: x\n",
            "this looks like YAML, but a definition file must be JSON (starting with '{') at 1:1",
            (1, 1),
        ),
        ("", "the file is empty: a definition is a JSON object, starting with '{'", (1, 1)),
        (" \n\n", "the file is empty: a definition is a JSON object, starting with '{'", (1, 1)),
        (
            '{"name": "x",\n "states": {"a": {',
            "the file ends before the JSON does (is it cut off?): the '{' at 2:18 is never closed",
            (2, 19),
        ),
        (
            '{"name": "x", "purpose": "Ask the',
            "the file ends before the JSON does (is it cut off?): the string at 1:26 is never closed",
            (1, 34),
        ),
        ('{"done": True}', "JSON writes true, false and null in lowercase: 'True' at 1:10", (1, 10)),
        ('{"persona": None}', "JSON writes true, false and null in lowercase: 'None' at 1:13", (1, 13)),
        ('{name: "x"}', 'keys need double quotes: write "name" at 1:2', (1, 2)),
        ('{"state": start}', 'text needs double quotes: write "start" at 1:11', (1, 11)),
        ('{"a": 1 "b": 2}', "a ',' is missing between two items at 1:9", (1, 9)),
        ('{"a" 1}', "a ':' is missing after the key at 1:6", (1, 6)),
        ('{"a": }', "a value is missing at 1:7", (1, 7)),
        ('{"a": "x\ny"}', "a string cannot hold a line break or a tab: write \\n or \\t at 1:9", (1, 9)),
        ('{"path": "C:\\docs"}', "'\\d' is not a JSON escape: write '\\\\' for a backslash, at 1:13", (1, 13)),
        ('{"a": 1}}', "there is more after the end of the JSON object: the '}' at 1:9", (1, 9)),
        ('{"a": 1} {"b": 2}', "there is more after the end of the JSON object: the '{' at 1:10", (1, 10)),
        ('\ufeff\ufeff{"a": 1}', "a byte order mark (BOM) cannot be here: remove it at 1:1", (1, 1)),
    ],
    ids=[
        "trailing-comma-object",
        "trailing-comma-list",
        "line-comment",
        "block-comment",
        "single-quoted-key",
        "single-quoted-value",
        "yaml",
        "yaml-document",
        "empty",
        "blank",
        "truncated",
        "truncated-string",
        "python-true",
        "python-none",
        "bare-key",
        "bare-value",
        "missing-comma",
        "missing-colon",
        "missing-value",
        "line-break-in-string",
        "bad-escape",
        "extra-brace",
        "two-objects",
        "second-bom",
    ],
)
def test_json_syntax_errors_say_what_and_where(text, message, where):
    problem = problem_of(text)
    assert (problem.code, problem.message, (problem.line, problem.column)) == ("json", message, where)


def test_a_byte_order_mark_at_the_start_is_fine_and_utf16_is_named(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(SIGNUP).encode())
    assert llm_fsm.load(path).name == "signup"
    path.write_bytes(json.dumps(SIGNUP).encode("utf-16"))
    (problem,) = inspect(path).errors
    assert (problem.code, problem.message) == ("encoding", "the file is UTF-16 text: save it as UTF-8")


# ---------------------------------------------------------------- types, in plain words


def report_for(tmp_path, data):
    path = tmp_path / "def.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return inspect(path)


def test_a_wrong_type_names_what_was_expected_and_what_was_found(tmp_path):
    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["required_context_keys"] = "name"
    data["states"]["ask_email"]["transitions"][0]["priority"] = "high"
    data["states"]["ask_email"]["transitions"][0]["conditions"][1]["logic"] = "approved"
    data["states"]["done"]["checks"] = [{"kind": "regex", "pattern": ["x"], "must_macth": True}, {"kind": "spell"}]
    data["states"]["done"]["on_exhausted"] = "retry"
    by_path = {p.path: p for p in report_for(tmp_path, data).errors}
    assert {path: p.message for path, p in by_path.items()} == {
        "states.ask_name.required_context_keys": 'expected a list of strings, got a string ("name")',
        "states.ask_email.transitions[0].priority": 'expected a whole number, got a string ("high")',
        "states.ask_email.transitions[0].conditions[1].logic": (
            'expected a JsonLogic rule (an object) or true or false, got a string ("approved")'
        ),
        "states.done.checks[0].pattern": "expected a string, got a list",
        "states.done.checks[0].must_macth": "unknown field 'must_macth'",
        "states.done.checks[1].kind": (
            "unknown check kind 'spell': expected one of 'required_keys', 'schema', 'regex', 'max_length', "
            "'python' or 'judge'"
        ),
        "states.done.on_exhausted": "expected one of 'stay', 'fallback_state' or 'raise', got a string (\"retry\")",
    }
    assert by_path["states.done.checks[0].must_macth"].hint == "did you mean 'must_match'?"
    assert all(p.line is not None for p in by_path.values())


PYDANTIC_WORDS = re.compile(
    r"Input should|valid (tuple|dictionary|string|integer|boolean|list|number)|[a-z]_type\b|_parsing|\btuple\b"
    r"|instance of|Field required|Extra inputs|discriminator|union_tag|literal_error|[Uu]nable to|model_attributes"
    r"|\b(dict|int|str|bool|float)\b|dict\[|Value error"
)
WRONG_VALUES: list[object] = [None, True, 0, -3, 1.5, "", "x", [], ["x"], [1], [None], [{}], {}, {"a": 1}, [[1]]]


def field_locations() -> list[tuple[str | int, ...]]:
    """Where every field of the format sits in a definition with one state holding one of each part."""
    from llm_fsm.definition.models import CheckPart, Condition, Example, State, Transition

    def names(model: type) -> list[str]:
        return [f.alias or name for name, f in model.model_fields.items()]

    state = ("states", "a")
    transition = (*state, "transitions", 0)
    locations: list[tuple[str | int, ...]] = [(name,) for name in names(llm_fsm.FSMDefinition)]
    locations += [(*state,), *((*state, name) for name in names(State))]
    locations += [(*state, "transitions", 0), *((*transition, name) for name in names(Transition))]
    locations += [(*transition, "conditions", 0), *((*transition, "conditions", 0, n) for n in names(Condition))]
    locations += [(*state, "example_dialogue", 0), *((*state, "example_dialogue", 0, n) for n in names(Example))]
    for index, check in enumerate(CheckPart.__subclasses__()):
        locations += [(*state, "checks", index, name) for name in names(check)]
    return locations


def full_definition() -> dict[str, object]:
    """A valid definition in which every part of the format appears once."""
    return {
        "name": "all",
        "initial_state": "a",
        "states": {
            "a": {
                "example_dialogue": [{"role": "user", "content": "hi"}],
                "checks": [
                    {"kind": "required_keys", "keys": ["k"]},
                    {"kind": "schema", "key": "k", "schema": {"type": "string"}},
                    {"kind": "regex", "pattern": "x"},
                    {"kind": "max_length", "max": 10},
                    {"kind": "python", "name": "p"},
                    {"kind": "judge", "rubric": "r"},
                ],
                "transitions": [{"target_state": "b", "conditions": [{"logic": {"var": "k"}}]}],
            },
            "b": {},
        },
    }


def only_problem(data: dict[str, Any], where: tuple[str | int, ...], value: object) -> Any:
    """The one error of ``data`` (changed in place) once the value at ``where`` is ``value``."""
    parent: Any = data
    for part in where[:-1]:
        parent = parent[part]
    parent[where[-1]] = value
    (problem,) = llm_fsm.definition.loader.load_text(json.dumps(data, indent=1)).errors
    return problem


def test_the_full_definition_covers_every_check_kind_in_order():
    from llm_fsm.definition.models import CheckPart

    kinds = [check["kind"] for check in full_definition()["states"]["a"]["checks"]]  # type: ignore[index]
    assert kinds == [c.model_fields["kind"].annotation.__args__[0] for c in CheckPart.__subclasses__()]


def test_no_pydantic_words_reach_the_author_whatever_the_wrong_type():
    seen = 0
    for loc in field_locations():
        for value in WRONG_VALUES:
            data = full_definition()
            parent: Any = data
            for part in loc[:-1]:
                parent = parent[part]
            parent[loc[-1]] = value
            report = llm_fsm.definition.loader.load_text(json.dumps(data, indent=1))
            for problem in [*report.errors, *report.warnings]:
                seen += 1
                words = f"{problem.message} {problem.hint or ''}"
                assert not PYDANTIC_WORDS.search(words), (loc, value, str(problem))
                assert problem.line is not None, (loc, value, str(problem))
    assert seen > 500


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("language",), "x" * 10_000, "at most 64 characters are allowed, got 10000"),
        (("texts", "approval"), "", "at least one character is needed"),
        (("states", "a", "max_retries"), 11, "must be at most 10, got a number (11)"),
        (("max_tool_calls",), 0, "must be at least 1, got a number (0)"),
        (("states", "a", "checks", 0, "keys"), [], "at least one item is needed"),
    ],
)
def test_a_value_of_the_right_type_out_of_its_bounds_names_the_bound(where, value, message):
    """Before: a 10,000-character language was "expected a string, got a string"."""
    data = full_definition() | {"texts": {}}
    problem = only_problem(data, where, value)
    assert problem.path == llm_fsm.definition.loader.dotted(where) and problem.message == message
    assert problem.code == "out_of_range"
    assert not jsonschema.Draft202012Validator(json_schema()).is_valid(data)  # the loader and the schema agree


def test_a_broken_rule_of_any_kind_never_reads_as_the_wrong_type():
    from pydantic import BaseModel, Field

    from llm_fsm.definition.wording import Vocabulary, field_problems

    class Bounded(BaseModel):
        ratio: float = Field(allow_inf_nan=False)
        code: str = Field(pattern="^[a-z]+$")
        step: int = Field(multiple_of=5)

    with pytest.raises(ValidationError) as caught:
        Bounded.model_validate({"ratio": float("inf"), "code": "A1", "step": 7})
    assert [message for _, message, _, _ in field_problems(caught.value, Vocabulary(Bounded))] == [
        "must be a finite number, got a number",
        "must match the pattern '^[a-z]+$', got a string (\"A1\")",
        "must be a multiple of 5, got a number (7)",
    ]


def test_null_in_an_optional_field_is_its_default():
    data = full_definition()
    state = data["states"]["a"]  # type: ignore[index]
    data.update({"description": None, "version": None, "persona": None, "$schema": None, "handler_only_keys": None})
    data.update({"mask_secrets": None, "secret_keys": None, "context_schema": None})
    state.update({key: None for key in ("description", "purpose", "instructions", "required_context_keys")})
    state.update({key: None for key in ("extraction_instructions", "response_instructions", "handlers")})
    state.update({key: None for key in ("writable_keys", "max_retries", "on_exhausted", "fallback_state")})
    state["checks"][2].update({"description": None, "on": None, "must_match": None, "ignore_case": None})
    transition = state["transitions"][0]
    transition.update({"description": None, "priority": None})
    transition["conditions"][0].update({"description": None, "requires_context_keys": None})
    state["transitions"].append({"target_state": "b", "conditions": None})
    data["states"]["b"] = {"transitions": None, "checks": None, "example_dialogue": None}  # type: ignore[index]
    definition = llm_fsm.load(data)
    defaults = llm_fsm.load(full_definition())
    assert definition.persona == "" and definition.version == "1.0" and definition.mask_secrets is True
    assert definition.states["a"].max_retries == 2 and definition.states["a"].writable_keys is None
    assert definition.states["a"].checks[2] == defaults.states["a"].checks[2]
    assert definition.states["a"].transitions[0] == defaults.states["a"].transitions[0]
    assert definition.states["a"].transitions[1].conditions == ()
    assert definition.states["b"] == defaults.states["b"]


def test_null_in_a_required_field_is_a_plain_error(tmp_path):
    data = json.loads(json.dumps(SIGNUP)) | {"name": None}
    data["states"]["ask_name"]["transitions"].append({"target_state": None})
    messages = {p.path: p.message for p in report_for(tmp_path, data).errors}
    assert messages == {
        "name": "expected a string, got null",
        "states.ask_name.transitions[1].target_state": "expected a string, got null",
    }


# ---------------------------------------------------------------- duplicate keys, lists of states


def test_a_duplicate_key_has_its_path_and_position():
    text = '{\n  "name": "x",\n  "states": {\n    "a": {"purpose": "p",\n          "purpose": "q"}\n  }\n}'
    problem = problem_of(text)
    assert (problem.code, problem.path, problem.line, problem.column) == ("duplicate_key", "states.a.purpose", 5, 11)
    assert problem.message == "duplicate key 'purpose' (first at 4:11): a key may appear once in an object"


def test_a_list_of_states_without_ids_reports_only_the_missing_ids(tmp_path):
    data = {"name": "x", "initial_state": "a", "states": [{"purpose": "p"}, {"purpose": "q"}]}
    problems = report_for(tmp_path, data).errors
    assert [(p.code, p.path) for p in problems] == [("missing_id", "states[0].id"), ("missing_id", "states[1].id")]


# ---------------------------------------------------------------- line:column only when needed


def test_positions_are_computed_only_when_there_is_something_to_report(monkeypatch):
    calls = []
    real = llm_fsm.definition.loader._positions
    monkeypatch.setattr(llm_fsm.definition.loader, "_positions", lambda text: calls.append(text) or real(text))
    clean = json.dumps(SIGNUP, indent=2)
    assert llm_fsm.definition.loader.load_text(clean).definition is not None and calls == []
    broken = clean.replace('"priority": 10', '"priority": "high"')
    (problem,) = llm_fsm.definition.loader.load_text(broken).errors
    assert problem.line is not None and len(calls) == 1


def test_an_item_of_an_optional_list_is_reported_at_its_own_place():
    data = full_definition()
    data["states"]["a"]["writable_keys"] = ["k", 1]  # type: ignore[index]
    (problem,) = llm_fsm.definition.loader.load_text(json.dumps(data, indent=1)).errors
    assert (problem.path, problem.message) == ("states.a.writable_keys[1]", "expected a string, got a number (1)")


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("mask_secrets",), "no", 'expected true or false, got a string ("no")'),
        (("mask_secrets",), 0, "expected true or false, got a number (0)"),
        (("states", "a", "checks", 2, "must_match"), "false", 'expected true or false, got a string ("false")'),
        (("states", "a", "checks", 2, "ignore_case"), 1, "expected true or false, got a number (1)"),
        (("states", "a", "transitions", 0, "priority"), True, "expected a whole number, got true"),
        (("states", "a", "transitions", 0, "priority"), "10", 'expected a whole number, got a string ("10")'),
        (("states", "a", "max_retries"), False, "expected a whole number, got false"),
        (("states", "a", "checks", 3, "max"), "10", 'expected a whole number, got a string ("10")'),
        (
            ("states", "a", "transitions", 0, "conditions", 0, "logic"),
            "yes",
            'expected a JsonLogic rule (an object) or true or false, got a string ("yes")',
        ),
        (
            ("states", "a", "transitions", 0, "conditions", 0, "logic"),
            1,
            "expected a JsonLogic rule (an object) or true or false, got a number (1)",
        ),
    ],
)
def test_booleans_and_whole_numbers_are_not_converted_from_other_types(where, value, message):
    """What the published JSON Schema rejects does not load: "no" is not false (masking stays on)."""
    data = full_definition()
    problem = only_problem(data, where, value)
    assert problem.path == llm_fsm.definition.loader.dotted(where) and problem.message == message
    schema_validator = jsonschema.Draft202012Validator(json_schema())
    assert not schema_validator.is_valid(data)  # the loader and the schema agree
