"""Static analysis: each warning code, with a definition that triggers it and one that does not."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from typing import Any

import pytest

import llm_fsm
from llm_fsm.authoring.analysis import Diagnostic, analyze
from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.definition.models import Transition
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


def test_key_never_set_counts_a_state_that_collects_without_needing_anything():
    states = {
        "start": {"required_context_keys": ["email"], "transitions": [to("ask")]},
        "ask": {"transitions": [to("done", rule(None, "email"))]},
        "done": DONE,
    }
    assert codes(fsm(states)) == []


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
        (ADULT, rule({">": [{"var": "age"}, 10]}), 10, 20, "other"),  # the prompt ranks them
        (None, None, 10, 10, "other"),  # both unconditioned: the model chooses from the descriptions
        (ADULT, rule({">": [{"var": "age"}, 10]}), 10, 10, "done"),  # same target
    ],
    ids=["exclusive", "different-priorities", "no-conditions", "same-target"],
)
def test_ambiguous_priority_not_reported(a, b, pa, pb, target):
    assert only(two_ways(a, b, pa, pb, target), "ambiguous_priority") == []


def test_an_unconditioned_transition_can_always_hold():
    assert len(only(two_ways(ADULT, None), "ambiguous_priority")) == 1


def competing(schema: dict[str, Any], a: Any, b: Any) -> dict[str, Any]:
    """Two transitions of one priority whose rules are ``a`` and ``b``, with the ``context_schema``."""
    transitions = [to("done", rule(a), priority=1), to("other", rule(b), priority=1)]
    return fsm({"start": {"transitions": transitions}, "done": DONE, "other": DONE}, context_schema=schema)


LVL_ABOVE_5, LVL_BELOW_10 = {">": [{"var": "lvl"}, 5]}, {"<": [{"var": "lvl"}, 10]}
STRINGS = {"type": "array", "items": {"type": "string"}}


@pytest.mark.parametrize(
    ("schema", "a", "b"),
    [
        ({"lvl": {"enum": [1, 20]}}, LVL_ABOVE_5, LVL_BELOW_10),  # no value the enum allows is in 6..9
        ({"lvl": {"type": "integer", "minimum": 10}}, LVL_ABOVE_5, LVL_BELOW_10),
        ({"tags": STRINGS}, {"in": ["vip", {"var": "tags"}]}, {"==": [{"var": "tags"}, "vip, gold"]}),
    ],
    ids=["enum", "minimum", "array-is-not-a-string"],
)
def test_ambiguous_priority_holds_only_on_values_the_context_schema_allows(schema, a, b):
    assert len(only(competing({}, a, b), "ambiguous_priority")) == 1  # without the schema, they compete
    assert only(competing(schema, a, b), "ambiguous_priority") == []


@pytest.mark.parametrize(
    ("schema", "a", "b", "example"),
    [
        ({"lvl": {"enum": [1, 7, 20]}}, LVL_ABOVE_5, LVL_BELOW_10, {"lvl": 7}),
        ({"lvl": {"type": "integer", "minimum": 9}}, LVL_ABOVE_5, LVL_BELOW_10, {"lvl": 9}),
        (
            {"toppings": STRINGS},
            {"in": ["cheese", {"var": "toppings"}]},
            {"in": ["ham", {"var": "toppings"}]},
            {"toppings": ["cheese", "ham"]},
        ),
        ({"toppings": STRINGS}, {"contains": [{"var": "toppings"}, "cheese"]}, True, {"toppings": ["cheese"]}),
    ],
    ids=["enum", "minimum", "array-both", "array-contains"],
)
def test_ambiguous_priority_examples_are_values_the_context_schema_allows(schema, a, b, example):
    (found,) = only(competing(schema, a, b), "ambiguous_priority")
    assert json.loads(found.message.split("e.g. with context ", 1)[1]) == example


def test_the_ambiguous_priority_hint_says_what_the_runtime_does():
    (found,) = only(two_ways(ADULT, rule({">": [{"var": "age"}, 10]})), "ambiguous_priority")
    assert "so the model may take either" in found.message
    assert found.hint.startswith(
        "priority does not choose between them: the model names a target_state, and the move is accepted when any "
        "transition to that target has conditions that hold; priority only orders the transitions in the prompt"
    )


def test_the_runtime_takes_the_move_the_model_names_whatever_the_priorities():
    """What the hint says, checked on the engine: both moves hold, so each is accepted, the less
    preferred one (priority 20) included; and a target is accepted when any of its transitions holds."""
    from llm_fsm.contract import parse_reply
    from llm_fsm.turn.engine import decide, initial_snapshot

    transitions = [
        to("done", ADULT, priority=10),
        to("other", rule({">": [{"var": "age"}, 10]}), priority=20),
        to("other", rule({"==": [{"var": "age"}, 99]}), priority=5),
    ]
    states = {"start": {"required_context_keys": ["age"], "transitions": transitions}, "done": DONE, "other": DONE}
    definition = llm_fsm.load(fsm(states))
    snapshot = initial_snapshot(definition, context={"age": 30})
    for target in ("done", "other"):
        reply = parse_reply(json.dumps({"transition": {"target_state": target, "context_update": {}}, "message": "m"}))
        decision = decide(definition, snapshot, reply)
        assert decision.accepted and decision.state == target


def test_ambiguity_is_found_among_many_transitions_without_trying_every_pair():
    """A router (choice == i) with one range (choice >= 40) at the same priority: the range overlaps
    ten routes, the routes never overlap each other, and every transition with a partner is named."""
    transitions = [to(f"item_{i}", rule({"==": [{"var": "choice"}, i]}), priority=10) for i in range(50)]
    transitions.append(to("many", rule({">=": [{"var": "choice"}, 40]}), priority=10))
    transitions.append(to("help", priority=10))  # description only: overlaps every conditioned one
    states = {"start": {"required_context_keys": ["choice"], "transitions": transitions}, "many": DONE, "help": DONE}
    states |= {f"item_{i}": DONE for i in range(50)}
    found = only(fsm(states), "ambiguous_priority")
    named = {int(index) for d in found for index in re.findall(r"transitions\[(\d+)\]", d.message)}
    assert named == set(range(52))  # each route holds with 'help' (or 'many'); 'many' and 'help' too
    assert len(found) <= 52
    for d in found:
        first, second = re.findall(r"transitions\[(\d+)\] \(to '(\w+)'\)", d.message)
        assert d.path == f"states.start.transitions[{second[0]}].priority" and int(first[0]) < int(second[0])
        witness = json.loads(d.message.split("e.g. with context ", 1)[1])
        assert _holds(transitions[int(first[0])], witness) and _holds(transitions[int(second[0])], witness)
    routes_only = fsm({**states, "start": {**states["start"], "transitions": transitions[:50]}})
    assert only(routes_only, "ambiguous_priority") == []


def test_the_sweep_names_every_transition_that_a_pair_by_pair_search_names():
    rng = random.Random(5)
    keys = ["a", "b", "c"]

    def conjunct() -> dict[str, Any]:  # pins (== n) often, so that groups pinned to one value form
        key, n = rng.choice(keys), rng.randint(0, 3)
        return rng.choice(
            [
                *[{"==": [{"var": key}, n]}] * 3,
                {">": [{"var": key}, n]},
                {"<=": [{"var": key}, n]},
                {"<": [n, {"var": key}, n + rng.randint(1, 3)]},
                {"in": [{"var": key}, rng.sample(["x", "y", "z"], 2)]},
                {"==": [{"var": key}, rng.choice(["x", "y"])]},
                {"!=": [{"var": key}, n]},
            ]
        )

    for _ in range(150):
        transitions = [
            to(
                f"t{rng.randint(0, 4)}",
                *[rule({"and": [conjunct() for _ in range(rng.randint(1, 2))]})] * rng.randint(0, 1),
            )
            for _ in range(rng.randint(2, 9))
        ]
        states = {"start": {"required_context_keys": keys, "transitions": transitions}} | {
            f"t{i}": DONE for i in range(5)
        }
        named = {
            int(i) for d in only(fsm(states), "ambiguous_priority") for i in re.findall(r"\[(\d+)\] \(to", d.message)
        }
        models = [Transition.model_validate(t) for t in transitions]
        pairs = [
            (i, j)
            for j in range(len(models))
            for i in range(j)
            if models[i].target_state != models[j].target_state
            and (models[i].conditions or models[j].conditions)
            and find_witness([models[i], models[j]]) is not None
        ]
        assert named == {i for pair in pairs for i in pair}, transitions


def _holds(transition: dict[str, Any], context: dict[str, Any]) -> bool:
    from llm_fsm.definition.conditions import unmet_condition

    return unmet_condition(Transition.model_validate(transition), context) is None


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


# ---------------------------------------------------------------- what can never happen


def at_line(path, diagnostic: Diagnostic) -> str:
    """The text of the file from the diagnostic's line:column on (to check where it points)."""
    line = path.read_text().splitlines()[diagnostic.line - 1]
    return line[diagnostic.column - 1 :]


