from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llm_fsm
from llm_fsm.contract import Reply
from llm_fsm.engine import commit, decide, filter_update, initial_snapshot, merge


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
