"""Tests for llm_fsm.logic.rules: the JsonLogic reference suite plus our own additions."""

from __future__ import annotations

import contextlib
import copy
import json
import random
from pathlib import Path

import pytest

from llm_fsm.errors import LogicError
from llm_fsm.logic.rules import (
    ALLOWED_OPERATORS,
    MAX_DEPTH,
    check_rule,
    evaluate,
    keys_read,
    truthy,
)

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "jsonlogic_tests.json").read_text())
CASES = [case for case in REFERENCE if isinstance(case, list)]


def _same(actual: object, expected: object) -> bool:
    """Equal, and of the same JSON type (so True is not 1 and 2.0 is not 2)."""
    return json.dumps(actual, sort_keys=True) == json.dumps(expected, sort_keys=True)


def _nested(depth: int, op: str = "!") -> object:
    rule: object = True
    for _ in range(depth):
        rule = {op: [rule]}
    return rule


# ---------------------------------------------------------------- reference suite


def test_reference_suite_is_loaded() -> None:
    assert len(CASES) >= 200


@pytest.mark.parametrize(("rule", "data", "expected"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_reference_case(rule: object, data: object, expected: object) -> None:
    result = evaluate(rule, data)  # type: ignore[arg-type]  # the suite also uses list/int data
    assert _same(result, expected), f"{json.dumps(rule)} on {json.dumps(data)} -> {result!r}"


@pytest.mark.parametrize(("rule", "data", "expected"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_reference_rules_pass_check_rule_or_only_arity(rule: object, data: object, expected: object) -> None:
    # the reference suite probes edge cases (e.g. {"if": []}); only arity lints may fire, never
    # unknown operators or shape problems
    for _, message in check_rule(rule):
        assert "argument" in message


# ---------------------------------------------------------------- extra semantics


@pytest.mark.parametrize(
    ("rule", "data", "expected"),
    [
        ({"var": ""}, 0, 0),
        ({"var": ""}, None, None),
        ({"var": ["a", "fallback"]}, None, "fallback"),
        ({"var": "a"}, {"a": None}, None),
        ({"var": "items.0.name"}, {"items": [{"name": "x"}]}, "x"),
        ({"var": "items.5.name"}, {"items": [{"name": "x"}]}, None),
        ({"var": "a.b.c"}, {"a.b.c": 1}, None),
        ({"var": "s.0"}, {"s": "abc"}, None),
        ({"or": [{"var": "A"}, False]}, {"A": {"x": 1}}, {"x": 1}),
        ({"missing": ["a", "b", "c"]}, {"a": None, "b": "", "c": 0}, ["a", "b"]),
        ({"missing": [["a", "b"]]}, {"a": 1}, ["b"]),
        ({"missing_some": [1, ["a", "b"]]}, {"a": ""}, ["a", "b"]),
        ({"==": [None, None]}, {}, True),
        ({"==": [None, 0]}, {}, False),
        ({"==": [True, 1]}, {}, True),
        ({"==": [True, "1"]}, {}, True),
        ({"==": [False, 0]}, {}, True),
        ({"==": [0, ""]}, {}, True),
        ({"==": ["a", "a"]}, {}, True),
        ({"==": [1.0, 1]}, {}, True),
        ({"==": [[1, 2], [1, 2]]}, {}, True),
        ({"==": [[1], 1]}, {}, True),
        ({"===": [True, 1]}, {}, False),
        ({"===": [1.0, 1]}, {}, True),
        ({"===": [None, None]}, {}, True),
        ({"!==": [True, 1]}, {}, True),
        ({"<": [None, 2]}, {}, False),
        ({">": ["b", "a"]}, {}, True),
        ({"<": ["a", 1]}, {}, False),
        ({"<": [{"var": "o"}, 2]}, {"o": {"a": 1}}, False),
        ({"<=": [1, 1, 1]}, {}, True),
        ({"<": [1, 2, 2]}, {}, False),
        ({">": [3, 2, 5]}, {}, True),
        ({"<": [False, True]}, {}, True),
        ({"!": [[1], 2]}, {}, False),
        ({"in": ["a", None]}, {}, False),
        ({"in": [1, "a1"]}, {}, True),
        ({"in": [1, [True]]}, {}, False),
        (
            {"cat": [None, True, 1.0, 1.5, [1, None, 2], {"var": "o"}]},
            {"o": {"a": 1}},
            "nulltrue11.51,,2[object Object]",
        ),
        ({"cat": []}, {}, ""),
        ({"+": []}, {}, 0),
        ({"+": "3.5"}, {}, 3.5),
        ({"+": ["1e3"]}, {}, 1000),
        ({"+": [" 2 "]}, {}, 2),
        ({"+": ["abc"]}, {}, None),
        ({"+": ["12abc"]}, {}, None),
        ({"+": [""]}, {}, None),
        ({"+": [True, 1]}, {}, None),
        ({"+": [None, 1]}, {}, None),
        ({"+": [[1], 1]}, {}, None),
        ({"+": ["inf"]}, {}, None),
        ({"-": ["-10.27"]}, {}, 10.27),
        ({"-": [10, 2, 3]}, {}, 8),
        ({"*": []}, {}, None),
        ({"*": [1e308, 10]}, {}, None),
        ({"/": [1, 0]}, {}, None),
        ({"/": [1, 0.0]}, {}, None),
        ({"/": [10]}, {}, None),
        ({"/": [1, 3]}, {}, 1 / 3),
        ({"/": [10**400, 3]}, {}, None),
        ({"%": [1, 0]}, {}, None),
        ({"%": [-7, 3]}, {}, -1),
        ({"%": [7, -3]}, {}, 1),
        ({"%": [7.5, 2]}, {}, 1.5),
        ({"min": []}, {}, None),
        ({"max": []}, {}, None),
        ({"max": ["3", 2]}, {}, 3),
        ({"min": [1, "x"]}, {}, None),
        ({"and": []}, {}, None),
        ({"or": []}, {}, None),
        ({"if": [{"var": "x"}, {"unknown_op": 1}, "safe"]}, {"x": False}, "safe"),
        ({}, {}, {}),
    ],
)
def test_extra_semantics(rule: object, data: object, expected: object) -> None:
    assert _same(evaluate(rule, data), expected)  # type: ignore[arg-type]


def test_and_or_short_circuit() -> None:
    # the second operand would raise if it were evaluated
    assert evaluate({"and": [False, {"missing_some": 1}]}, {}) is False
    assert evaluate({"or": [True, {"missing_some": 1}]}, {}) is True
    with pytest.raises(LogicError):
        evaluate({"and": [True, {"missing_some": 1}]}, {})


# ---------------------------------------------------------------- has_context


@pytest.mark.parametrize(
    ("rule", "data", "expected"),
    [
        ({"has_context": "email"}, {"email": "a@b.c"}, True),
        ({"has_context": ["email"]}, {"email": "a@b.c"}, True),
        ({"has_context": "email"}, {}, False),
        ({"has_context": "email"}, None, False),
        ({"has_context": "email"}, {"email": None}, False),
        ({"has_context": "email"}, {"email": ""}, False),
        ({"has_context": "email"}, {"email": []}, False),
        ({"has_context": "email"}, {"email": {}}, False),
        ({"has_context": "n"}, {"n": 0}, True),
        ({"has_context": "flag"}, {"flag": False}, True),
        ({"has_context": "user.email"}, {"user": {"email": "x"}}, True),
        ({"has_context": "user.email"}, {"user": {"name": "x"}}, False),
        ({"has_context": "items.1"}, {"items": ["a", "b"]}, True),
        ({"has_context": ["a", "b"]}, {"a": 1, "b": 2}, True),
        ({"has_context": ["a", "b"]}, {"a": 1}, False),
        ({"has_context": {"cat": ["na", "me"]}}, {"name": "Ann"}, True),
        ({"!": {"has_context": "name"}}, {}, True),
    ],
)
def test_has_context(rule: object, data: object, expected: object) -> None:
    assert evaluate(rule, data) is expected  # type: ignore[arg-type]


# llm-fsm's two-argument form: [an object, a key]; {"var": ""} is the whole context
@pytest.mark.parametrize(
    ("rule", "data", "expected"),
    [
        ({"has_context": [{"var": ""}, "email"]}, {"email": "a@b.c"}, True),
        ({"has_context": [{"var": ""}, "email"]}, {"name": "Ann"}, False),
        ({"has_context": [{"var": ""}, "email"]}, {"email": ""}, False),
        ({"has_context": [{"var": ""}, "flag"]}, {"flag": False}, True),
        ({"has_context": [{"var": "user"}, "email"]}, {"user": {"email": "x"}}, True),
        ({"has_context": [{"var": "user"}, "email"]}, {"user": {"name": "x"}}, False),
        ({"has_context": [{"var": "user"}, "email"]}, {}, False),
        ({"has_context": [{"var": "user"}, "email"]}, {"user": "email"}, False),
        ({"has_context": [{"var": ""}, {"var": "which"}]}, {"which": "phone", "phone": "1"}, True),
        ({"!": {"has_context": [{"var": ""}, "email"]}}, {}, True),
    ],
)
def test_has_context_two_argument_form(rule: object, data: object, expected: object) -> None:
    assert evaluate(rule, data) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", [{"has_context": []}, {"has_context": ""}, {"has_context": 3}])
def test_has_context_rejects_bad_keys(rule: object) -> None:
    with pytest.raises(LogicError):
        evaluate(rule, {"a": 1})


# ---------------------------------------------------------------- llm-fsm's operators


@pytest.mark.parametrize(
    ("rule", "data", "expected"),
    [
        ({"contains": [{"var": "tags"}, "vip"]}, {"tags": ["new", "vip"]}, True),
        ({"contains": [{"var": "tags"}, "vip"]}, {"tags": ["new"]}, False),
        ({"contains": [{"var": "tags"}, "vip"]}, {}, False),
        ({"contains": [{"var": "note"}, "urgent"]}, {"note": "this is urgent"}, True),
        ({"contains": [{"var": "note"}, "urgent"]}, {"note": "later"}, False),
        ({"contains": [{"var": "prefs"}, "tea"]}, {"prefs": {"tea": "green"}}, True),
        ({"contains": [{"var": "prefs"}, "tea"]}, {"prefs": {"coffee": 1}}, False),
        ({"contains": [[1, 2], 2]}, {}, True),
        ({"contains": [3, 3]}, {}, False),
        ({"in": ["tea", {"var": "prefs"}]}, {"prefs": {"tea": None}}, True),
        ({"in": ["tea", {"var": "prefs"}]}, {"prefs": {"coffee": 1}}, False),
        ({"in": [1, {"var": "prefs"}]}, {"prefs": {"1": "x"}}, False),
        ({"in": ["gift", {"var": ""}]}, {"gift": True}, True),
        ({"in": ["gift", {"var": ""}]}, {}, False),
        ({"context_length": [{"var": ""}, "items"]}, {"items": [1, 2, 3]}, 3),
        ({"context_length": [{"var": ""}, "name"]}, {"name": "Ann"}, 3),
        ({"context_length": [{"var": ""}, "prefs"]}, {"prefs": {"a": 1, "b": 2}}, 2),
        ({"context_length": [{"var": ""}, "order.items"]}, {"order": {"items": ["x"]}}, 1),
        ({"context_length": [{"var": "order"}, "items"]}, {"order": {"items": ["x", "y"]}}, 2),
        ({"context_length": [{"var": ""}, "items"]}, {}, 0),
        ({"context_length": [{"var": ""}, "count"]}, {"count": 12}, 0),
        ({"context_length": [{"var": "missing"}, "items"]}, {}, 0),
        ({">=": [{"context_length": [{"var": ""}, "items"]}, 2]}, {"items": ["a", "b"]}, True),
    ],
)
def test_llm_fsm_operators(rule: object, data: object, expected: object) -> None:
    assert _same(evaluate(rule, data), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"contains": [[1]]}, "'contains' takes 2 argument(s), got 1"),
        ({"context_length": "items"}, "'context_length' takes 2 argument(s), got 1"),
        ({"has_context": [3, "a"]}, "has_context's first argument must be an object"),
    ],
)
def test_check_rule_of_llm_fsm_operators(rule: object, fragment: str) -> None:
    (problem,) = check_rule(rule)
    assert fragment in problem[1]


def test_keys_read_of_llm_fsm_forms() -> None:
    rule = {
        "and": [
            {"has_context": [{"var": ""}, "phone"]},
            {"has_context": [{"var": "address"}, "street"]},
            {"context_length": [{"var": ""}, "items"]},
            {"context_length": [{"var": "order"}, "lines"]},
            {"contains": [{"var": "tags"}, "vip"]},
        ]
    }
    assert keys_read(rule) == {"phone", "address", "address.street", "items", "order", "order.lines", "tags"}


# ---------------------------------------------------------------- errors


def test_unknown_operator_raises_at_evaluate() -> None:
    with pytest.raises(LogicError, match="unknown operator 'mising'; did you mean 'missing'"):
        evaluate({"mising": ["a"]}, {})


def test_unknown_operator_without_close_match() -> None:
    with pytest.raises(LogicError, match="unknown operator 'fubar'") as info:
        evaluate({"fubar": []}, {})
    assert "did you mean" not in str(info.value)


def test_forbidden_operators_are_unknown() -> None:
    for op in ("merge", "map", "filter", "reduce", "all", "none", "some", "substr", "log", "method"):
        assert op not in ALLOWED_OPERATORS
        with pytest.raises(LogicError, match="unknown operator"):
            evaluate({op: [[1, 2], True]}, {})


def test_multi_key_object_raises() -> None:
    with pytest.raises(LogicError, match="exactly one key"):
        evaluate({"==": [1, 1], "var": "a"}, {})


def test_missing_some_malformed_raises() -> None:
    for rule in ({"missing_some": 1}, {"missing_some": [1, "a"]}, {"missing_some": ["x", ["a"]]}):
        with pytest.raises(LogicError):
            evaluate(rule, {})


def test_depth_limit_10000_deep() -> None:
    rule = _nested(10_000)
    with pytest.raises(LogicError, match="deeper than 32"):
        evaluate(rule, {})
    problems = check_rule(rule)
    assert len(problems) == 1 and "deeper than 32" in problems[0][1]
    with pytest.raises(LogicError):
        keys_read(rule)


def test_depth_limit_boundary() -> None:
    assert evaluate(_nested(MAX_DEPTH), {}) is True
    assert check_rule(_nested(MAX_DEPTH)) == []
    with pytest.raises(LogicError):
        evaluate(_nested(MAX_DEPTH + 1), {})
    assert check_rule(_nested(MAX_DEPTH + 1)) != []


def test_deep_literal_arrays_count_too() -> None:
    rule: object = 1
    for _ in range(10_000):
        rule = [rule]
    with pytest.raises(LogicError):
        evaluate(rule, {})
    assert check_rule(rule) != []


def test_deep_data_does_not_leak_recursion_error() -> None:
    def deep() -> object:
        value: object = 1
        for _ in range(100_000):
            value = [value]
        return value

    with pytest.raises(LogicError):
        evaluate({"==": [{"var": "a"}, {"var": "b"}]}, {"a": deep(), "b": deep()})


class _Hostile(dict):  # type: ignore[type-arg]
    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        raise KeyError("boom")


def test_only_logic_error_escapes() -> None:
    with pytest.raises(LogicError):
        evaluate({"var": "a"}, _Hostile(a=1))
    with pytest.raises(LogicError):
        evaluate({"cat": [10**5000]}, {})


def _random_rule(rng: random.Random, depth: int = 0) -> object:
    scalars = [None, True, False, 0, 1, -2.5, "", "0", "a", "a.b", "x.0", 10**30, 1e308]
    roll = rng.random()
    if depth > 6 or roll < 0.35:
        return rng.choice(scalars)
    if roll < 0.45:
        return [_random_rule(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    op = rng.choice([*sorted(ALLOWED_OPERATORS), "bogus"])
    args = [_random_rule(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {op: args if rng.random() < 0.8 else (args[0] if args else None)}


def test_fuzz_only_logic_error() -> None:
    rng = random.Random(1234)
    data = {"a": {"b": [1, "2", None]}, "x": ["y", {"z": 0}], "s": "text", "n": 3.5}
    snapshot = copy.deepcopy(data)
    for _ in range(3000):
        rule = _random_rule(rng)
        with contextlib.suppress(LogicError):
            evaluate(rule, data)
        check_rule(rule)
        with contextlib.suppress(LogicError):
            keys_read(rule)
    assert data == snapshot


# ---------------------------------------------------------------- check_rule


def test_check_rule_clean_rule() -> None:
    rule = {"and": [{"==": [{"var": "a"}, 1]}, {"missing": ["b"]}, {"has_context": "c"}]}
    assert check_rule(rule) == []
    assert check_rule(True) == []
    assert check_rule({}) == []


def test_check_rule_unknown_operator_location_and_hint() -> None:
    rule = {"and": [True, {"or": [{"mising": "x"}, {"==": [1, {"vr": "a"}]}]}]}
    assert check_rule(rule) == [
        ("and[1].or[0]", "unknown operator 'mising'; did you mean 'missing'?"),
        ("and[1].or[1].==[1]", "unknown operator 'vr'; did you mean 'var'?"),
    ]


def test_check_rule_root_problem() -> None:
    assert check_rule({"mising": "x"}) == [("", "unknown operator 'mising'; did you mean 'missing'?")]


def test_check_rule_multi_key_object() -> None:
    problems = check_rule({"or": [{"==": [1, 1], "!=": [1, 2]}]})
    assert len(problems) == 1
    location, message = problems[0]
    assert location == "or[0]" and "exactly one key" in message


def test_check_rule_literal_list_location() -> None:
    assert check_rule({"in": ["a", ["b", {"nope": 1}]]})[0][0] == "in[1][1]"


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"!": [True, 1]}, "'!' takes 1 argument(s), got 2"),
        ({"!!": []}, "'!!' takes 1 argument(s), got 0"),
        ({"var": []}, "'var' takes 1 to 2 argument(s), got 0"),
        ({"var": ["a", 1, 2]}, "'var' takes 1 to 2 argument(s), got 3"),
        ({"==": [1]}, "'==' takes 2 argument(s), got 1"),
        ({">": [1, 2, 3]}, "'>' takes 2 argument(s), got 3"),
        ({"<": [1, 2, 3, 4]}, "'<' takes 2 to 3 argument(s), got 4"),
        ({"/": [1]}, "'/' takes 2 argument(s), got 1"),
        ({"-": [1, 2, 3]}, "'-' takes 1 to 2 argument(s), got 3"),
        ({"missing_some": [1]}, "'missing_some' takes 2 argument(s), got 1"),
        ({"and": []}, "'and' takes at least 1 argument(s), got 0"),
        ({"has_context": []}, "'has_context' takes at least 1 argument(s), got 0"),
    ],
)
def test_check_rule_arity(rule: object, fragment: str) -> None:
    assert check_rule(rule) == [("", fragment)]


@pytest.mark.parametrize(
    "rule",
    [
        {"var": "a"},
        {"var": ["a", 0]},
        {"!": {"var": "a"}},
        {"<": [1, {"var": "x"}, 10]},
        {"-": 3},
        {"missing": []},
        {"cat": []},
        {"if": [True, 1, False, 2, 3]},
    ],
)
def test_check_rule_accepts_valid_arities(rule: object) -> None:
    assert check_rule(rule) == []


# ---------------------------------------------------------------- keys_read


def test_keys_read() -> None:
    rule = {
        "and": [
            {"==": [{"var": "user.email"}, "x"]},
            {"var": ["score", 0]},
            {"missing": ["a", "b.c"]},
            {"missing": "d"},
            {"missing_some": [1, ["e", "f"]]},
            {"has_context": "g"},
            {"has_context": ["h"]},
            {"var": ""},
            {"var": {"cat": ["dyn", {"var": "suffix"}]}},
            [{"var": "in.list"}],
            {"if": [True, {"var": "then.branch"}, {"var": ["else", {"var": "default"}]}]},
        ]
    }
    assert keys_read(rule) == {
        "user.email",
        "score",
        "a",
        "b.c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "suffix",
        "in.list",
        "then.branch",
        "else",
        "default",
    }


def test_keys_read_of_literals() -> None:
    assert keys_read(True) == set()
    assert keys_read({"==": [1, 1]}) == set()
    assert keys_read({"missing": [["a", "b"]]}) == {"a", "b"}


# ---------------------------------------------------------------- data is read-only


def test_evaluate_never_mutates_data() -> None:
    data = {
        "user": {"email": "a@b.c", "tags": ["x", "y"]},
        "items": [{"qty": 1}, {"qty": 2}],
        "empty": [],
        "n": "5",
    }
    snapshot = copy.deepcopy(data)
    rules = [
        {"var": "user.tags"},
        {"missing": ["user.email", "zip", "items.1.qty"]},
        {"missing_some": [1, ["a", "n"]]},
        {"has_context": ["user.email", "empty"]},
        {"in": ["x", {"var": "user.tags"}]},
        {"+": [{"var": "n"}, {"var": "items.0.qty"}]},
        {"cat": [{"var": "user.tags"}, {"var": "items"}]},
        {"==": [{"var": "user"}, {"var": "user"}]},
        {"if": [{"var": "empty"}, {"var": "items"}, {"var": "user"}]},
        [{"var": "items"}, {"var": ""}],
    ]
    for rule in rules:
        evaluate(rule, data)
    assert data == snapshot
    assert rules[0] == {"var": "user.tags"}


def test_evaluate_does_not_mutate_rule() -> None:
    rule = {"and": [{"!": True}, [1, {"var": "a"}]], "x": 1}
    snapshot = copy.deepcopy(rule)
    with pytest.raises(LogicError):
        evaluate(rule, {"a": 1})
    rule = {"if": [[{"var": "a"}], {"cat": "x"}, 2]}
    snapshot = copy.deepcopy(rule)
    evaluate(rule, {"a": 1})
    assert rule == snapshot


# ---------------------------------------------------------------- truthiness


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        (False, False),
        (True, True),
        (0, False),
        (0.0, False),
        (-0.0, False),
        (float("nan"), False),
        (1, True),
        (-1, True),
        (3.1416, True),
        ("", False),
        ("0", True),
        ("false", True),
        (" ", True),
        ([], False),
        ((), False),
        ([0], True),
        ([[]], True),
        ({}, True),
        ({"a": 1}, True),
    ],
)
def test_truthy(value: object, expected: bool) -> None:
    assert truthy(value) is expected


