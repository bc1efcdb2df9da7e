"""The editor's writer: a file saved unchanged is the same bytes, and an edit rewrites only what it changed."""

from __future__ import annotations

import copy
import difflib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.editor.json_edit import render
from tests.conftest import ROOT

ALL_JSON = sorted(
    path
    for pattern in ("fsm_definitions/**/*.json", "examples/*.json", "tests/data/**/*.json")
    for path in ROOT.glob(pattern)
)
EXAMPLES = sorted([*ROOT.glob("fsm_definitions/*.json"), *ROOT.glob("examples/*.json")])
INSURANCE = ROOT / "fsm_definitions" / "insurance_claim.json"

SMALL = """{
  "name": "shop",
  "initial_state": "greet",
  "context_schema": {
    "email": {"type": "string"},
    "age": {"type": "integer", "minimum": 0}
  },
  "states": {
    "greet": {
      "purpose": "Say hello",
      "required_context_keys": ["email"],
      "transitions": [
        {"target_state": "done", "description": "Has email", "priority": 10},
        {
          "target_state": "help",
          "priority": 20,
          "conditions": [{"description": "asks", "requires_context_keys": ["question"]}]
        }
      ]
    },
    "help": {"purpose": "Answer", "transitions": [{"target_state": "greet", "priority": 1.0}]},
    "done": {"purpose": "Bye"}
  }
}
"""


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines ``after`` removed from ``before`` and the lines it added (by difflib, no line taken as junk)."""
    old, new = before.splitlines(), after.splitlines()
    removed, added = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    return removed, added


def strictly(value: Any) -> Any:
    """``value`` in a form whose ``==`` tells true from 1 and minds the key order, as the writer does."""
    if isinstance(value, dict):
        return [(key, strictly(member)) for key, member in value.items()]
    if isinstance(value, list):
        return ["list", *(strictly(element) for element in value)]
    return (type(value) if isinstance(value, bool | str | None) else float, value)


def edited(text: str, value: Any) -> str:
    """``render`` of ``value`` into ``text``, checked: the result parses back to ``value`` and is stable."""
    out = render(text, value)
    assert strictly(json.loads(out.removeprefix("\ufeff"))) == strictly(value)
    assert render(out, json.loads(out.removeprefix("\ufeff"))) == out
    return out


# -- the same value is the same text --------------------------------------------------------------


def file_text(path: Path) -> str:
    """The file's text as it is (``read_text`` would turn CRLF into LF)."""
    return path.read_bytes().decode("utf-8")


def parsed_files() -> Iterator[Path]:
    """The files that are JSON (some test data is not, on purpose)."""
    for path in ALL_JSON:
        try:
            json.loads(file_text(path).removeprefix("\ufeff"))
        except ValueError:
            continue
        yield path


