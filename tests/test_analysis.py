"""Static analysis: each warning code, with a definition that triggers it and one that does not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_fsm.authoring.analysis import Diagnostic, analyze
from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.definition import Transition
from tests.conftest import EXAMPLES, ROOT


def fsm(states: dict[str, Any], initial: str = "start", **extra: Any) -> dict[str, Any]:
    return {"name": "t", "initial_state": initial, "states": states, **extra}


def to(target: str, *conditions: dict[str, Any], priority: int = 100) -> dict[str, Any]:
    return {"target_state": target, "priority": priority, "conditions": list(conditions)}


def rule(logic: Any = None, *keys: str) -> dict[str, Any]:
    condition: dict[str, Any] = {"requires_context_keys": list(keys)}
    if logic is not None:
        condition["logic"] = logic
    return condition


DONE: dict[str, Any] = {"purpose": "Say goodbye"}
CLEAN = fsm({"start": {"transitions": [to("done")]}, "done": DONE})


def codes(source: Any, **kwargs: Any) -> list[str]:
    return [d.code for d in analyze(source, **kwargs)]


def only(source: Any, code: str) -> list[Diagnostic]:
    return [d for d in analyze(source) if d.code == code]


def test_a_clean_definition_has_no_diagnostics():
    assert analyze(CLEAN) == []


# ---------------------------------------------------------------- graph shape


def test_unreachable_state():
    found = only(fsm({"start": {"transitions": [to("done")]}, "done": DONE, "island": DONE}), "unreachable_state")
    assert [d.path for d in found] == ["states.island"]
    assert found[0].severity == "warning" and "'island'" in found[0].message and found[0].hint
    assert only(CLEAN, "unreachable_state") == []


def test_no_path_to_terminal():
    states = {
        "start": {"transitions": [to("done"), to("loop_a")]},
        "loop_a": {"transitions": [to("loop_b")]},
        "loop_b": {"transitions": [to("loop_a")]},
        "done": DONE,
    }
    assert [d.path for d in only(fsm(states), "no_path_to_terminal")] == ["states.loop_a", "states.loop_b"]
    states["loop_b"] = {"transitions": [to("loop_a"), to("done")]}
    assert only(fsm(states), "no_path_to_terminal") == []


def test_self_loop_no_exit_is_reported_once():
    states = {
        "start": {"transitions": [to("done"), to("stuck")]},
        "stuck": {"transitions": [to("stuck")]},
        "done": DONE,
    }
    assert codes(fsm(states)) == ["self_loop_no_exit"]
    assert analyze(fsm(states))[0].path == "states.stuck.transitions"
    states["stuck"] = {"transitions": [to("stuck"), to("done")]}
    assert codes(fsm(states)) == []


# ---------------------------------------------------------------- context keys


def email_flow(**start: Any) -> dict[str, Any]:
    gate = to("done", rule({"in": ["@", {"var": "email"}]}))
    return fsm(
        {
            "start": {**start, "transitions": [to("ask", rule(None, "name"))]},
            "ask": {"transitions": [gate]},
            "done": DONE,
        }
    )


def test_key_never_set():
    found = only(email_flow(required_context_keys=["name"]), "key_never_set")
    assert [(d.path, d.severity) for d in found] == [("states.ask.transitions[0].conditions[0].logic", "warning")]
    assert "'email'" in found[0].message and "handler_only_keys" in found[0].hint


@pytest.mark.parametrize(
    "definition",
    [
        email_flow(required_context_keys=["name", "email"]),  # collected earlier on the path
        email_flow(required_context_keys=["name"], extraction_instructions="email: as typed."),  # named there
        {**email_flow(required_context_keys=["name"]), "handler_only_keys": ["email"]},  # set by code
    ],
    ids=["required-earlier", "extraction-instructions", "handler-only"],
)
def test_key_never_set_not_reported(definition):
    assert only(definition, "key_never_set") == []


def test_key_never_set_ignores_states_that_are_not_on_a_path_to_the_transition():
    states = {
        "start": {"transitions": [to("done", rule(None, "code"))]},
        "done": DONE,
        "later": {"required_context_keys": ["code"], "transitions": [to("done")]},  # unreachable
    }
    assert codes(fsm(states)) == ["unreachable_state", "key_never_set"]


def test_key_never_set_matches_dotted_paths_and_trusts_underscore_keys():
    condition = rule({"and": [{"has_context": "user.email"}, {"var": "_turns"}]})
    states = {"start": {"required_context_keys": ["user"], "transitions": [to("done", condition)]}, "done": DONE}
    assert codes(fsm(states)) == []


def test_key_unused():
    states = {"start": {"required_context_keys": ["name", "nickname"], "transitions": [to("done", rule(None, "name"))]}}
    found = only(fsm({**states, "done": DONE}), "key_unused")
    assert [d.path for d in found] == ["states.start.required_context_keys[1]"]
    assert "'nickname'" in found[0].message


@pytest.mark.parametrize(
    "done",
    [DONE | {"instructions": "Say goodbye, using the nickname."}, DONE | {"response_instructions": "Use nickname."}],
)
def test_key_unused_not_reported_when_an_instruction_refers_to_it(done):
    states = {"start": {"required_context_keys": ["nickname"], "transitions": [to("done")]}, "done": done}
    assert codes(fsm(states)) == []


def test_key_unused_not_reported_when_a_dotted_rule_reads_it():
    condition = rule({"==": [{"var": "user.age"}, 3]})
    states = {"start": {"required_context_keys": ["user"], "transitions": [to("done", condition)]}, "done": DONE}
    assert codes(fsm(states)) == []


# ---------------------------------------------------------------- priorities


def two_ways(a: dict[str, Any] | None, b: dict[str, Any] | None, pa: int = 10, pb: int = 10, target: str = "other"):
    transitions = [to("done", *([a] if a else []), priority=pa), to(target, *([b] if b else []), priority=pb)]
    states = {"start": {"required_context_keys": ["age"], "transitions": transitions}, "done": DONE, "other": DONE}
    return fsm(states)


ADULT = rule({">=": [{"var": "age"}, 18]}, "age")


def test_ambiguous_priority_gives_an_example_context():
    (found,) = only(two_ways(ADULT, rule({">": [{"var": "age"}, 10]})), "ambiguous_priority")
    assert found.path == "states.start.transitions[1].priority"
    assert "transitions[0] (to 'done')" in found.message and "priority 10" in found.message
    example = json.loads(found.message.split("e.g. with context ", 1)[1])
    assert example["age"] >= 18


@pytest.mark.parametrize(
    ("a", "b", "pa", "pb", "target"),
    [
        (ADULT, rule({"<": [{"var": "age"}, 18]}), 10, 10, "other"),  # exclusive
        (ADULT, rule({">": [{"var": "age"}, 10]}), 10, 20, "other"),  # ranked
        (None, None, 10, 10, "other"),  # both unconditioned: the model chooses from the descriptions
        (ADULT, rule({">": [{"var": "age"}, 10]}), 10, 10, "done"),  # same target
    ],
    ids=["exclusive", "different-priorities", "no-conditions", "same-target"],
)
def test_ambiguous_priority_not_reported(a, b, pa, pb, target):
    assert only(two_ways(a, b, pa, pb, target), "ambiguous_priority") == []


def test_an_unconditioned_transition_can_always_hold():
    assert len(only(two_ways(ADULT, None), "ambiguous_priority")) == 1


def test_find_witness_combines_substrings_and_respects_requirements():
    email = Transition.model_validate(
        {"target_state": "a", "conditions": [rule({"and": [{"in": ["@", {"var": "e"}]}, {"in": [".", {"var": "e"}]}]})]}
    )
    needs = Transition.model_validate({"target_state": "b", "conditions": [rule(None, "e", "n")]})
    witness = find_witness([email, needs])
    assert witness is not None and "@" in witness["e"] and "." in witness["e"] and witness["n"]
    never = Transition.model_validate({"target_state": "c", "conditions": [rule({"missing": ["e"]})]})
    assert find_witness([needs, never]) is None


def test_find_witness_searches_large_spaces():
    keys = [f"k{i}" for i in range(8)]
    both = {"and": [{"==": [{"var": k}, i]} for i, k in enumerate(keys)]}
    transition = Transition.model_validate({"target_state": "a", "conditions": [rule(both)]})
    assert find_witness([transition]) == {k: i for i, k in enumerate(keys)}


# ---------------------------------------------------------------- loader problems and positions


def test_loader_errors_become_error_diagnostics_with_positions(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(
        '{\n  "name": "t",\n  "initial_state": "start",\n  "states": {"start": {"transitions": '
        '[{"target_state": "done"}, {"target_state": "dne"}]}, "done": {}}\n}\n'
    )
    (found,) = analyze(path)
    assert (found.severity, found.code, found.file, found.line) == ("error", "unknown_state", str(path), 4)
    assert found.path == "states.start.transitions[1].target_state" and found.hint == "did you mean 'done'?"
    assert str(found).startswith(f"{path}:4:")


def test_warnings_point_into_list_form_states(tmp_path):
    definition = {
        "name": "t",
        "initial_state": "a",
        "states": [{"id": "a", "transitions": [{"target_state": "b"}]}, {"id": "b"}, {"id": "island"}],
    }
    path = tmp_path / "list.json"
    path.write_text(json.dumps(definition, indent=2))
    (found,) = analyze(path)
    assert found.code == "unreachable_state" and found.path == "states.island"
    lines = path.read_text().splitlines()
    assert lines[found.line - 1].strip() == "{" and '"id": "island"' in lines[found.line]  # the list item


def test_ignored_and_unknown_fields_are_passed_through():
    definition = {**CLEAN, "function_handlers": [{"name": "audit"}], "colour": "blue"}
    assert codes(definition) == ["ignored_field", "unknown_field"]
    strict = analyze(definition, strict=True)
    assert [(d.severity, d.code) for d in strict] == [("error", "unknown_field"), ("warning", "ignored_field")]


def test_strict_still_runs_the_design_checks():
    definition = {**fsm({"start": {"transitions": [to("done")]}, "done": DONE, "island": DONE}), "colour": "x"}
    assert [(d.severity, d.code) for d in analyze(definition, strict=True)] == [
        ("error", "unknown_field"),
        ("warning", "unreachable_state"),
    ]


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"{", "json"), (b"\xff\xfe{}", "encoding"), (b"[" * 100_000, "json"), (b'{"n": ' + b"1" * 5000 + b"}", "json")],
    ids=["truncated", "utf16", "deep", "huge-int"],
)
def test_unreadable_files_are_errors_not_exceptions(tmp_path, content, code):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    assert [(d.severity, d.code) for d in analyze(path)] == [("error", code)]


def test_missing_files_and_directories_are_errors(tmp_path):
    assert codes(tmp_path / "missing.json") == ["unreadable"]
    assert codes(tmp_path) == ["unreadable"]


# ---------------------------------------------------------------- the examples

# Warnings the examples legitimately trigger (the design choices they point at are deliberate or worth a look).
EXPECTED: dict[str, list[tuple[str, str]]] = {}  # example name -> the warnings it is known to have


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_have_no_errors_and_only_the_expected_warnings(path):
    found = analyze(path)
    assert all(d.severity == "warning" and d.line is not None for d in found)
    assert [(d.code, d.path) for d in found] == EXPECTED.get(path.name, [])


def test_llm_fsm_format_files_only_warn():
    for path in sorted((ROOT / "tests" / "data" / "llmfsm").glob("*.json")):
        found = analyze(path)
        assert found and all(d.severity == "warning" for d in found)
        assert "ignored_field" in {d.code for d in found}