def test_allowed_operators() -> None:
    # the operators llm-fsm's definitions use (its own three included) stay allowed; the table names the rest
    # (tests/logic/test_operator_table.py holds the table, the evaluator and the guide to the same names)
    used = {"var", "missing", "==", "!=", "<", "<=", ">", ">=", "!", "!!", "and", "or", "if", "in", "cat", "+"}
    assert used | {"has_context", "contains", "context_length"} <= ALLOWED_OPERATORS
    assert MAX_DEPTH == 32


# Exact outcomes that planted bugs changed (survivors of mutation testing: benchmarks/mutation.py logic).


def _nested_list(levels: int) -> object:
    rule: object = 1
    for _ in range(levels):
        rule = [rule]
    return rule


def _nested_and(levels: int) -> object:
    rule: object = True
    for _ in range(levels):
        rule = {"and": [rule]}
    return rule


def test_the_nesting_limit_is_exactly_max_depth_everywhere() -> None:
    assert MAX_DEPTH == 32
    assert evaluate(_nested_list(32), {}) == _nested_list(32)
    assert evaluate(_nested_and(32), {}) is True
    assert evaluate({"if": [_nested_and(31), 1, 2]}, {}) == 1
    assert check_rule(_nested_list(32)) == [] and check_rule(_nested_and(32)) == []
    assert keys_read(_nested_and(32)) == set()
    for rule in (_nested_list(33), _nested_and(33)):
        with pytest.raises(LogicError, match="^rule nests deeper than 32 levels$"):
            evaluate(rule, {})
        with pytest.raises(LogicError, match="^rule nests deeper than 32 levels$"):
            keys_read(rule)
        assert [message for _, message in check_rule(rule)] == ["rule nests deeper than 32 levels"]


