"""Guided replies in the JSON tool form: the moves that wait on a tool, and the arguments taken from the words
(the tenth round's stranger audit of issue 28: each test fails on the code before its fix)."""

from __future__ import annotations

import enum
import json
from typing import Any

import jsonschema
from pydantic import BaseModel

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.testing import ScriptedLLM
from tests.guided.test_guided_words import targets

RX = {"type": "string", "pattern": "^RX[0-9]{5}$"}
DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}


def pharmacy(moves: list[dict[str, Any]], parameters: dict[str, Any] | None = None) -> llm_fsm.FSMDefinition:
    """A refill desk whose state looks the prescription up with a tool (its result under ``rx``)."""
    parameters = parameters or {"type": "object", "properties": {"rx_number": RX}, "required": ["rx_number"]}
    ends = {move["target_state"] for move in moves}
    return llm_fsm.load(
        {
            "name": "refills",
            "initial_state": "ask_rx",
            "context_schema": {"rx_number": RX},
            "tools": {"lookup_rx": {"parameters": parameters, "result_key": "rx"}},
            "states": {
                "ask_rx": {
                    "purpose": "Look the prescription up before saying anything about it.",
                    "required_context_keys": ["rx_number"],
                    "tools": ["lookup_rx"],
                    "transitions": moves,
                },
                **{end: {"purpose": f"Say {end}.", "transitions": []} for end in ends},
            },
        }
    )


def first_request(definition: llm_fsm.FSMDefinition, said: str, context: dict[str, Any] | None = None) -> Any:
    """The strict schema of the first call of a guided turn in the JSON tool form."""
    hooks = Hooks()

    @hooks.tool("lookup_rx")
    def lookup_rx(**arguments: Any) -> dict[str, Any]:
        return {"found": True, "refills_left": 3, "status": "active"}

    llm = ScriptedLLM([_stay(definition)] * 3, tool_calling="json")
    conversation = llm_fsm.Conversation(
        definition, llm, state=definition.initial_state, context=context or {}, hooks=hooks, guided=True
    )
    conversation.send(said)
    return llm.requests[0].strict_schema


def _stay(definition: llm_fsm.FSMDefinition) -> dict[str, Any]:
    update = {"rx_number": None}
    return {"transition": {"context_update": update, "target_state": definition.initial_state}, "message": "ok"}