@pytest.mark.parametrize("path", list(parsed_files()), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_json_file_is_written_back_byte_for_byte(path: Path) -> None:
    text = file_text(path)
    assert render(text, json.loads(text.removeprefix("\ufeff"))).encode("utf-8") == path.read_bytes()


def test_the_files_read_are_many_and_include_the_examples() -> None:
    found = list(parsed_files())
    assert len(found) > 50
    assert INSURANCE in found and ROOT / "examples" / "helpdesk.json" in found


ODD_TEXTS = {
    "bom": '\ufeff{\n  "a": 1\n}\n',
    "crlf": '{\r\n  "a": [1, 2],\r\n  "b": {\r\n    "c": true\r\n  }\r\n}\r\n',
    "no final newline": '{\n  "a": 1\n}',
    "blank lines after": '{"a": 1}\n\n\n',
    "white space before": '  \n {"a": 1}\n',
    "tabs": '{\n\t"a": {\n\t\t"b": [\n\t\t\t1\n\t\t]\n\t}\n}\n',
    "escapes": '{"e": "caf\\u00e9", "f": "café", "slash": "a\\/b", "nl": "a\\nb", "q": "\\"", "u": "\\uD83D\\uDE00"}',
    "numbers": '{"a": 1.0, "b": 1e3, "c": -0, "d": 1E+2, "e": 0.50, "f": 12345678901234567890, "g": -1.5e-7}',
    "constants": '{"t": true, "f": false, "n": null, "nan": NaN, "inf": Infinity, "minf": -Infinity}',
    "empty containers": '{"a": {}, "b": [], "c": { }, "d": [\n\n], "e": [{}, []]}',
    "compact": '{"a":{"b":[1,2,{"c":null}]},"d":"e"}',
    "spaces inside": '{ "a" : [ 1 , 2 ] , "b" :{ } }',
    "nested one-line": '{\n  "a": {"b": {"c": [1, {"d": 2}]}, "e": []}\n}\n',
    "scalar root": '"just a string"\n',
    "array root": "[1, [2, [3]]]",
    "repeated key": '{"a": 1, "a": 2}',
    "blank lines between": '{\n  "a": 1,\n\n  "b": 2\n}\n',
    "comma first": '{\n  "a": 1\n  , "b": 2\n}\n',
}


@pytest.mark.parametrize("text", ODD_TEXTS.values(), ids=ODD_TEXTS.keys())
def test_odd_texts_are_written_back_byte_for_byte(text: str) -> None:
    value = json.loads(text.removeprefix("\ufeff"))
    assert render(text, value) == text


# -- what is new: fresh text ----------------------------------------------------------------------

VALUE = {"name": "x", "tags": ["a", "b"], "states": {"s": {"transitions": [{"target_state": "s"}], "e": {}}}}
FRESH = """{
  "name": "x",
  "tags": ["a", "b"],
  "states": {
    "s": {
      "transitions": [
        {
          "target_state": "s"
        }
      ],
      "e": {}
    }
  }
}
"""


@pytest.mark.parametrize("original", [None, "", "   \n\t", "{not json", '{"a": 1,}', "\ufeff"])
def test_no_json_to_keep_gives_fresh_two_space_text(original: str | None) -> None:
    out = render(original, VALUE)
    assert out.removeprefix("\ufeff") == FRESH
    assert out.startswith("\ufeff") == (original == "\ufeff")


def test_fresh_text_writes_non_ascii_as_it_is() -> None:
    assert (
        render(None, {"é": ["ü"], "n": 1.5, "b": True, "z": None})
        == '{\n  "é": ["ü"],\n  "n": 1.5,\n  "b": true,\n  "z": null\n}\n'
    )
    assert render(None, []) == "[]\n"


def test_a_key_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="keys are strings: 1 is not"):
        render(None, {1: "a"})
    with pytest.raises(TypeError, match="keys are strings"):
        render('{"a": {"b": 1}}', {"a": {"b": 1, 2: 3}})


# -- edits: exactly what changed --------------------------------------------------------------------


def test_a_scalar_deep_inside_changes_one_line() -> None:
    text = INSURANCE.read_text(encoding="utf-8")
    value = json.loads(text)
    value["states"]["damage"]["transitions"][0]["priority"] = 11
    assert changed_lines(text, edited(text, value)) == (['          "priority": 10,'], ['          "priority": 11,'])
    value = json.loads(text)
    value["states"]["identity"]["transitions"][0]["conditions"][0]["logic"]["=="][1] = False
    line = '"conditions": [{"description": "identity confirmed", "logic": {"==": [{"var": "identity_verified"}, %s]}}]'
    assert changed_lines(text, edited(text, value)) == ([" " * 10 + line % "true"], [" " * 10 + line % "false"])


def test_a_new_state_is_written_in_the_files_style() -> None:
    value = json.loads(SMALL)
    value["states"]["bye"] = {"purpose": "Wave", "required_context_keys": ["a", "b"], "transitions": []}
    out = edited(SMALL, value)
    assert out == SMALL.replace(
        '    "done": {"purpose": "Bye"}\n',
        '    "done": {"purpose": "Bye"},\n'
        '    "bye": {\n'
        '      "purpose": "Wave",\n'
        '      "required_context_keys": ["a", "b"],\n'
        '      "transitions": []\n'
        "    }\n",
    )


def test_a_deleted_transition_takes_its_lines_and_comma_with_it() -> None:
    value = json.loads(SMALL)
    del value["states"]["greet"]["transitions"][1]
    out = edited(SMALL, value)
    assert out == SMALL.replace(
        '"priority": 10},\n'
        "        {\n"
        '          "target_state": "help",\n'
        '          "priority": 20,\n'
        '          "conditions": [{"description": "asks", "requires_context_keys": ["question"]}]\n'
        "        }\n",
        '"priority": 10}\n',
    )
    value = json.loads(SMALL)
    del value["states"]["greet"]["transitions"][0]
    assert edited(SMALL, value) == SMALL.replace(
        '        {"target_state": "done", "description": "Has email", "priority": 10},\n', ""
    )