@pytest.mark.parametrize(
    ("rule", "data", "expected"),
    [
        ({"==": [[1, 2], ["1", 2]]}, {}, False),  # containers compare by content, not as text
        ({"==": [[1, 2], "1,2"]}, {}, True),
        ({"==": ["1,2", [1, 2]]}, {}, True),
        ({"==": ["1.0", 1]}, {}, True),  # a numeric string and a number compare as numbers
        ({"==": [None, None]}, {}, True),
        ({"==": [None, 0]}, {}, False),
        ({"cat": [1.5, 2.0, True, False, None, 1e21, 1e-7, 1e300]}, {}, "1.52truefalsenull1e+211e-71e+300"),
        (
            {"cat": [{"var": "a"}, {"var": "b"}, {"var": "c"}]},
            {"a": float("nan"), "b": float("inf"), "c": -1e999},
            "NaNInfinity-Infinity",
        ),
        ({"%": [-7, 3]}, {}, -1),
        ({"%": [0.5, 1]}, {}, 0.5),
        ({"contains": [{"var": "l"}, 3]}, {"l": [3]}, True),
        ({"context_length": [{"var": ""}, "items"]}, {"items": [1, 2]}, 2),
        ({"context_length": [[[1, 2, 3]], "0"]}, {}, 0),  # only an object is looked into
        ({"has_context": [["a", "b"]]}, {"a": 1, "b": 2}, True),
        ({"has_context": [["a", "b"]]}, {"a": 1}, False),
        ({"var": "l.1"}, {"l": [5, 6]}, 6),
        ({"var": "l.2"}, {"l": [5, 6]}, None),
        ({"if": [False, 1, {"var": "x"}]}, {"x": 9}, 9),
        ({"<": [1, 2]}, {}, True),
        ({"<": [1, 2, 2]}, {}, False),
        ({"<=": [1, 2, 2]}, {}, True),
        ({">": [3, 2, 5]}, {}, True),  # ">" compares two arguments only
        ({"<": [1]}, {}, False),
        ({"and": [1, 0, 2]}, {}, 0),
        ({"or": [0, "", 3, 4]}, {}, 3),
        ({"and": []}, {}, None),
        ({"+": [1, "2"]}, {}, 3),
        ({"+": [1, "x"]}, {}, None),
    ],
)
def test_exact_values(rule: object, data: dict[str, object], expected: object) -> None:
    assert _same(evaluate(rule, data), expected)


