from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llm_fsm
from llm_fsm.contract import Reply
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.errors import ContextValueError, ResumeError
from llm_fsm.snapshot import Exchange, Origin, PendingEvent, Rejection
from llm_fsm.turn.engine import (
    apply_delta,
    check_values,
    commit,
    decide,
    filter_update,
    initial_snapshot,
    record,
    way_back,
    write,
)
from llm_fsm.turn.resuming import resumed
from llm_fsm.values import merge


def make_reply(target, **update):
    return Reply.model_validate({"transition": {"target_state": target, "context_update": update}, "message": "m"})


def test_merge_is_deep_ignores_nulls_and_never_mutates():
    context = {"a": {"x": 1, "y": 2}, "b": 1}
    frozen = copy.deepcopy(context)
    merged = merge(context, {"a": {"y": 3, "z": None}, "b": None, "c": [1]})
    assert merged == {"a": {"x": 1, "y": 3}, "b": 1, "c": [1]}
    assert context == frozen


def test_internal_and_protected_keys_are_refused_but_extra_is_allowed():
    applied, refused = filter_update({"_x": 1, "ok": 2, "_extra": {"n": 1}, "gate": True}, protected={"gate"})
    assert applied == {"ok": 2, "_extra": {"n": 1}}
    assert {r.key for r in refused} == {"_x", "gate"}


def test_lowest_priority_transition_whose_conditions_hold_is_used():
    data = {
        "name": "p",
        "initial_state": "a",
        "states": {
            "a": {
                "transitions": [
                    {
                        "target_state": "b",
                        "priority": 1,
                        "conditions": [{"description": "big", "logic": {">": [{"var": "n"}, 10]}}],
                    },
                    {
                        "target_state": "b",
                        "priority": 5,
                        "conditions": [{"description": "any", "requires_context_keys": ["n"]}],
                    },
                ]
            },
            "b": {},
        },
    }
    definition = llm_fsm.load(data)
    snap = initial_snapshot(definition)
    assert decide(definition, snap, make_reply("b", n=3)).accepted
    rejected = decide(definition, snap, make_reply("b"))
    assert not rejected.accepted and "condition 'big'" in rejected.rejected[0].reason


def test_commit_builds_a_new_snapshot(signup):
    snap = initial_snapshot(signup)
    decision = decide(signup, snap, make_reply("ask_email", name="Ann"))
    after = commit(
        signup, snap, state=decision.state, context=decision.context, provenance={}, user="Ann", message="Email?"
    )
    assert snap.state == "ask_name" and snap.history == () and snap.context == {}
    assert (after.state, after.turns, after.status, after.context) == ("ask_email", 1, "active", {"name": "Ann"})


targets = st.sampled_from(["ask_name", "ask_email", "done", "nowhere", "_x", ""])
keys = st.sampled_from(["name", "email", "approved", "_approved", "_extra", "other"])
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    state=st.sampled_from(["ask_name", "ask_email"]), target=targets, update=st.dictionaries(keys, values, max_size=4)
)
def test_decide_only_moves_along_declared_transitions_whose_conditions_hold(signup, state, target, update):
    snap = initial_snapshot(signup, state)
    decision = decide(signup, snap, make_reply(target, **update))
    assert decision.state in signup.states
    assert not any(k.startswith("_") and k != "_extra" for k in decision.context)
    assert "approved" not in decision.context
    if decision.state != state:
        declared = [t for t in signup.states[state].transitions if t.target_state == decision.state]
        assert declared and decision.accepted
        assert decision.state != "done", "done needs 'approved', which only code may set"