def written(tmp_path, definition: dict[str, Any]):
    path = tmp_path / "fsm.json"
    path.write_text(json.dumps(definition, indent=2))
    return path


GUESTS_ABOVE_6 = {">": [{"var": "guests"}, 6]}
GUESTS_BELOW_1 = {"<": [{"var": "guests"}, 1]}


def booking(*conditions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """start -(conditions)-> booked; start -> done (so start can always be left)."""
    states = {
        "start": {"required_context_keys": ["guests"], "transitions": [to("booked", *conditions), to("done")]},
        "booked": {"transitions": [to("done")]},
        "done": DONE,
    }
    return fsm(states, **extra)


def test_contradictory_bounds_in_one_rule(tmp_path):
    path = written(tmp_path, booking(rule({"and": [GUESTS_ABOVE_6, GUESTS_BELOW_1]})))
    (found,) = only(path, "condition_never_holds")
    assert found.path == "states.start.transitions[0].conditions[0].logic.and[1]"
    assert found.message.startswith("'guests > 6' and 'guests < 1' cannot both hold")
    assert "the transition from 'start' to 'booked' can never be taken" in found.message and found.hint
    assert at_line(path, found) == "{"  # the conjunct that contradicts the first: {"<": ...}
    assert path.read_text().splitlines()[found.line].strip() == '"<": ['


def test_contradictory_bounds_across_conditions(tmp_path):
    path = written(tmp_path, booking(rule(GUESTS_ABOVE_6), rule({"<=": [0, {"var": "guests"}, 1]})))
    (found,) = only(path, "condition_never_holds")
    assert found.path == "states.start.transitions[0].conditions[1].logic"
    assert "'guests > 6' and '0 <= guests <= 1' cannot both hold (conditions[0] and conditions[1])" in found.message
    assert at_line(path, found).startswith('"logic"')


@pytest.mark.parametrize(
    ("logic", "words"),
    [
        ({"==": [1, 2]}, "'1 == 2' is always false"),
        (False, "'false' is always false"),
        ({"<": [6, {"var": "guests"}, 1]}, "'6 < guests < 1' never holds"),
        ({"and": [{"==": [{"var": "guests"}, 2]}, {"===": [{"var": "guests"}, 3]}]}, "cannot both hold"),
        ({"and": [{"==": [{"var": "size"}, "big"]}, {"in": [{"var": "size"}, ["small", "medium"]]}]}, "cannot both"),
        ({"and": [{"==": [{"var": "size"}, "big"]}, {">": [{"var": "size"}, 2]}]}, "cannot both hold"),
        ({"in": [{"var": "size"}, []]}, "never holds"),
        ({"and": [{">": [{"var": "n"}, 6]}, {">=": [{"var": "n"}, 6]}, {"<=": [{"var": "n"}, 6]}]}, "cannot both"),
        ({"and": [{"in": [{"var": "n"}, [1, 3]]}, {">": [{"var": "n"}, 3]}]}, "cannot both hold"),
    ],
    ids=[
        "constant",
        "false",
        "between",
        "two-points",
        "string-sets",
        "string-and-number",
        "empty-list",
        "open-bound-wins",
        "number-list",
    ],  # fmt: skip
)
def test_conditions_that_never_hold(logic, words):
    (found,) = only(booking(rule(logic)), "condition_never_holds")
    assert words in found.message and found.path.startswith("states.start.transitions[0].conditions[0].logic")


def test_a_value_outside_the_schema_enum(tmp_path):
    schema = {"login": {"enum": ["password", "otp"]}}
    condition = rule({"==": [{"var": "login"}, "pasword"]})
    path = written(tmp_path, booking(condition, context_schema=schema))
    (found,) = only(path, "condition_never_holds")
    assert "no value context_schema allows for 'login' ('password', 'otp') makes 'login == 'pasword'' hold" in (
        found.message
    )
    assert found.hint == "did you mean 'password'?" and found.line is not None


def test_schema_enum_values_combine_across_conditions():
    schema = {"login": {"enum": ["password", "otp"]}}
    conditions = [rule({"!=": [{"var": "login"}, "password"]}, "login"), rule({"!=": [{"var": "login"}, "otp"]})]
    (found,) = only(booking(*conditions, context_schema=schema), "condition_never_holds")
    assert "together with the other conditions on it" in found.message


def test_a_number_compared_with_a_string_key():
    schema = {"guests": {"type": "string"}}
    (mismatch,) = only(booking(rule(GUESTS_ABOVE_6), context_schema=schema), "type_mismatch")
    assert mismatch.path == "states.start.transitions[0].conditions[0].logic"
    assert "'guests' is a string in context_schema, but 'guests > 6' compares it with the number 6" in mismatch.message
    assert "holds only for strings that spell one" in mismatch.message and mismatch.hint
    assert only(booking(rule(GUESTS_ABOVE_6), context_schema=schema), "condition_never_holds") == []
    strict = booking(rule({"===": [{"var": "guests"}, 6]}), context_schema=schema)
    (never,) = only(strict, "condition_never_holds")
    assert "'guests' is a string in context_schema, so 'guests === 6' never holds" in never.message


def test_a_number_key_compared_with_text_never_holds():
    schema = {"age": {"type": "integer"}}
    (found,) = only(booking(rule({">=": [{"var": "age"}, "adult"]}), context_schema=schema), "condition_never_holds")
    assert "'age' is an integer in context_schema" in found.message


@pytest.mark.parametrize(
    ("logic", "schema"),
    [
        ({"and": [{">": [{"var": "guests"}, 1]}, {"<": [{"var": "guests"}, 6]}]}, {}),
        ({"and": [{">=": [{"var": "guests"}, 6]}, {"<=": [{"var": "guests"}, 6]}]}, {}),  # exactly 6
        ({"and": [{">": [{"var": "guests"}, 6]}, {"<": [{"var": "guests"}, 7]}]}, {}),  # 6.5
        ({"and": [{"==": [{"var": "guests"}, 2]}, {">": [{"var": "guests"}, 1]}]}, {}),
        ({"and": [{">": [{"var": "guests"}, 6]}, {"<": [{"var": "other"}, 1]}]}, {}),  # two keys
        ({"and": [{">": [{"var": ["guests", 9]}, 6]}, {"<": [{"var": "guests"}, 1]}]}, {}),  # a default: not followed
        ({"or": [GUESTS_ABOVE_6, GUESTS_BELOW_1]}, {}),
        ({"==": [{"var": "login"}, "otp"]}, {"login": {"enum": ["password", "otp"]}}),
        ({"!": {"var": "login"}}, {"login": {"enum": ["password", "otp"]}}),  # holds while it is not set
        ({">": [{"var": "guests"}, 6]}, {"guests": {"type": "integer"}}),
        ({">": [{"var": "guests"}, "6"]}, {"guests": {"type": "number"}}),  # a numeric string is that number
        ({"==": [{"var": "guests"}, None]}, {"guests": {"type": "integer"}}),  # "is it unset?"
        ({"==": [{"var": "flag"}, True]}, {}),
        ({"===": [{"var": "size"}, "5"]}, {}),
    ],
    ids=[
        "between", "exactly", "open-interval", "point-in-range", "two-keys", "default", "or", "enum-value",
        "enum-absent", "integer", "numeric-string", "null", "boolean", "numeric-string-strict",
    ],
)  # fmt: skip
def test_conditions_that_can_hold_are_not_reported(logic, schema):
    definition = booking(rule(logic), context_schema=schema)
    assert [d.code for d in analyze(definition) if d.code in ("condition_never_holds", "type_mismatch")] == []


VALUES: list[Any] = [
    *[n / 2 for n in range(-2, 17)], "3", " 4 ", "", "x", "y", "abc", True, False, None, [3], ["x"], {"a": 1},
]  # fmt: skip
ABSENT = object()


def fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` is one the model may write under ``schema`` (jsonschema decides)."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema).is_valid(value)


def test_a_transition_reported_dead_is_never_taken_on_any_context():
    """No false positives: whenever condition_never_holds is reported, the engine accepts the move on
    none of many contexts (numbers, numeric strings, text, booleans, null, lists, objects, absence)."""
    from llm_fsm.definition.conditions import unmet_condition

    rng = random.Random(11)

    def conjunct(key: str) -> dict[str, Any]:
        n, var = rng.randint(0, 6), {"var": key}
        constant = rng.choice([n, n + 0.5, str(n), "x", "y", True, None])
        return rng.choice(
            [
                {rng.choice(["==", "===", "!=", "<", "<=", ">", ">="]): [var, constant]},
                {rng.choice(["<", "<="]): [n, var, n + rng.randint(0, 2)]},
                {"in": [var, rng.sample([1, 2, 3, "x", "y"], rng.randint(0, 3))]},
                {"!": var},
            ]
        )

    reported = 0
    for _ in range(400):
        keys = rng.sample(["a", "b"], rng.randint(1, 2))
        conditions = [rule({"and": [conjunct(rng.choice(keys)) for _ in range(rng.randint(1, 3))]}) for _ in range(2)]
        schema = {"a": {"enum": rng.sample(["x", "y", 3, True], 2)}} if rng.random() < 0.3 else {}
        if rng.random() < 0.3:
            schema["b"] = {"type": rng.choice(["string", "integer", "boolean"])}
        if not only(booking(*conditions, context_schema=schema), "condition_never_holds"):
            continue
        reported += 1
        transition = Transition.model_validate(to("booked", *conditions))
        allowed = {key: [v for v in VALUES if fits(v, schema.get(key, {}))] for key in keys}
        for values in itertools.product(*([*allowed[key], ABSENT] for key in keys)):
            context = {key: value for key, value in zip(keys, values, strict=True) if value is not ABSENT}
            assert unmet_condition(transition, context) is not None, (conditions, schema, context)
    assert reported > 20  # the claims were put to the test


def test_a_state_reached_only_through_dead_transitions_is_unreachable():
    states = {
        "start": {"required_context_keys": ["guests"], "transitions": [to("party", rule({"==": [1, 2]})), to("done")]},
        "party": {"transitions": [to("after")]},
        "after": {"transitions": [to("done")]},
        "done": DONE,
    }
    found = [d for d in analyze(fsm(states)) if d.code == "unreachable_state"]
    assert [d.path for d in found] == ["states.party", "states.after"]
    assert "every path to it takes a transition that can never be taken (states.start.transitions[0])" in (
        found[0].message
    )
    assert "never be taken" in found[1].message and "condition_never_holds" in found[0].hint


def test_a_state_whose_only_exits_never_hold_is_never_left():
    states = {
        "start": {"required_context_keys": ["guests"], "transitions": [to("stuck")]},
        "stuck": {"transitions": [to("done", rule({"and": [GUESTS_ABOVE_6, GUESTS_BELOW_1]})), to("stuck")]},
        "done": DONE,
    }
    found = analyze(fsm(states))
    codes = ["condition_never_holds", "unreachable_state", "state_never_left", "no_path_to_terminal"]
    assert [(d.code, d.path) for d in found] == list(
        zip(codes, ["states.stuck.transitions[0].conditions[0].logic.and[1]", "states.done", "states.stuck.transitions",
                    "states.start"], strict=True)
    )  # fmt: skip
    assert "state 'stuck' can never be left: the conditions of transitions[0] (to 'done') never hold" in (
        found[2].message
    )
    assert "condition_never_holds" in found[2].hint and "writable_keys" not in found[2].hint
    assert found[3].message.endswith("(every path to one takes a transition that can never be taken)")


def never_left(**stuck: Any) -> dict[str, Any]:
    """start collects a name, then ``stuck`` needs ``guests`` to finish."""
    states = {
        "start": {"required_context_keys": ["name"], "transitions": [to("stuck", rule(None, "name"))]},
        "stuck": {"required_context_keys": ["guests"], "transitions": [to("done", rule(None, "guests"))], **stuck},
        "done": DONE,
    }
    return fsm(states)


def test_a_key_that_is_not_writable_in_the_state_keeps_it_from_being_left(tmp_path):
    path = written(tmp_path, never_left(writable_keys=["name"]))
    (found,) = only(path, "state_never_left")
    assert found.path == "states.stuck.transitions" and found.line is not None
    assert "transitions[0] (to 'done') needs 'guests', not writable by the model in 'stuck' (writable_keys)" in (
        found.message
    )
    assert "writable_keys" in found.hint and "condition_never_holds" not in found.hint


def test_a_handler_only_key_without_a_handler_keeps_the_state_from_being_left():
    definition = {**never_left(), "handler_only_keys": ["guests"]}
    (found,) = only(definition, "state_never_left")
    assert "'guests', a handler-only key, and no handler is named in 'stuck'" in found.message
    assert "handlers" in found.hint


def test_a_tool_result_no_state_on_the_way_calls_for_keeps_the_state_from_being_left():
    # it said "a handler-only key" and asked for a handler, where the tool is listed by no state on the way
    tool = {"parameters": {"type": "object", "properties": {}}, "result_key": "guests"}
    (found,) = only({**never_left(), "tools": {"count_guests": tool}}, "state_never_left")
    assert "'guests', the result of tool 'count_guests', which neither 'stuck' nor a state on the way lists" in (
        found.message
    )
    assert "list the tool" in found.hint and "handler" not in found.hint


def test_state_never_left_names_each_transition_and_fits_its_hint_to_each_cause():
    never = rule({"and": [GUESTS_ABOVE_6, GUESTS_BELOW_1]})
    twice = never_left(writable_keys=["guests"], transitions=[to("done", never), to("done", never)])
    (found,) = only(twice, "state_never_left")
    assert found.message == (
        "state 'stuck' can never be left: the conditions of transitions[0] (to 'done') never hold; "
        "the conditions of transitions[1] (to 'done') never hold"
    )
    assert found.hint.startswith("fix the conditions that never hold") and "update_context" not in found.hint
    mixed = never_left(writable_keys=["name"], transitions=[to("done", never), to("done", rule(None, "guests"))])
    (found,) = only(mixed, "state_never_left")
    assert "transitions[0] (to 'done') never hold; transitions[1] (to 'done') needs 'guests'" in found.message
    assert "condition_never_holds" in found.hint and "writable_keys" in found.hint


def test_a_required_key_the_model_may_not_write_is_never_collected():
    states = {
        "start": {
            "required_context_keys": ["name", "email", "approved", "_score"],
            "writable_keys": ["name", "approved"],
            "transitions": [to("done")],
        },
        "done": DONE,
    }
    found = only(fsm(states, handler_only_keys=["approved"]), "key_not_writable")
    assert [d.path for d in found] == [f"states.start.required_context_keys[{k}]" for k in (1, 2, 3)]
    email, approved, score = found
    assert email.message == (
        "state 'start' asks the model to collect 'email', but the state's writable_keys leave it out: "
        "it is never collected here"
    )
    assert email.hint == "add 'email' to writable_keys of 'start', or remove it from required_context_keys"
    assert "handler-only key" in approved.message and "handler_only_keys" in approved.hint
    assert "keys starting with '_' are the runtime's" in score.message
    default = fsm({**states, "start": {**states["start"], "writable_keys": None}}, handler_only_keys=["approved"])
    assert [d.path for d in only(default, "key_not_writable")] == [  # by default, all but code's are writable
        f"states.start.required_context_keys[{k}]" for k in (2, 3)
    ]


def test_writable_keys_that_the_runtime_refuses_anyway_are_contradictions():
    states = {"start": {"writable_keys": ["name", "approved", "_score", "_extra"], "transitions": [to("done")]}}
    found = only(fsm({**states, "done": DONE}, handler_only_keys=["approved"]), "writable_key_refused")
    assert [d.path for d in found] == ["states.start.writable_keys[1]", "states.start.writable_keys[2]"]
    assert found[0].message == (
        "writable_keys of 'start' lists 'approved', but it is also in handler_only_keys, which wins: "
        "the model's writes to it are refused"
    )
    assert "'_' are the runtime's" in found[1].message and found[1].hint


def test_a_key_in_writable_keys_counts_as_collected():
    states = {
        "start": {"writable_keys": ["cancel"], "transitions": [to("done", rule({"==": [{"var": "cancel"}, True]}))]},
        "ask": {"writable_keys": ["cancel"], "transitions": [to("done")]},
        "done": DONE,
    }
    assert only(fsm(states), "key_never_set") == []


def test_the_rejection_lists_only_keys_the_model_could_write():
    from llm_fsm.turn.engine import filter_update

    _, (refused,) = filter_update({"x": 1}, writable=["name", "_score", "_extra", "approved"], protected=["approved"])
    assert refused.reason == "context key 'x' is not writable in this state (writable: _extra, name)"


@pytest.mark.parametrize(
    "definition",
    [
        never_left(),  # writable by default (its conditions read it)
        never_left(writable_keys=["guests"]),
        {**never_left(handlers=["count_guests"]), "handler_only_keys": ["guests"]},  # a handler is named there
        {  # written on the way
            **never_left(writable_keys=["name"]),
            "states": {
                **never_left()["states"],
                "start": {
                    "required_context_keys": ["name", "guests"],
                    "transitions": [to("stuck", rule(None, "name"))],
                },
                "stuck": {"transitions": [to("done", rule(None, "guests"))], "writable_keys": ["name"]},
            },
        },
        never_left(writable_keys=["name"], transitions=[to("done", rule(None, "guests")), to("done")]),  # another exit
    ],
    ids=["default", "writable", "handler-named", "written-earlier", "other-exit"],
)
def test_states_that_can_be_left_are_not_reported(definition):
    assert only(definition, "state_never_left") == []


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


def test_domains_meet_exactly_when_their_intersection_is_not_empty():
    from llm_fsm.authoring.requirements import Domain

    rng = random.Random(3)

    def domain() -> Domain:
        kind = rng.choice(["any", "numbers", "strings", "both"])
        low, high = sorted(rng.choice([-math.inf, math.inf, 0, 1, 2]) for _ in range(2))
        numbers = {"low": low, "high": high, "low_open": rng.random() < 0.5, "high_open": rng.random() < 0.5}
        strings = frozenset(rng.sample(["x", "y", "z"], rng.randint(0, 2)))
        return {
            "any": Domain(),
            "numbers": Domain(**numbers, numeric=True),
            "strings": Domain(strings=strings),
            "both": Domain(**numbers, numeric=True, strings=strings),
        }[kind]

    for _ in range(3000):
        a, b = domain(), domain()
        assert a.meets(b) == (not (a & b).empty) == b.meets(a), (a, b)
