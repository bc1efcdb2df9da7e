"""Guided turns keep to the state's own work: a key another state collects is left as it is, a state's sole
yes/no question moves on a yes or a no only, and a code typed loosely is offered as its pattern writes it."""

from __future__ import annotations

from typing import Any

import llm_fsm
from llm_fsm.guided.conditions import asked_elsewhere
from llm_fsm.guided.schema import guided_schema
from tests.guided.test_guided import reply, valid


def trip() -> llm_fsm.FSMDefinition:
    """Trip length asked first; the travellers' state routes on it, with the oldest age."""
    return llm_fsm.FSMDefinition.model_validate(
        {
            "name": "trip",
            "initial_state": "trip",
            "context_schema": {"days": {"type": "integer"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
            "states": {
                "trip": {
                    "id": "trip",
                    "purpose": "How long is the trip",
                    "required_context_keys": ["days"],
                    "transitions": [{"target_state": "people", "conditions": [{"requires_context_keys": ["days"]}]}],
                },
                "people": {
                    "id": "people",
                    "purpose": "The oldest traveller's age",
                    "required_context_keys": ["age"],
                    "transitions": [
                        {
                            "target_state": "review",
                            "conditions": [
                                {"logic": {"and": [{"<": [{"var": "age"}, 75]}, {"<=": [{"var": "days"}, 90]}]}},
                                {"requires_context_keys": ["age"]},
                            ],
                        }
                    ],
                },
                "review": {
                    "id": "review",
                    "purpose": "Read the quote back",
                    "required_context_keys": ["ok"],
                    "transitions": [
                        {"target_state": "done", "conditions": [{"logic": {"==": [{"var": "ok"}, True]}}]},
                        {"target_state": "people", "conditions": [{"logic": {"==": [{"var": "ok"}, False]}}]},
                    ],
                },
                "done": {"id": "done", "purpose": "Goodbye", "transitions": []},
            },
        }
    )


def update_keys(schema: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for branch in schema["properties"]["transition"].get("anyOf", [schema["properties"]["transition"]]):
        found |= set(branch["properties"]["context_update"]["properties"])
    return found


def test_a_key_another_state_collects_is_left_as_it_is():
    definition = trip()
    assert asked_elsewhere(definition, "people") == {"days", "ok"}
    schema = guided_schema(definition, "people", {"days": 21}, said="its me and my dad. im 34 he's 71")
    # the move reads the trip's length, but an age said here is not written over it
    assert "days" not in update_keys(schema) and "age" in update_keys(schema)
    assert valid(schema, reply("review", {"age": 71}))
    assert not valid(schema, reply("review", {"age": 71, "days": 34}))
    # the state whose own key it is still asks for it
    assert "days" in update_keys(guided_schema(definition, "trip", {}, said="about 3 weeks, so 21 days"))


def test_a_state_that_declares_its_keys_writes_them_all():
    definition = trip()
    data = definition.model_dump(mode="json", by_alias=True)
    data["states"]["people"]["writable_keys"] = ["age", "days"]
    declared = llm_fsm.FSMDefinition.model_validate(data)
    assert "days" in update_keys(guided_schema(declared, "people", {"days": 21}, said="34 and 71, for 30 days"))


def test_the_sole_yes_no_question_of_a_state_moves_on_a_yes_or_a_no_only():
    definition = trip()
    context = {"days": 21, "age": 71}

    def moves(said: str) -> set[str]:
        schema = guided_schema(definition, "review", context, said=said)
        return {
            t
            for t in ("done", "people", "review")
            if valid(schema, reply(t, {"ok": {"done": True, "people": False}.get(t)}))
        }

    assert moves("will my direct debits still go out? rent comes out on the 1st") == {"review"}
    assert moves("ok fine yes do it") == {"done"}
    assert moves("no, the dates are wrong") == {"people"}
    assert moves("hmm wait, can I change the date?") == {"people"}  # taking it back says no


def test_a_yes_answers_the_state_s_question_whatever_its_name():
    # "bestaetigt" is no word the runtime knows for confirming: the state asks only it, so "ja" answers it
    data = trip().model_dump(mode="json", by_alias=True)
    text = str(data).replace("'ok'", "'bestaetigt'")
    import ast

    definition = llm_fsm.FSMDefinition.model_validate(ast.literal_eval(text))
    schema = guided_schema(definition, "review", {"days": 21, "age": 71}, said="ja passt so, danke")
    assert valid(schema, reply("done", {"bestaetigt": True}))
    assert not valid(schema, reply("people", {"bestaetigt": False}))
    assert not valid(schema, reply("review", {"bestaetigt": None}))


def targets_of(schema: dict[str, Any]) -> set[str]:
    transition = schema["properties"]["transition"]
    return {b["properties"]["target_state"]["enum"][0] for b in transition.get("anyOf", [transition])}


def test_a_guided_retry_does_not_offer_the_move_refused_in_the_turn():
    from llm_fsm.testing import ScriptedLLM

    definition = trip()
    # "done" asks for more than the grammar can see here: the engine refuses it, and the retry is not offered it
    data = definition.model_dump(mode="json", by_alias=True)
    data["states"]["people"]["transitions"].append(
        {
            "target_state": "done",
            "priority": 200,
            "conditions": [{"logic": {"or": [{">": [{"var": "age"}, 99]}, {"==": [{"var": "days"}, 1]}]}}],
        }
    )
    definition = llm_fsm.FSMDefinition.model_validate(data)
    llm = ScriptedLLM([reply("done", {"age": 71}), reply("review", {"age": 71})])
    conversation = llm_fsm.Conversation(definition, llm, guided=True, state="people", context={"days": 21})
    result = conversation.send("the oldest of us is 71")
    first, retry = (request.strict_schema for request in llm.requests)
    assert first is not None and retry is not None
    assert "done" in targets_of(first) and "done" not in targets_of(retry)
    assert result.state == "review" and [r.kind for r in result.rejected] == ["condition"]


def test_a_state_whose_keys_are_known_and_whose_move_holds_does_not_stay_unless_asked():
    definition = trip()
    context = {"days": 21, "age": 71}  # all "people" asks, and its move to review holds
    assert targets_of(guided_schema(definition, "people", context, said="ok premium then")) == {"review"}
    # a message that only asks may stay, to be answered
    assert "people" in targets_of(guided_schema(definition, "people", context, said="what does it cover?"))
    # while the move does not hold, staying is offered as before
    assert "people" in targets_of(guided_schema(definition, "people", {"days": 120, "age": 71}, said="ok then"))


def test_a_time_said_without_am_or_pm_is_either_and_the_move_s_hours_pick_one():
    # the times a clock key is offered ("5.45": 05:45 and 17:45): tests/data/phrases/times.en.json
    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "slot",
            "initial_state": "a",
            "context_schema": {"time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}},
            "states": {
                "a": {
                    "id": "a",
                    "purpose": "A time within opening hours",
                    "required_context_keys": ["time"],
                    "transitions": [
                        {
                            "target_state": "b",
                            "conditions": [{"logic": {"<=": ["08:30", {"var": "time"}, "17:45"]}}],
                        }
                    ],
                },
                "b": {"id": "b", "purpose": "Booked", "transitions": []},
            },
        }
    )
    schema = guided_schema(definition, "a", {}, said="yes tuesday 5.45 is fine")
    assert valid(schema, reply("b", {"time": "17:45"})) and not valid(schema, reply("b", {"time": "05:45"}))