def test_a_dotted_handler_only_key_is_out_of_the_model_s_reach():
    definition = llm_fsm.load(
        {
            "name": "pay",
            "initial_state": "checkout",
            "handler_only_keys": ["payment.authorized"],
            "states": {
                "checkout": {
                    "purpose": "Take the payment",
                    "transitions": [
                        {
                            "target_state": "paid",
                            "conditions": [{"logic": {"==": [{"var": "payment.authorized"}, True]}}],
                        }
                    ],
                },
                "paid": {"purpose": "Thank the user"},
            },
        }
    )
    snap = initial_snapshot(definition)
    update = {"payment": {"authorized": True, "method": "card"}}
    decision = decide(
        definition,
        snap,
        Reply.model_validate({"transition": {"target_state": "paid", "context_update": update}, "message": "m"}),
    )
    assert not decision.accepted and decision.state == "checkout"
    assert decision.context == {"payment": {"method": "card"}}, "the rest of the object is kept"
    assert [(r.kind, r.key) for r in decision.rejected][:1] == [("context_key", "payment.authorized")]


# Exact outcomes of the engine's pure functions (each assertion kills planted bugs that survived mutation testing:
# benchmarks/mutation.py engine).

HUB = {
    "name": "hub",
    "initial_state": "menu",
    "context_schema": {"age": {"type": "integer", "minimum": 0}},
    "global_transitions": [
        {"target_state": "help", "description": "asks for help", "conditions": [{"requires_context_keys": ["topic"]}]}
    ],
    "states": {
        "menu": {
            "purpose": "Pick",
            "transitions": [
                {
                    "target_state": "order",
                    "conditions": [{"description": "has both", "requires_context_keys": ["item", "size"]}],
                },
                {
                    "target_state": "vip",
                    "conditions": [{"requires_context_keys": ["code"]}, {"logic": {">": [{"var": "age"}, 17]}}],
                },
                {"target_state": "odd", "conditions": [{"logic": {"has_context": {"var": "which"}}}]},
                {"target_state": "done"},
            ],
        },
        "help": {"purpose": "Help", "transitions": [{"target_state": "$return"}]},
        "order": {"purpose": "Order", "transitions": [{"target_state": "done"}]},
        "vip": {"purpose": "VIP", "transitions": [{"target_state": "done"}]},
        "odd": {"purpose": "Odd", "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Bye"},
    },
}


def test_each_rejection_says_exactly_why_with_its_kind_target_and_attempt():
    hub = llm_fsm.load(HUB)
    snap = initial_snapshot(hub)
    cases = [
        ("order", {}, "condition", "condition 'has both' needs keys 'item', 'size'"),
        ("order", {"item": "tea"}, "condition", "condition 'has both' needs key 'size'"),
        ("vip", {"code": "c", "age": 10}, "condition", "condition '#2' does not hold on the current context"),
        (
            "odd",
            {"which": 3},
            "condition",
            "condition '#1' could not be evaluated: has_context expects one or more non-empty key names",
        ),
        ("$return", {}, "target", "'menu' has no such move (allowed: 'order', 'vip', 'odd', 'done', 'help')"),
        ("nowhere", {}, "target", "there is no state 'nowhere'"),
        ("help", {}, "condition", "condition '#1' needs key 'topic'"),
    ]
    for target, update, kind, why in cases:
        decision = decide(hub, snap, make_reply(target, **update), attempt=3)
        assert (decision.accepted, decision.state) == (False, "menu"), target
        assert decision.rejected == (
            Rejection(kind=kind, reason=f"transition to '{target}' rejected: {why}", target_state=target, attempt=3),
        )
        assert decision.applied == update and decision.context == update
    assert decide(hub, snap, make_reply("nowhere")).rejected[0].attempt == 1
    for target, update in [("vip", {"code": "c", "age": 18}), ("order", {"item": "t", "size": "L"}), ("menu", {})]:
        decision = decide(hub, snap, make_reply(target, **update))
        assert (decision.accepted, decision.state, decision.rejected) == (True, target, ())


def test_return_goes_back_where_the_conversation_came_from_and_nowhere_else():
    hub = llm_fsm.load(HUB)
    lost = initial_snapshot(hub, "help")
    decision = decide(hub, lost, make_reply("$return"))
    assert decision.rejected[0].reason == (
        "transition to '$return' rejected: 'help' came from nowhere: there is no way back (allowed: none)"
    )
    came = lost.model_copy(update={"came_from": ("order", "menu")})
    for target in ("$return", "menu"):
        decision = decide(hub, came, make_reply(target))
        assert (decision.accepted, decision.state) == (True, "menu"), target
    decision = decide(hub, came, make_reply("order"))
    assert decision.rejected[0].reason == (
        "transition to 'order' rejected: 'help' has no transition to it (allowed: 'menu')"
    )