def test_removed_members_leave_no_blank_line_nor_comma() -> None:
    value = json.loads(SMALL)
    del value["states"]["done"]
    assert edited(SMALL, value) == SMALL.replace(
        '"priority": 1.0}]},\n    "done": {"purpose": "Bye"}\n', '"priority": 1.0}]}\n'
    )
    value = json.loads(SMALL)
    del value["name"]
    assert edited(SMALL, value) == SMALL.replace('  "name": "shop",\n', "")
    value = json.loads(SMALL)
    value["context_schema"] = {}
    assert '  "context_schema": {},\n  "states"' in edited(SMALL, value)
    text = '{\n  "a": 1,\n\n  "b": 2,\n\n  "c": 3\n}\n'
    assert edited(text, {"b": 2, "c": 3}) == '{\n  "b": 2,\n\n  "c": 3\n}\n'
    assert edited(text, {"a": 1, "b": 2}) == '{\n  "a": 1,\n\n  "b": 2\n}\n'


def test_a_renamed_key_keeps_its_value_as_written() -> None:
    value = json.loads(SMALL)
    value["states"] = {"welcome" if key == "greet" else key: state for key, state in value["states"].items()}
    value["initial_state"] = "welcome"
    value["states"]["help"]["transitions"][0]["target_state"] = "welcome"
    out = edited(SMALL, value)
    assert changed_lines(SMALL, out) == (
        [
            '  "initial_state": "greet",',
            '    "greet": {',
            '    "help": {"purpose": "Answer", "transitions": [{"target_state": "greet", "priority": 1.0}]},',
        ],
        [
            '  "initial_state": "welcome",',
            '    "welcome": {',
            '    "help": {"purpose": "Answer", "transitions": [{"target_state": "welcome", "priority": 1.0}]},',
        ],
    )


def test_renaming_a_state_of_an_example_changes_its_key_line_and_its_targets_only() -> None:
    text = INSURANCE.read_text(encoding="utf-8")
    value = json.loads(text)
    value["states"] = {"what_happened" if key == "incident" else key: s for key, s in value["states"].items()}
    targets = 0
    for state in value["states"].values():
        for transition in state.get("transitions", []):
            if transition["target_state"] == "incident":
                transition["target_state"] = "what_happened"
                targets += 1
    removed, added = changed_lines(text, edited(text, value))
    assert targets == 2
    assert removed == [
        '          "target_state": "incident",',
        '    "incident": {',
        '          "target_state": "incident",',
    ]
    assert added == [line.replace('"incident"', '"what_happened"') for line in removed]


def test_a_renamed_key_is_paired_by_its_place_among_the_kept_keys() -> None:
    text = '{\n  "a": 1,\n  "b": {"x": [1,2]},\n  "c": 3\n}\n'
    assert (
        edited(text, {"a": 1, "B": {"x": [1, 2, 3]}, "c": 3}) == '{\n  "a": 1,\n  "B": {"x": [1,2,3]},\n  "c": 3\n}\n'
    )
    # "a" gone and "z" new, but not at the same place: a removal and an addition
    assert edited(text, {"b": {"x": [1, 2]}, "c": 3, "z": 1}) == '{\n  "b": {"x": [1,2]},\n  "c": 3,\n  "z": 1\n}\n'


def test_reordered_keys_and_elements_move_their_text() -> None:
    value = json.loads(SMALL)
    value["states"] = {key: value["states"][key] for key in ("done", "greet", "help")}
    out = edited(SMALL, value)
    done = '    "done": {"purpose": "Bye"}'
    help_state = '    "help": {"purpose": "Answer", "transitions": [{"target_state": "greet", "priority": 1.0}]}'
    assert out == SMALL.replace(f"{help_state},\n{done}\n", f"{help_state}\n").replace(
        '  "states": {\n', f'  "states": {{\n{done},\n'
    )
    value = json.loads(SMALL)
    value["states"]["greet"]["transitions"].reverse()
    one_line = '        {"target_state": "done", "description": "Has email", "priority": 10}'
    assert edited(SMALL, value) == SMALL.replace(one_line + ",\n", "").replace(
        '["question"]}]\n        }\n', f'["question"]}}]\n        }},\n{one_line}\n'
    )