def reply_and_tools(strict: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    reply, form = strict["anyOf"]
    assert "tool_calls" in form["properties"]
    return reply, form


def found(rule: dict[str, Any], target: str = "not_found") -> dict[str, Any]:
    return {"target_state": target, "priority": 20, "conditions": [{"description": target, "logic": rule}]}


READY = {
    "target_state": "ready",
    "priority": 10,
    "conditions": [{"description": "refills left", "logic": {">": [{"var": "rx.refills_left"}, 0]}}],
}


def test_a_move_that_holds_before_the_tool_answers_only_because_the_result_is_missing_waits_for_it():
    # "!rx.found" and "!=" hold on a result not there yet: a 135M model could end the turn in not_found
    # without the lookup
    for rule in ({"!": {"var": "rx.found"}}, {"!=": [{"var": "rx.status"}, "active"]}):
        reply, _ = reply_and_tools(first_request(pharmacy([READY, found(rule)]), "Refill RX12345 please"))
        assert targets(reply) == {"ask_rx"}, rule
    # with the result there (an earlier turn's) the move that holds on it is offered
    context = {"rx_number": "RX12345", "rx": {"found": False}}
    reply, _ = reply_and_tools(first_request(pharmacy([found({"!": {"var": "rx.found"}})]), "ok?", context))
    assert "not_found" in targets(reply)


def test_a_move_with_no_condition_to_the_same_place_as_one_that_waits_is_offered():
    ask = {"target_state": "pharmacist", "priority": 90, "description": "The customer asks for the pharmacist."}
    waits = found({"==": [{"var": "rx.controlled"}, True]}, "pharmacist")
    moves = [READY, waits, ask]
    strict = first_request(pharmacy(moves), "Can I just talk to the pharmacist?", {"rx_number": "RX12345"})
    reply, _ = reply_and_tools(strict)
    assert targets(reply) == {"pharmacist"}  # "ready" waits for the lookup


def test_where_every_move_offered_waits_on_the_tool_the_tool_is_called_first():
    # the number is known and "not found" holds before the lookup: staying is still offered (a state whose move
    # holds only for want of the result is not done), and "not found" is not
    definition = pharmacy([READY, found({"!": {"var": "rx.found"}})])
    reply, _ = reply_and_tools(first_request(definition, "ok, go ahead", {"rx_number": "RX12345"}))
    assert targets(reply) == {"ask_rx"}
    # a state that only routes on the lookup (nothing to collect, so no staying): the call is all that is offered,
    # where before the moves that wait were offered again (the schema as it was) and could be taken without it
    routes = json.loads(definition.model_dump_json(by_alias=True))
    routes["states"]["ask_rx"]["required_context_keys"] = []
    routes["states"]["ask_rx"]["transitions"] = [found({"!": {"var": "rx.found"}}), found({"var": "rx.found"}, "ready")]
    for end in ("not_found", "ready"):
        routes["states"][end]["transitions"] = [{"target_state": "end", "description": "The customer is done."}]
    routes["states"]["end"] = {"purpose": "Say goodbye.", "transitions": []}
    strict = first_request(llm_fsm.load(routes), "ok, go ahead", {"rx_number": "RX12345"})
    assert "anyOf" not in strict and "tool_calls" in strict["properties"]


def test_a_move_waits_on_the_tool_whichever_of_the_times_said_the_model_writes():
    # "8:30 then" is 08:30 or 20:30; the seat check fails on both before the tool has answered
    definition = llm_fsm.load(
        {
            "name": "flights",
            "initial_state": "choose",
            "context_schema": {"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}},
            "tools": {"lookup_rx": {"parameters": {"type": "object", "properties": {}}, "result_key": "seat"}},
            "states": {
                "choose": {
                    "purpose": "Agree on a flight time the seat check has found a seat on.",
                    "required_context_keys": ["time"],
                    "tools": ["lookup_rx"],
                    "transitions": [{"target_state": "confirm", "conditions": [{"logic": {"var": "seat.free"}}]}],
                },
                "confirm": {"purpose": "Confirm.", "transitions": []},
            },
        }
    )
    strict = first_request(definition, "8:30 then")
    reply, _ = reply_and_tools(strict)
    assert "confirm" not in targets(reply)


def test_a_tool_whose_parameters_refer_to_their_definitions_is_asked_for_with_them_written_out():
    # pydantic writes an Enum or a nested model as "$ref": "#/$defs/Size"; embedded in the request's schema
    # that pointed at nothing, and llama-server refused every request of the turn
    class Size(enum.Enum):
        small = "small"
        large = "large"

    class Where(BaseModel):
        postcode: str

    class Locker(BaseModel):
        size: Size
        where: Where

    definition = pharmacy([READY], Locker.model_json_schema())
    strict = first_request(definition, "a large locker near 75001, RX12345")
    assert "$ref" not in str(strict) and "$defs" not in str(strict)
    call = {"tool_calls": [{"name": "lookup_rx", "arguments": {"size": "large", "where": {"postcode": "75001"}}}]}
    assert jsonschema.Draft202012Validator(strict).is_valid(call)
    wrong = {"tool_calls": [{"name": "lookup_rx", "arguments": {"size": "huge", "where": {"postcode": "75001"}}}]}
    assert not jsonschema.Draft202012Validator(strict).is_valid(wrong)


def test_a_recursive_parameter_type_is_written_out_once_and_takes_any_value_where_it_recurs():
    from llm_fsm.tools.tool_types import inlined

    class Node(BaseModel):
        name: str
        children: list[Node] = []

    class Tree(BaseModel):
        root: Node

    written = inlined(Tree.model_json_schema())
    assert "$ref" not in str(written)
    assert written["properties"]["root"]["properties"]["children"]["items"] == {}


def arguments(definition: llm_fsm.FSMDefinition, said: str, context: dict[str, Any]) -> dict[str, Any]:
    _, form = reply_and_tools(first_request(definition, said, context))
    properties: dict[str, Any] = form["properties"]["tool_calls"]["items"]["properties"]["arguments"]["properties"]
    return properties


def _trip(*names: str) -> llm_fsm.FSMDefinition:
    parameters = {"type": "object", "properties": {name: DATE for name in names}, "required": list(names)}
    return pharmacy([READY], parameters)


def test_a_date_said_goes_to_the_tool_argument_the_words_name_and_the_others_keep_theirs():
    context = {"rx_number": "RX12345", "depart_date": "2026-12-10", "return_date": "2026-12-17"}
    offered = arguments(_trip("depart_date", "return_date"), "can I move the return to 2026-12-20?", context)
    assert offered["return_date"] == {"enum": ["2026-12-20"]}
    assert offered["depart_date"] == {"const": "2026-12-10"}  # before: 2026-12-20 was forced on both
    # a date of birth is not the pickup day
    context = {"rx_number": "RX12345", "pickup_date": "2026-12-01"}
    offered = arguments(_trip("date_of_birth", "pickup_date"), "my date of birth is 1980-05-02", context)
    assert offered["date_of_birth"] == {"enum": ["1980-05-02"]} and offered["pickup_date"] == {"const": "2026-12-01"}
    # named by neither: what was said, then what each holds
    context = {"rx_number": "RX12345", "depart_date": "2026-12-10", "return_date": "2026-12-17"}
    offered = arguments(_trip("depart_date", "return_date"), "2026-12-20 then", context)
    assert offered["depart_date"] == {"enum": ["2026-12-20", "2026-12-10"]}


def test_a_day_said_alone_is_the_day_of_the_month_collected_for_the_tool_as_for_the_reply():
    # "make it the 12th": the reply wrote 2026-12-12, and the tool was asked about the 10th collected
    context = {"rx_number": "RX12345", "new_date": "2026-12-10"}
    assert arguments(_trip("date"), "No, make it the 12th instead", context)["date"] == {"enum": ["2026-12-12"]}


def test_after_a_person_refuses_a_call_the_turn_is_answered_from_its_words_without_calling_again():
    # the resumed turn has no text of its own: the number the user said was forgotten (a free pattern, the
    # model could invent one) and the refused tool was offered again, to ask the person a second time
    definition = pharmacy([READY]).model_copy(deep=True)
    definition.tools["lookup_rx"] = definition.tools["lookup_rx"].model_copy(update={"approval": "always"})
    hooks = Hooks()

    @hooks.tool("lookup_rx")
    def lookup_rx(rx_number: str) -> dict[str, Any]:
        return {"found": True, "refills_left": 3}

    call = {"tool_calls": [{"name": "lookup_rx", "arguments": {"rx_number": "RX12345"}}]}
    llm = ScriptedLLM([call, *[_stay(definition)] * 3], tool_calling="json")
    conversation = llm_fsm.Conversation(definition, llm, hooks=hooks, guided=True)
    result = conversation.send("Please look up RX12345")
    assert result.pending is not None and result.pending.kind == "tool_approval"
    asked = len(llm.requests)
    conversation.resume(result.pending.token, {"approved": False})
    strict = llm.requests[asked].strict_schema
    assert "tool_calls" not in str(strict)
    update = strict["properties"]["transition"]
    offered = [b["properties"]["context_update"]["properties"]["rx_number"] for b in update.get("anyOf", [update])]
    assert all("RX12345" in str(value) and "pattern" not in str(value) for value in offered)


def test_written_out_parameters_keep_a_property_named_definitions_and_the_data_that_looks_like_a_reference():
    from llm_fsm.tools.tool_types import inlined

    schema = {
        "type": "object",
        "properties": {
            "definitions": {"type": "array", "items": {"$ref": "#/$defs/Word"}},
            "fixed": {"const": {"$ref": "#/$defs/Word"}},
            "any": {"$ref": "#/$defs/Any"},
            "odd": {"$ref": "#/$defs/a~1b"},
        },
        "required": ["definitions"],
        "$defs": {"Word": {"type": "string"}, "Any": True, "a/b": {"type": "integer"}},
    }
    written = inlined(schema)
    assert written["properties"]["definitions"] == {"type": "array", "items": {"type": "string"}}
    assert written["properties"]["fixed"] == {"const": {"$ref": "#/$defs/Word"}}  # a value, not a reference
    assert written["properties"]["any"] is True and written["properties"]["odd"] == {"type": "integer"}
    assert "$defs" not in written


def _lookup(moves: list[dict[str, Any]], context: dict[str, Any], said: str = "go ahead") -> Any:
    return first_request(pharmacy(moves), said, {"rx_number": "RX12345", **context})


def test_a_move_that_holds_on_what_was_collected_whatever_the_tool_answers_does_not_wait():
    either = {"target_state": "ready", "conditions": [{"logic": {"or": [{"var": "vip"}, {"var": "rx.found"}]}}]}
    reply, _ = reply_and_tools(_lookup([either], {"vip": True}))
    assert targets(reply) == {"ready"}  # the second audit: only the call was offered; the fourth: staying too
    # where the result could still break it, it waits, even with the key it also needs left null (kept)
    both = {"target_state": "ready", "conditions": [{"logic": {"var": "vip"}}, {"logic": {"!": {"var": "rx.blocked"}}}]}
    strict = _lookup([both], {"vip": True})
    assert "anyOf" not in strict or "ready" not in targets(reply_and_tools(strict)[0])


def test_a_tool_that_shares_its_result_key_with_one_that_answered_is_not_waited_for():
    definition = pharmacy([READY]).model_copy(deep=True)
    definition.tools["escalate"] = definition.tools["lookup_rx"].model_copy(update={"approval": "always"})
    definition.states["ask_rx"] = definition.states["ask_rx"].model_copy(update={"tools": ("lookup_rx", "escalate")})
    hooks = Hooks()
    hooks.tool("lookup_rx")(lambda rx_number: {"refills_left": 0})
    hooks.tool("escalate")(lambda rx_number: {"refills_left": 9})
    call = {"tool_calls": [{"name": "lookup_rx", "arguments": {"rx_number": "RX12345"}}]}
    llm = ScriptedLLM([call, *[_stay(definition)] * 3], tool_calling="json")
    llm_fsm.Conversation(definition, llm, hooks=hooks, guided=True).send("RX12345 please")
    reply, _ = reply_and_tools(llm.requests[1].strict_schema)  # escalate is still offered, and not waited for
    assert "ready" in targets(reply)


def test_a_failed_call_leaves_the_reply_offered_beside_the_call():
    definition = pharmacy([READY, found({"!": {"var": "rx.found"}})])  # nothing but moves that wait
    hooks = Hooks()

    @hooks.tool("lookup_rx")
    def lookup_rx(rx_number: str) -> dict[str, Any]:
        raise RuntimeError("the pharmacy system is down")

    call = {"tool_calls": [{"name": "lookup_rx", "arguments": {"rx_number": "RX12345"}}]}
    llm = ScriptedLLM([call, *[_stay(definition)] * 3], tool_calling="json")
    llm_fsm.Conversation(
        definition, llm, state="ask_rx", context={"rx_number": "RX12345"}, hooks=hooks, guided=True
    ).send("ok, go ahead")
    reply, _ = reply_and_tools(llm.requests[1].strict_schema)  # before: the call alone, until the rounds ran out
    assert targets(reply)


def test_a_day_said_alone_is_not_taken_from_another_date_nor_made_a_day_the_calendar_has_not():
    context = {"rx_number": "RX12345", "birth_date": "1980-05-02"}
    assert "1980-05-12" not in str(arguments(_trip("date"), "make it the 12th", context))  # not the birthday's month
    offered = arguments(_trip("date"), "the 31st then", {"rx_number": "RX12345", "new_date": "2026-02-10"})
    assert "2026-02-31" not in str(offered)


def test_a_shaped_argument_is_not_offered_a_collected_value_of_its_form_kept_for_another_key():
    # a date of birth was forced as the appointment's date on "next Friday please"
    context = {"rx_number": "RX12345", "date_of_birth": "1980-05-02"}
    assert arguments(_trip("appointment_date"), "next Friday please", context)["appointment_date"] == DATE


def test_a_move_waits_however_many_ways_the_reply_may_write_keys_its_conditions_do_not_read():
    keys = ["time", "first", "second", "third"]  # no word names them: each is offered every number said
    definition = llm_fsm.load(
        {
            "name": "tables",
            "initial_state": "ask",
            "context_schema": {"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}}
            | {key: {"type": "integer"} for key in keys[1:]},
            "tools": {"lookup_rx": {"parameters": {"type": "object", "properties": {}}, "result_key": "table"}},
            "states": {
                "ask": {
                    "purpose": "Find a free table.",
                    "required_context_keys": keys,
                    "tools": ["lookup_rx"],
                    "transitions": [{"target_state": "confirm", "conditions": [{"logic": {"var": "table.free"}}]}],
                },
                "confirm": {"purpose": "Confirm.", "transitions": []},
            },
        }
    )
    # 2 x 3 x 3 x 3 ways (past the 32 checked) offered "confirm" before the table check
    reply, _ = reply_and_tools(first_request(definition, "5 and 3 at 8:15, and 2"))
    assert "confirm" not in targets(reply)


def test_a_move_waits_where_only_a_value_past_its_threshold_or_two_results_together_would_break_it():
    for rule in (
        {"!": {">": [{"var": "rx.price"}, 100]}},
        {"!": {"and": [{"var": "rx.controlled"}, {"var": "rx.expired"}]}},
        {"!": {">": [{"var": "rx.pickup"}, "17:00"]}},  # a text just past it
        {"!=": [{"var": "rx.number"}, {"var": "rx_number"}]},  # the value collected
    ):
        reply, _ = reply_and_tools(_lookup([READY, found(rule)], {}))
        assert "not_found" not in targets(reply), rule


def test_a_shaped_argument_takes_the_value_collected_under_a_key_that_shares_a_word_with_its_name():
    # the third audit's fix left these free: an appointment's date for `date`, a phone number for `phone`
    context = {"rx_number": "RX12345", "appointment_date": "2026-12-10"}
    assert arguments(_trip("date"), "yes please go ahead", context)["date"] == {"enum": ["2026-12-10"]}
    assert arguments(_trip("date"), "make it the 12th", context)["date"] == {"enum": ["2026-12-12"]}
    context = {"rx_number": "RX12345", "date_of_birth": "1980-05-02", "booking_date": "2026-12-10"}
    assert arguments(_trip("date"), "yes please go ahead", context)["date"] == {"enum": ["2026-12-10"]}


def test_a_key_a_move_only_needs_counts_once_however_many_ways_the_words_offer_it():
    # a free-text note the move needs (requires_context_keys) gave more than 32 ways, and the move was offered
    # before the table check
    definition = llm_fsm.load(
        {
            "name": "notes",
            "initial_state": "ask",
            "tools": {"lookup_rx": {"parameters": {"type": "object", "properties": {}}, "result_key": "table"}},
            "states": {
                "ask": {
                    "purpose": "Find a free table.",
                    "required_context_keys": ["notes", "seats"],
                    "tools": ["lookup_rx"],
                    "transitions": [
                        {
                            "target_state": "confirm",
                            "conditions": [
                                {"requires_context_keys": ["notes", "seats"], "logic": {"var": "table.free"}}
                            ],
                        }
                    ],
                },
                "confirm": {"purpose": "Confirm.", "transitions": []},
            },
        }
    )
    said = "we need a high chair and a quiet table near the window please, 3 or 4 of us"
    reply, _ = reply_and_tools(first_request(definition, said))
    assert "confirm" not in targets(reply)


def test_can_fail_tries_the_values_the_condition_solver_tries_for_the_free_keys_only():
    from llm_fsm.definition.condition_values import can_fail
    from llm_fsm.definition.models import Condition

    def condition(rule: dict[str, Any]) -> Condition:
        return Condition(description="c", logic=rule)

    assert can_fail(condition({"!": {"var": "rx.found"}}), {}, ["rx.found"])
    assert can_fail(
        condition({"!=": [{"var": "rx.number"}, {"var": "rx_number"}]}), {"rx_number": "RX1"}, ["rx.number"]
    )
    assert can_fail(condition({"<=": [{"var": "rx.day"}, "2026-12-10"]}), {}, ["rx.day"])  # a day after it
    # what holds on a collected value whatever the result is cannot fail, and a collected key is not free
    assert not can_fail(condition({"or": [{"var": "vip"}, {"var": "rx.found"}]}), {"vip": True}, ["rx.found"])
    assert not can_fail(condition({"!": {"var": "rx.found"}}), {}, [])