def test_writable_keys_count_global_moves_and_a_state_s_own_list_replaces_them():
    hub = llm_fsm.load(HUB)
    assert model_writable_keys(hub, "menu") == {"item", "size", "code", "age", "which", "topic", "_extra"}
    data = copy.deepcopy(HUB)
    data["states"]["menu"]["writable_keys"] = ["item", "_secret", "gate"]
    data["handler_only_keys"] = ["gate"]
    listed = llm_fsm.load(data)
    assert model_writable_keys(listed, "menu") == {"item", "_secret", "gate"}
    decision = decide(listed, initial_snapshot(listed), make_reply("menu", item="tea", size="L"), attempt=2)
    assert decision.applied == {"item": "tea"}
    assert decision.rejected == (
        Rejection(
            kind="context_key",
            reason="context key 'size' is not writable in this state (writable: item)",
            key="size",
            attempt=2,
        ),
    )


def test_refusals_name_the_rule_and_default_to_the_first_attempt():
    applied, refused = filter_update(
        {"_x": 1, "gate": 2, "other": 3, "ok": None}, writable={"ok", "other2"}, protected={"gate"}
    )
    assert applied == {}
    assert [(r.key, r.reason, r.attempt) for r in refused] == [
        ("_x", "context key '_x' is internal to the runtime; the model may not write it", 1),
        ("gate", "context key 'gate' may only be set by code; the model may not write it", 1),
        ("other", "context key 'other' is not writable in this state (writable: ok, other2)", 1),
    ]
    _, refused = filter_update({"a": 1}, writable={"_y", "gate"}, protected={"gate"})
    assert refused[0].reason == "context key 'a' is not writable in this state (writable: none)"


def test_dotted_protected_paths_are_cut_out_at_any_depth_only_where_they_are():
    protected = {"pay.card.ok", "pay.flag"}
    update = {"pay": {"card": {"ok": True, "last4": "1234"}, "flag": 1, "sum": 5}, "other": {"card": {"ok": 1}}}
    applied, refused = filter_update(update, protected=protected, attempt=4)
    assert applied == {"pay": {"card": {"last4": "1234"}, "sum": 5}, "other": {"card": {"ok": 1}}}
    assert sorted((r.key, r.attempt, r.kind) for r in refused) == [
        ("pay.card.ok", 4, "context_key"),
        ("pay.flag", 4, "context_key"),
    ]
    assert refused[0].reason.endswith("may only be set by code; the model may not write it")
    applied, refused = filter_update({"pay": {"card": "visa", "sum": 1}}, protected=protected)
    assert (applied, refused) == ({"pay": {"card": "visa", "sum": 1}}, [])
    applied, refused = filter_update({"pay": 7}, protected=protected)
    assert (applied, refused) == ({"pay": 7}, [])


def test_values_are_checked_against_the_context_schema_and_short_in_the_reason():
    hub = llm_fsm.load(HUB)
    kept, invalid = check_values(hub, {"age": -1, "name": "x" * 100})
    assert kept == {"name": "x" * 100}
    assert invalid == [
        Rejection(
            kind="context_value",
            reason=f"value -1 for 'age' is invalid: {invalid[0].reason.split(': ', 1)[1]}",
            key="age",
        )
    ]
    assert invalid[0].attempt == 1 and "-1" in invalid[0].reason and "minimum" in invalid[0].reason
    kept, invalid = check_values(hub, {"age": 30}, attempt=2)
    assert (kept, invalid) == ({"age": 30}, [])
    long = "y" * 100
    data = copy.deepcopy(HUB)
    data["context_schema"] = {"code": {"type": "integer"}}
    _, invalid = check_values(llm_fsm.load(data), {"code": long}, attempt=2)
    assert invalid[0].reason.startswith(f"value '{'y' * 56}... for 'code' is invalid: ")
    assert (invalid[0].key, invalid[0].attempt) == ("code", 2)
    _, invalid = check_values(llm_fsm.load(data), {"code": "y" * 58})
    assert invalid[0].reason.startswith(f"value '{'y' * 58}' for 'code' is invalid: ")
    plain = llm_fsm.load({**HUB, "context_schema": {}})
    assert check_values(plain, {"age": -1}) == ({"age": -1}, [])

    decision = decide(hub, initial_snapshot(hub), make_reply("menu", age=-1, item="tea"))
    assert (decision.accepted, decision.applied, decision.rejected[0].kind) == (False, {"item": "tea"}, "context_value")