def test_transitions_dragged_into_a_new_order_move_their_text_with_their_new_priorities() -> None:
    text = INSURANCE.read_text(encoding="utf-8")
    value = json.loads(text)
    transitions = value["states"]["confirm"]["transitions"]
    transitions.reverse()
    transitions[0]["priority"], transitions[1]["priority"] = 10, 20
    submitted = """        {
          "target_state": "submitted",
          "description": "The caller confirmed the claim",
          "priority": P,
          "conditions": [{"description": "confirmed", "logic": {"==": [{"var": "confirmed"}, true]}}]
        }"""
    incident = """        {
          "target_state": "incident",
          "description": "The caller wants to change a detail",
          "priority": P,
          "conditions": [{"description": "not confirmed", "logic": {"==": [{"var": "confirmed"}, false]}}]
        }"""
    before = submitted.replace("P", "10") + ",\n" + incident.replace("P", "20") + "\n"
    after = incident.replace("P", "10") + ",\n" + submitted.replace("P", "20") + "\n"
    assert before in text
    assert edited(text, value) == text.replace(before, after)


def test_a_key_added_to_a_one_line_object_stays_on_that_line() -> None:
    value = json.loads(SMALL)
    value["context_schema"]["email"]["format"] = "email"
    value["context_schema"]["email"]["examples"] = {"a": ["x@y.z"], "b": {"c": 1}}
    assert edited(SMALL, value) == SMALL.replace(
        '"email": {"type": "string"}',
        '"email": {"type": "string", "format": "email", "examples": {"a": ["x@y.z"], "b": {"c": 1}}}',
    )
    assert edited('{"a":1}', {"a": 1, "b": 2}) == '{"a":1,"b":2}'
    assert edited("[ 1 ]", [1, 2]) == "[ 1, 2 ]"
    assert edited('{"a": [1, 2]}', {"a": [1, 2, {"b": [3]}]}) == '{"a": [1, 2, {"b": [3]}]}'


def test_a_new_member_among_one_line_objects_is_one_line() -> None:
    value = json.loads(SMALL)
    value["context_schema"]["zip"] = {"type": "string", "pattern": "^[0-9]{5}$"}
    value["states"]["greet"]["transitions"].append({"target_state": "x", "priority": 30})
    assert edited(SMALL, value) == SMALL.replace(
        '"minimum": 0}\n', '"minimum": 0},\n    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}\n'
    ).replace(  # transitions written one way and the other: the new one as objects are, one member a line
        '["question"]}]\n        }\n',
        '["question"]}]\n        },\n        {\n          "target_state": "x",\n          "priority": 30\n        }\n',
    )


def test_inserting_an_element_leaves_its_neighbours_as_written() -> None:
    text = '[\n  {"id": 1,   "x": [1,2]},\n  {"id": 2,   "x": [3,4]}\n]\n'
    value = json.loads(text)
    value.insert(1, {"id": 9, "x": []})
    value[0]["id"] = 0
    out = edited(text, value)
    assert out == '[\n  {"id": 0,   "x": [1,2]},\n  {"id": 9, "x": []},\n  {"id": 2,   "x": [3,4]}\n]\n'
    assert edited(text, [value[2]]) == '[\n  {"id": 2,   "x": [3,4]}\n]\n'
    assert edited(text, [value[2], value[0]]) == '[\n  {"id": 2,   "x": [3,4]},\n  {"id": 0,   "x": [1,2]}\n]\n'


def test_a_priority_changed_in_a_list_of_transitions_rewrites_that_number() -> None:
    value = json.loads(SMALL)
    value["states"]["greet"]["transitions"][1]["priority"] = 15
    assert edited(SMALL, value) == SMALL.replace('"priority": 20', '"priority": 15')


def test_equal_is_strict_on_types_and_keeps_the_spelling_of_equal_numbers_and_strings() -> None:
    text = '{"a": 1, "b": true, "c": 1.0, "d": 1e3, "e": "caf\\u00e9", "f": [0, false]}'
    assert edited(text, {"a": True, "b": 1, "c": 1, "d": 1000, "e": "café", "f": [False, 0]}) == (
        '{"a": true, "b": 1, "c": 1.0, "d": 1e3, "e": "caf\\u00e9", "f": [false, 0]}'
    )
    assert edited(text, {"a": 1.0, "b": True, "c": 2.0, "d": 1000.0, "e": "cafe", "f": [0, False]}) == (
        '{"a": 1, "b": true, "c": 2.0, "d": 1e3, "e": "cafe", "f": [0, false]}'
    )


