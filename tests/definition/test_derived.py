"""A definition's derived parts (FSMDefinition.derived / known): computed once per definition and state, and the
same answer whether it is computed or looked up (the turn looks them up several times a reply)."""

from __future__ import annotations

import llm_fsm
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.memory.summaries import enabled

ORDER_FLOW = "fsm_definitions/order_flow.json"


def test_known_is_none_until_derived_computes_it_then_the_same_value():
    definition = llm_fsm.load(ORDER_FLOW)
    calls: list[str] = []

    def compute(state: llm_fsm.State) -> tuple[str, ...]:
        calls.append(state.id)
        return (state.id,)

    assert definition.known("test:part", "review") is None
    first = definition.derived("test:part", "review", compute)
    assert definition.known("test:part", "review") is first == ("review",)
    assert definition.derived("test:part", "review", compute) is first and calls == ["review"]
    assert definition.known("test:part", "payment") is None  # per state


def test_the_parts_a_turn_asks_for_are_the_same_asked_again_and_on_a_fresh_load():
    looked_up, fresh = llm_fsm.load(ORDER_FLOW), llm_fsm.load(ORDER_FLOW)
    for state in looked_up.states:
        first = (
            looked_up.correctable_keys(state), looked_up.returns(state), looked_up.moves(state),
            model_writable_keys(looked_up, state), enabled(looked_up),
        )  # fmt: skip
        again = (
            looked_up.correctable_keys(state), looked_up.returns(state), looked_up.moves(state),
            model_writable_keys(looked_up, state), enabled(looked_up),
        )  # fmt: skip
        assert first == again
        assert model_writable_keys(fresh, state) == first[3] and fresh.moves(state) == first[2]
    assert "quantity" in model_writable_keys(looked_up, "choose_quantity")