def test_an_email_is_checked_as_an_address_not_as_text_with_an_at():
    mail = llm_fsm.load({**HUB, "context_schema": {"email": {"type": "string", "format": "email"}}})
    for wrong in ("a@b", "x@@y.com", "maya chen@example.com"):  # jsonschema's own check takes all three
        kept, invalid = check_values(mail, {"email": wrong})
        assert kept == {} and invalid[0].key == "email" and "is not a 'email'" in invalid[0].reason
    assert check_values(mail, {"email": "maya.chen@example.com"}) == ({"email": "maya.chen@example.com"}, [])
    assert check_values(mail, {"email": "müller@beispiel.de"})[1] == []  # an address in any script, no DNS asked


def test_commit_counts_turns_records_the_way_back_and_the_status():
    hub = llm_fsm.load(HUB)
    snap = initial_snapshot(hub)
    origin = {"item": Origin(by="model", turn=1)}
    opening = commit(hub, snap, state="menu", context={}, provenance={}, user=None, message="Hi")
    assert (opening.turns, opening.status, opening.came_from) == (0, "active", ())
    assert opening.history == (Exchange(user=None, assistant="Hi", state="menu"),)
    moved = commit(hub, opening, state="order", context={"item": "t"}, provenance=origin, user="tea", message="Ok")
    assert (moved.turns, moved.came_from, moved.provenance, moved.state) == (1, ("menu",), origin, "order")
    assert moved.history[-1] == Exchange(user="tea", assistant="Ok", state="order")
    again = commit(hub, moved, state="order", context={}, provenance={}, user=None, message="Still")
    assert (again.turns, again.came_from) == (2, ("menu",))
    pending = PendingEvent(reason="r", created_at="now", token="t", state="order")
    paused = commit(hub, moved, state="done", context={}, provenance={}, user="x", message="Wait", pending=pending)
    assert (paused.status, paused.pending) == ("paused", pending)
    ended = commit(hub, moved, state="done", context={}, provenance={}, user="x", message="Bye")
    assert (ended.status, ended.pending, ended.came_from) == ("ended", None, ("menu", "order"))


def test_the_way_back_is_cut_at_a_state_already_on_it():
    assert way_back(("a", "b"), "c", "c") == ("a", "b")
    assert way_back(("a", "b", "c"), "d", "b") == ("a",)
    assert way_back(("a",), "b", "c") == ("a", "b")


def test_code_writes_delete_on_null_and_record_who_wrote_what():
    provenance = {"a": Origin(by="model", turn=1), "b": Origin(by="model", turn=1)}
    context, after = write({"a": 1, "b": {"x": 1}, "c": 3}, provenance, {"a": None, "b": {"y": 2}}, by="h", turn=4)
    assert context == {"b": {"x": 1, "y": 2}, "c": 3}
    assert after == {"b": Origin(by="h", turn=4)}
    assert apply_delta({"a": 1}, {"a": None, "z": None, "n": 0}) == {"n": 0}
    assert record({"a": Origin(by="m", turn=1)}, ["b"], "x", 2, deleted=["zz"]) == {
        "a": Origin(by="m", turn=1),
        "b": Origin(by="x", turn=2),
    }