def test_whole_results_are_ints_up_to_two_to_the_53() -> None:
    assert type(evaluate({"*": [2.0**53, 1]}, {})) is int
    assert type(evaluate({"*": [2.0**53, 2]}, {})) is float
    assert type(evaluate({"+": [2.0**53, 2]}, {})) is float


def test_error_messages_are_exact() -> None:
    cases = [
        ({"missing_some": [1, "a"]}, {}, "missing_some expects [minimum count, [keys]]"),
        ({"has_context": []}, {}, "has_context expects one or more non-empty key names"),
        (
            {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6},
            {},
            "an operator object must have exactly one key, this one has 6: 'a', 'b', 'c', 'd', 'e'",
        ),
        ({"mising": []}, {}, "unknown operator 'mising'; did you mean 'missing'?"),
        ({"qqqq": []}, {}, "unknown operator 'qqqq'"),
        ({"var": "a"}, _Hostile(), "cannot evaluate rule: KeyError: 'boom'"),
        ({"cat": [{"var": "a"}]}, {"a": _nested_list(100_000)}, "rule or data nests too deeply to evaluate"),
    ]
    for rule, data, message in cases:
        with pytest.raises(LogicError) as info:
            evaluate(rule, data)
        assert str(info.value) == message
    assert check_rule({"has_context": [1, "a"]}) == [
        ("", 'has_context\'s first argument must be an object, as in [{"var": ""}, "key"], or a key name')
    ]


def test_keys_read_takes_only_literal_string_keys() -> None:
    assert keys_read({"has_context": [{"var": "user"}, "email"]}) == {"user", "user.email"}
    assert keys_read({"has_context": [{"var": ""}, "email"]}) == {"email"}
    assert keys_read({"has_context": [{"var": 3}, "e"]}) == set()
    assert keys_read({"context_length": [{"var": "u"}, 3]}) == {"u"}
    assert keys_read({"var": ["a", "default"]}) == {"a"}


def test_the_operator_table_is_what_the_evaluator_runs_and_allows():
    from llm_fsm.logic.operators import LAZY_OPS, OPS
    from llm_fsm.logic.table import INFIX, OPERATORS, of_kind

    assert set(OPS) | set(LAZY_OPS) == set(OPERATORS) == ALLOWED_OPERATORS  # every row runs, nothing else does
    assert of_kind("order") == {"<", "<=", ">", ">="} and "min" in of_kind("arithmetic") and "in" in INFIX
    # the arity the table gives is the one a rule is checked against
    assert check_rule({"<": [1, 2, 3, 4]}) and not check_rule({"<": [1, 2, 3]})