def test_new_text_escapes_non_ascii_only_in_a_file_that_does() -> None:
    assert edited('{"a": "caf\\u00e9"}', {"a": "caf\u00e9", "b": "né"}) == '{"a": "caf\\u00e9", "b": "n\\u00e9"}'
    assert edited('{"a": "café"}', {"a": "café", "b": "né"}) == '{"a": "café", "b": "né"}'
    assert edited('{"a": "x"}', {"a": "x", "é": "né"}) == '{"a": "x", "é": "né"}'


def test_a_crlf_file_keeps_crlf_everywhere() -> None:
    text = SMALL.replace("\n", "\r\n")
    value = json.loads(text)
    value["states"]["new"] = {"purpose": "N", "transitions": [{"target_state": "done"}]}
    del value["states"]["greet"]["transitions"][0]
    value["name"] = "shop2"
    out = edited(text, value)
    assert "\n" not in out.replace("\r\n", "")
    assert out.count("\r\n") == text.count("\r\n") - 1 + 8
    assert '    "new": {\r\n      "purpose": "N",\r\n      "transitions": [\r\n        {\r\n' in out


def test_a_tab_indented_file_keeps_its_tabs() -> None:
    text = '{\n\t"states": {\n\t\t"a": {\n\t\t\t"purpose": "A"\n\t\t}\n\t}\n}\n'
    value = json.loads(text)
    value["states"]["b"] = {"purpose": "B", "transitions": [{"target_state": "a"}]}
    value["version"] = "2"
    assert edited(text, value) == (
        '{\n\t"states": {\n\t\t"a": {\n\t\t\t"purpose": "A"\n\t\t},\n\t\t"b": {\n\t\t\t"purpose": "B",\n'
        '\t\t\t"transitions": [\n\t\t\t\t{\n\t\t\t\t\t"target_state": "a"\n\t\t\t\t}\n\t\t\t]\n\t\t}\n\t},\n'
        '\t"version": "2"\n}\n'
    )


def test_the_indent_of_a_four_space_file_is_used_for_what_is_new() -> None:
    text = '{\n    "a": {\n        "b": 1\n    }\n}'
    assert edited(text, {"a": {"b": 1, "c": {"d": [{"e": 1}]}}}) == (
        '{\n    "a": {\n        "b": 1,\n        "c": {\n            "d": [\n                {\n'
        '                    "e": 1\n                }\n            ]\n        }\n    }\n}'
    )


def test_an_empty_container_filled_is_written_as_new() -> None:
    text = '{\n  "s": {\n    "transitions": [],\n    "x": {"a": []}\n  }\n}\n'
    value = {"s": {"transitions": [{"target_state": "t", "priority": 1}], "x": {"a": [{"b": 1}]}}}
    assert edited(text, value) == (
        '{\n  "s": {\n    "transitions": [\n      {\n        "target_state": "t",\n        "priority": 1\n'
        '      }\n    ],\n    "x": {"a": [{"b": 1}]}\n  }\n}\n'
    )
    assert edited(text, {"s": {}}) == '{\n  "s": {}\n}\n'
    assert edited(text, {}) == "{}\n"


# -- new arrays of scalars: the file's own way ------------------------------------------------------