def test_an_initial_context_is_recorded_as_the_user_code_s_and_must_be_json():
    hub = llm_fsm.load(HUB)
    snap = initial_snapshot(hub, context={"item": "tea", "gone": None})
    assert (snap.state, snap.turns, snap.context, snap.used_tokens) == ("menu", 0, {"item": "tea"}, ())
    assert snap.provenance == {"item": Origin(by="user_code", turn=0)}
    assert (snap.definition_name, snap.definition_hash, snap.definition_outline) == (
        "hub",
        hub.content_hash,
        hub.outline,
    )
    assert initial_snapshot(hub, "order").state == "order"
    with pytest.raises(ContextValueError, match="^initial context: 'x' is nan"):
        initial_snapshot(hub, context={"x": float("nan")})


def test_a_resume_spends_its_token_once_and_merges_only_a_break_s_result():
    hub = llm_fsm.load(HUB)
    pending = PendingEvent(reason="r", created_at="now", token="t1", state="order")
    snap = initial_snapshot(hub, "order", {"a": 1}).model_copy(
        update={"pending": pending, "status": "paused", "turns": 3, "used_tokens": ("t0",)}
    )
    after = resumed(hub, snap, "t1", {"b": 2, "a": None})
    assert (after.context, after.pending, after.status, after.used_tokens) == (
        {"a": 1, "b": 2},
        None,
        "active",
        ("t0", "t1"),
    )
    assert after.provenance == {"a": Origin(by="user_code", turn=0), "b": Origin(by="resume", turn=4)}
    in_done = snap.model_copy(update={"state": "done"})
    assert resumed(hub, in_done, "t1", {}).status == "ended"
    approval = snap.model_copy(update={"pending": pending.model_copy(update={"kind": "tool_approval"})})
    after = resumed(hub, approval, "t1", {"approved": True})
    assert (after.context, after.provenance, after.status, after.pending, after.used_tokens) == (
        {"a": 1},
        snap.provenance,
        "active",
        None,
        ("t0", "t1"),
    )
    for snapshot, token, result, message in [
        (snap, "t0", {}, "^this resume token was already used: a pause is resumed exactly once"),
        (
            snap.model_copy(update={"pending": None}),
            "t1",
            {},
            "^the conversation is not paused: there is nothing to resume",
        ),
        (snap, "t2", {}, "^this is not the token of the pending event"),
        (snap, "t1", [1], "^a resume result is an object of context keys, not a list"),
        (snap, "t1", {"x": float("inf")}, "^resume result: 'x' is inf"),
    ]:
        with pytest.raises((ResumeError, ContextValueError), match=message) as info:
            resumed(hub, snapshot, token, result)
        if info.type is ResumeError:
            assert info.value.state == "order"


def test_a_malformed_key_is_never_present():
    from llm_fsm.logic.rules import has_key  # what requires_context_keys is checked with

    assert has_key({"": 1}, "") is False
    assert has_key({"a": {"b": 1}}, "a.b") is True


def test_the_keys_a_way_back_needs_are_writable_even_before_there_is_one():
    data = copy.deepcopy(HUB)
    data["states"]["help"]["transitions"] = [
        {"target_state": "$return", "conditions": [{"requires_context_keys": ["answer"]}]}
    ]
    hub = llm_fsm.load(data)
    assert model_writable_keys(hub, "help") == {"answer", "_extra"}
    decision = decide(hub, initial_snapshot(hub, "help"), make_reply("help", answer="42"))
    assert (decision.accepted, decision.applied) == (True, {"answer": "42"})


def test_a_value_is_shown_whole_up_to_60_characters_and_checked_on_the_turn_s_attempt():
    data = copy.deepcopy(HUB)
    data["context_schema"] = {"code": {"type": "integer"}}
    hub = llm_fsm.load(data)
    _, invalid = check_values(hub, {"code": "y" * 59})  # its repr has 61 characters
    assert invalid[0].reason.startswith(f"value '{'y' * 56}... for 'code'")
    decision = decide(hub, initial_snapshot(hub), make_reply("menu", code="x"), attempt=2)
    assert [(r.kind, r.attempt) for r in decision.rejected] == [("context_value", 2)]
