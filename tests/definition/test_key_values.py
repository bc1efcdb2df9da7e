"""What the definition says a key holds (llm_fsm.definition.key_values): the type its conditions compare it as,
closed sets, the shape of ordered text and of its tools' arguments, and a key's value in the plain strict schema."""

from __future__ import annotations

from llm_fsm.definition.key_values import closed_set, inferred_type, strict_value, text_shape, tool_shape
from tests.guided.test_guided import definition_with, example, move


def test_a_key_compared_only_with_text_constants_is_that_closed_set():
    triage = example("support_triage")
    assert closed_set(triage, "category") == ["billing", "technical", "account_access"]
    assert set(closed_set(triage, "severity") or []) == {"critical", "low", "medium", "high"}
    assert closed_set(triage, "issue_summary") is None  # only required, never compared


def test_a_key_read_any_other_way_is_not_closed():
    for logic in (
        {"==": [{"var": ["x", "basic"]}, "basic"]},  # a default: a missing key reads as "basic"
        {"and": [{"==": [{"var": "x"}, "a"]}, {"!=": [{"var": "x"}, "b"]}]},
        {"and": [{"==": [{"var": "x"}, "a"]}, {"in": ["@", {"var": "x"}]}]},
    ):
        assert closed_set(definition_with([move("b", logic)]), "x") is None, logic
    assert closed_set(definition_with([move("b", {"in": [{"var": "x"}, ["a", "b"]]})]), "x") == ["a", "b"]


def test_text_ordered_against_a_time_is_written_in_that_shape():
    booking = example("restaurant_booking")
    assert text_shape(booking, "time") == "^[0-9][0-9]:[0-9][0-9]$"
    assert text_shape(booking, "guest_name") is None


def test_a_tool_argument_of_a_key_s_name_gives_the_key_its_shape():
    # restaurant_booking declares no context_schema; its tools take date as YYYY-MM-DD
    definition = example("restaurant_booking")
    assert tool_shape(definition, "date") == {"pattern": "^\\d{4}-\\d{2}-\\d{2}$"}
    assert tool_shape(definition, "party_size") is None  # a number's bounds stay the conditions' (a party of 12)
    assert tool_shape(definition, "guest_name") is None  # an argument with no shape gives none


def test_the_type_a_key_is_compared_as():
    def typed(logic: object) -> str | None:
        return inferred_type(definition_with([move("b", logic)]).moves("a"), "x")

    assert typed({"==": [{"var": "x"}, True]}) == "boolean"
    assert typed({">": [{"var": "x"}, 17]}) == "number"
    assert typed({"and": [{">": [{"var": "x"}, 0]}, {"==": [{"%": [{"var": "x"}, 1]}, 0]}]}) == "integer"
    assert typed({"==": [{"var": "x"}, "gold"]}) == "string"
    assert typed({"==": [{"var": "x.part"}, "gold"]}) is None  # inside an object: not the key's own value
    assert typed({"!!": [{"var": "y"}]}) is None  # never compared


def test_a_key_s_plain_strict_value_is_its_declared_or_compared_type_or_any_scalar():
    triage = example("support_triage")
    state = triage.states["triage"]
    # compared only with text constants: text (the closed set is a guided reply's, not a capable model's)
    assert strict_value(triage, state, "category") == {"type": ["string", "null"]}
    definition = definition_with([move("b", {">": [{"var": "x"}, 17]})])
    assert strict_value(definition, definition.states["a"], "x") == {"type": ["number", "null"]}
    scalar = strict_value(definition, definition.states["a"], "never_compared")
    assert "null" in scalar["type"] and {"string", "number", "boolean"} <= set(scalar["type"])