@pytest.fixture
def new_file(tmp_path: Path) -> str:
    """The definition ``llm-fsm new helpdesk`` writes (json.dumps with an indent: every array one element a line)."""
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    result = CliRunner().invoke(app, ["new", "helpdesk", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return (tmp_path / "helpdesk.json").read_text(encoding="utf-8")


def test_new_arrays_in_a_file_llm_fsm_new_made_are_one_element_a_line(new_file: str) -> None:
    value = json.loads(new_file)
    value["states"]["helping"]["transitions"][0]["conditions"][0]["requires_context_keys"] = ["x"]
    states = value.pop("states")
    value["global_transitions"] = [{"target_state": "goodbye", "description": "Stop", "except_states": ["a", "b"]}]
    value["states"] = states
    out = edited(new_file, value)
    assert changed_lines(new_file, out) == (
        ["              }"],
        [
            '  "global_transitions": [',
            "    {",
            '      "target_state": "goodbye",',
            '      "description": "Stop",',
            '      "except_states": [',
            '        "a",',
            '        "b"',
            "      ]",
            "    }",
            "  ],",
            "              },",
            '              "requires_context_keys": [',
            '                "x"',
            "              ]",
        ],
    )
    assert out == json.dumps(value, indent=2, ensure_ascii=False) + "\n"  # as if `new` had written it so


def test_new_arrays_in_an_example_written_inline_are_inline() -> None:
    text = INSURANCE.read_text(encoding="utf-8")
    value = json.loads(text)
    handover, _, help_ = value["global_transitions"]
    handover["except_states"] = ["a", "b"]
    help_["conditions"] = [{"description": "asks", "requires_context_keys": ["x"]}]
    out = edited(text, value)
    assert out == text.replace(
        '      "priority": 5\n',
        '      "priority": 5,\n      "except_states": ["a", "b"]\n',
    ).replace(
        '      "priority": 50\n',
        '      "priority": 50,\n      "conditions": [\n        {\n          "description": "asks",\n'
        '          "requires_context_keys": ["x"]\n        }\n      ]\n',
    )


def test_an_array_rewritten_in_place_keeps_its_own_way(new_file: str) -> None:
    value = json.loads(new_file)
    value["states"]["welcome"]["required_context_keys"].append("age")
    assert changed_lines(new_file, edited(new_file, value)) == (
        ['        "user_name"'],
        ['        "user_name",', '        "age"'],
    )
    # the other way round: one inline array among arrays one element a line stays inline, and one on lines
    # among inline ones stays on lines
    text = '{\n  "a": [\n    1\n  ],\n  "b": [\n    2\n  ],\n  "c": [3]\n}\n'
    assert edited(text, {"a": [1], "b": [2], "c": [3, 4]}) == text.replace("[3]", "[3, 4]")
    text = '{\n  "a": [1],\n  "b": [2],\n  "c": [\n    3\n  ]\n}\n'
    assert edited(text, {"a": [1], "b": [2], "c": [3, 4]}) == text.replace("    3\n", "    3,\n    4\n")


@pytest.mark.parametrize(
    ("text", "on_lines"),
    [
        ('{\n  "a": [\n    1\n  ],\n  "b": [\n    2\n  ],\n  "c": [3]\n}\n', True),  # two to one
        ('{\n  "a": [\n    1\n  ],\n  "c": [3]\n}\n', False),  # a tie: inline
        ('{\n  "a": 1,\n  "b": [],\n  "c": [{"d": 1}]\n}\n', False),  # no non-empty array of scalars
        ('{\n  "a": [\n    {"b": 1},\n    2\n  ]\n}\n', False),  # an array that is not all scalars does not count
        ('{\n  "a": [\n    1, 2,\n    3\n  ],\n  "b": [\n    4\n  ],\n  "c": [5]\n}\n', False),  # wrapped: no vote
        ('{\n  "a": [\n    [\n      1\n    ]\n  ]\n}\n', True),  # found at any depth
    ],
)
def test_the_way_of_new_arrays_is_the_way_of_most_of_the_files_arrays(text: str, on_lines: bool) -> None:
    value = json.loads(text)
    value["new"] = ["x", "y"]
    out = edited(text, value)
    written = '"new": [\n    "x",\n    "y"\n  ]' if on_lines else '"new": ["x", "y"]'
    assert out.endswith(",\n  " + written + "\n}\n"), out


def test_a_long_array_pairs_its_elements_too() -> None:
    value = [{"id": number, "tags": [number, number + 1]} for number in range(120)]
    text = json.dumps(value, indent=2) + "\n"  # 120 × 120 pairs: past what is weighed pair by pair
    value = copy.deepcopy(value)
    value.insert(7, {"id": -1})
    del value[50]
    value[100]["id"] = "changed"
    removed, added = changed_lines(text, edited(text, value))
    assert len(removed) == 7 + 1 and len(added) == 3 + 1  # an element of 7 lines gone, one of 3 new, an id


def test_bom_and_missing_final_newline_stay() -> None:
    text = '\ufeff{\n  "a": 1\n}'
    assert edited(text, {"a": 2, "b": [1]}) == '\ufeff{\n  "a": 2,\n  "b": [1]\n}'


def test_a_value_that_changes_kind_is_written_fresh_at_its_depth() -> None:
    text = '{\n  "a": {\n    "b": "x",\n    "c": []\n  }\n}\n'
    assert edited(text, {"a": {"b": {"k": [1]}, "c": [{"t": 1}]}}) == (
        '{\n  "a": {\n    "b": {\n      "k": [1]\n    },\n    "c": [\n      {\n        "t": 1\n      }\n    ]\n  }\n}\n'
    )
    assert edited(text, []) == "[]\n"


def test_a_repeated_key_keeps_its_last_value_when_the_object_changes() -> None:
    text = '{"a": 1, "b": 0, "a": 2}'
    assert edited(text, {"a": 2, "b": 1}) == '{"a": 2, "b": 1}'  # json.loads's order: "a" where it came first


# -- random edits on every example ----------------------------------------------------------------


def containers(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if isinstance(value, dict | list):
        yield path, value
        members = value.items() if isinstance(value, dict) else enumerate(value)
        for key, member in members:
            yield from containers(member, (*path, key))


def lines_of(value: Any) -> int:
    """At most how many lines ``value`` takes in a file (json.dumps with an indent spreads it the most)."""
    return len(json.dumps(value, indent=2).splitlines())


KINDS = ("scalar", "delete", "insert", "rename", "move")


def random_edit(value: Any, kind: str, rng: random.Random) -> tuple[int, int]:
    """An edit of that kind in ``value``, in place; at most how many lines it may remove and add (for a move:
    -1, it moves lines and rewrites none)."""
    places = [container for _, container in containers(value)]
    if kind == "scalar":
        choices = [(c, k) for c in places for k in _keys(c) if isinstance(c[k], bool | int | float | str)]
        container, key = rng.choice(choices)
        member = container[key]
        container[key] = (
            not member if isinstance(member, bool) else member + (1 if member != str(member) else " (edited)")
        )
        return 1, 1
    if kind == "delete":
        container, key = rng.choice([(c, k) for c in places for k in _keys(c)])
        member = container.pop(key)
        return lines_of(member) + 2, 1  # + 2: the last member goes with its container's line breaks ("{}")
    if kind == "insert":
        container = rng.choice(places)
        if isinstance(container, dict):
            member = rng.choice([1, "text", True, None, ["a", "b"]])
            container[f"added_{rng.randrange(10**6)}"] = member
            return 1, lines_of(member) + 2  # a new array is one element a line in a file written so
        element = copy.deepcopy(rng.choice(container)) if container else 1
        container.insert(rng.randrange(len(container) + 1), element)
        return 1, lines_of(element) + 2
    if kind == "rename":
        container, key = rng.choice([(c, k) for c in places if isinstance(c, dict) for k in c])
        items = [(f"renamed_{k}" if k == key else k, v) for k, v in container.items()]
        container.clear()
        container.update(items)
        return 1, 1
    container = rng.choice([c for c in places if isinstance(c, list) and len(c) > 1])
    element = container.pop(rng.randrange(len(container)))
    container.insert(rng.randrange(len(container) + 1), element)
    return -1, -1


def _keys(container: dict[str, Any] | list[Any]) -> list[Any]:
    return list(container) if isinstance(container, dict) else list(range(len(container)))


def assert_few_lines_changed(before: str, after: str, kind: str, may_remove: int, may_add: int) -> None:
    removed, added = changed_lines(before, after)
    if kind == "move":  # the same lines in another order (a comma moves), or the one line of a one-line array
        same_lines = sorted(line.rstrip(",") for line in removed) == sorted(line.rstrip(",") for line in added)
        assert same_lines or len(removed) == len(added) == 1, (removed, added)
    else:
        assert len(removed) + len(added) > 0
        assert len(removed) <= may_remove and len(added) <= may_add, (kind, removed, added)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_random_edits_change_the_value_and_few_lines(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    rng = random.Random(path.name)
    for trial in range(60):
        value = json.loads(text)
        kind = KINDS[trial % len(KINDS)]
        may_remove, may_add = random_edit(value, kind, rng)
        assert_few_lines_changed(text, edited(text, value), kind, may_remove, may_add)


def test_random_edits_in_a_row_stay_small_and_right() -> None:
    text = INSURANCE.read_text(encoding="utf-8")
    rng = random.Random(49)
    value = json.loads(text)
    for _ in range(150):
        kind = rng.choice(KINDS)
        may_remove, may_add = random_edit(value, kind, rng)
        before, text = text, edited(text, value)
        assert_few_lines_changed(before, text, kind, may_remove, may_add)
