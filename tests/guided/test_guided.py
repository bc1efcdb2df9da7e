"""Guided replies: the per-turn reply schema for small models (llm_fsm.guided.schema), and how it is reached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

import llm_fsm
from llm_fsm.cli.options import Provider, make_client
from llm_fsm.guided.schema import MAX_STAY_BRANCHES, MAX_TEXT, guided_schema, value_schema
from llm_fsm.testing import ScriptedLLM, tool_calls
from llm_fsm.testing.cassette import RecordingLLM, ReplayLLM
from tests.conftest import example_hooks

EXAMPLES = Path(__file__).resolve().parents[2] / "fsm_definitions"


def example(name: str) -> llm_fsm.FSMDefinition:
    return llm_fsm.load(EXAMPLES / f"{name}.json")


def model_opening(name: str) -> llm_fsm.FSMDefinition:
    """The example with the model writing its opening (the examples write their own: no call to look at)."""
    data = json.loads((EXAMPLES / f"{name}.json").read_text())
    for state in data["states"].values():
        state.pop("opening", None)
    return llm_fsm.load(data)


def reply(target: str, update: dict[str, Any], message: str = "ok") -> dict[str, Any]:
    return {"transition": {"context_update": update, "target_state": target}, "message": message}


def valid(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    transition = schema["properties"]["transition"]
    return transition.get("anyOf", [transition])


def test_a_move_is_offered_with_the_values_it_needs_and_staying_only_without_them():
    schema = guided_schema(example("form_filling"), "collect_name", {})
    assert valid(schema, reply("collect_email", {"name": "Maya Chen"}))
    assert valid(schema, reply("collect_name", {"name": None}))
    assert not valid(schema, reply("collect_name", {"name": "Maya Chen"}))  # the name is there: move on
    assert not valid(schema, reply("collect_email", {"name": None}))  # no name: this move cannot hold


def test_the_update_comes_before_the_target_and_no_reasoning_is_asked_for():
    schema = guided_schema(example("form_filling"), "confirm", {"name": "A", "email": "a@b.co", "age": 30})
    assert schema["required"] == ["transition", "message"]
    for branch in branches(schema):
        assert list(branch["properties"]) == ["context_update", "target_state"]
        assert branch["required"] == ["context_update", "target_state"]


def test_an_opening_writes_nothing():
    schema = guided_schema(example("form_filling"), "collect_name", {}, opening=True)
    assert valid(schema, reply("collect_name", {}))
    assert not valid(schema, reply("collect_name", {"name": "Jordan Lee"}))
    assert not valid(schema, reply("collect_email", {}))  # nothing written, so no move that needs a name


def test_a_move_that_needs_a_key_this_state_cannot_write_is_not_offered():
    # date_time goes on once check_availability wrote "availability" (code-only), and to confirm_booking
    # only when guest_name and phone are known too: the model can write none of them there
    definition = example("restaurant_booking")

    def offered(context: dict[str, Any]) -> set[str]:
        return {
            b["properties"]["target_state"]["enum"][0]
            for b in branches(guided_schema(definition, "date_time", context))
        }

    assert offered({}) == {"date_time", "welcome", "not_booked"}
    availability = {"available": True, "date": "2026-12-01", "time": "19:00", "party_size": 2}
    assert offered({"availability": availability, "party_size": 2}) == {
        "date_time",
        "welcome",
        "not_booked",
        "contact_details",
    }
    known = {"availability": availability, "party_size": 2, "guest_name": "Maya", "phone": "555-0100"}
    assert "confirm_booking" in offered(known)


def test_a_move_whose_conditions_fail_on_keys_it_cannot_change_is_not_offered():
    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "gate",
            "initial_state": "start",
            "states": {
                "start": {
                    "id": "start",
                    "purpose": "wait",
                    "writable_keys": ["note"],
                    "transitions": [
                        {
                            "target_state": "vip",
                            "conditions": [{"description": "vip", "logic": {"==": [{"var": "tier"}, "gold"]}}],
                        }
                    ],
                },
                "vip": {"id": "vip", "purpose": "done", "transitions": []},
            },
        }
    )
    offered = lambda context: {  # noqa: E731
        b["properties"]["target_state"]["enum"][0] for b in branches(guided_schema(definition, "start", context))
    }
    assert offered({"tier": "silver"}) == {"start"}
    assert offered({"tier": "gold"}) == {"start", "vip"}


def test_values_are_typed_from_the_context_schema_or_from_how_conditions_use_them():
    definition = example("form_filling")
    confirm = definition.states["confirm"]
    assert value_schema(definition, confirm, "age")["type"] == "integer"  # context_schema
    assert value_schema(definition, confirm, "confirmed") == {"type": "boolean"}  # compared with true
    assert value_schema(definition, confirm, "name") == {"type": ["string", "number", "boolean"], "maxLength": MAX_TEXT}
    schema = guided_schema(definition, "collect_age", {"name": "A", "email": "a@b.co"})
    assert valid(schema, reply("confirm", {"age": 34}))
    assert not valid(schema, reply("confirm", {"age": "34"}))
    small_talk = example("small_talk")
    schema = guided_schema(small_talk, "check_in", {"user_name": "Maya"})
    assert not valid(schema, reply("check_in", {"mood": None, "user_said_goodbye": "I'm Leo, going to the party"}))


def test_text_is_bounded_so_a_looping_model_ends_its_value():
    schema = guided_schema(example("form_filling"), "collect_name", {})
    assert not valid(schema, reply("collect_email", {"name": "x" * (MAX_TEXT + 1)}))
    assert not valid(schema, reply("collect_email", {"name": "Maya"}, message="y" * 10_000))


def test_staying_is_left_open_when_its_branches_would_multiply():
    keys = [f"k{i}" for i in range(4)]
    transitions = [
        {"target_state": "end", "conditions": [{"description": f"{a} and {b}", "requires_context_keys": [a, b]}]}
        for a, b in (("k0", "k1"), ("k2", "k3"), ("k0", "k2"), ("k1", "k3"))
    ]
    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "many",
            "initial_state": "start",
            "states": {
                "start": {"id": "start", "purpose": "p", "writable_keys": keys, "transitions": transitions},
                "end": {"id": "end", "purpose": "done", "transitions": []},
            },
        }
    )
    schema = guided_schema(definition, "start", {})
    stays = [b for b in branches(schema) if b["properties"]["target_state"]["enum"] == ["start"]]
    assert MAX_STAY_BRANCHES < 2**4 and len(stays) == 1
    assert valid(schema, reply("start", dict.fromkeys(keys, "v")))


def scripted_conversation(name: str, replies: list[Any], **options: Any) -> tuple[llm_fsm.Conversation, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    return llm_fsm.Conversation(model_opening(name), llm, **options), llm


def test_a_guided_conversation_sends_the_guided_schema_and_says_the_order_in_its_prompt():
    conversation, llm = scripted_conversation(
        "form_filling",
        [reply("collect_name", {}, "Hi! Your name?"), reply("collect_email", {"name": "Maya Chen"}, "Thanks! Email?")],
        guided=True,
    )
    conversation.start()
    assert conversation.send("maya chen").state == "collect_email"
    opening, turn = llm.requests
    assert opening.strict_schema == guided_schema(conversation.definition, "collect_name", {}, opening=True)
    # the turn's values come from the user's words: the name is a piece of what they wrote
    # and its message opens like no earlier one (the opening, here)
    opened = [conversation.history[0].assistant]
    expected = guided_schema(conversation.definition, "collect_name", {}, said="maya chen", earlier=opened)
    assert turn.strict_schema == expected and "pattern" in expected["properties"]["message"]
    assert turn.strict_schema != guided_schema(conversation.definition, "collect_name", {}, earlier=opened)
    system = turn.messages[0]["content"]
    response = system.split("<response>")[1].split("</response>")[0]
    assert '"transition" (its "context_update", then its "target_state"), then "message"' in response
    assert '"reasoning"' not in response
    # no reply template and no example dialogue: SmolLM2-135M copied both ("what the user sees", "jordan lee")
    assert "what the user sees" not in system.lower() and "<example_dialogue>" not in system
    unguided, _ = scripted_conversation("form_filling", [reply("collect_name", {}, "Hi!")])
    assert "<example_dialogue>" in unguided.settings.prompt.system_prompt(unguided.definition, unguided.snapshot())


def test_an_unguided_conversation_is_unchanged():
    conversation, llm = scripted_conversation("form_filling", [reply("collect_name", {}, "Hi!")])
    conversation.start()
    (request,) = llm.requests
    assert request.strict_schema["required"] == ["transition", "message", "reasoning"]
    # the keys in the order the strict schema writes them, and no placeholder text a small model copies
    system = request.messages[0]["content"]
    assert '"transition" (its "context_update", then its "target_state"), then "message", then "reasoning"' in system
    assert "what the user sees" not in system and "<example_dialogue>" in system


def test_the_client_says_whether_its_conversations_are_guided():
    client = llm_fsm.LiteLLMClient("openai/smollm2", api_base="http://127.0.0.1:9/v1", guided=True)
    assert llm_fsm.Conversation(example("quiz"), client).settings.guided
    assert not llm_fsm.Conversation(example("quiz"), client, guided=False).settings.guided
    assert not llm_fsm.Conversation(example("quiz"), ScriptedLLM([])).settings.guided
    made = make_client("openai/smollm2", Provider(api_base="http://127.0.0.1:9/v1", guided=True))
    assert made.guided is True


def test_a_cassette_keeps_guided_so_a_replay_sends_the_same_requests(tmp_path):
    inner = ScriptedLLM([reply("collect_name", {}, "Hi!")])
    inner.guided = True
    recording = RecordingLLM(inner, tmp_path / "c.json")
    llm_fsm.Conversation(model_opening("form_filling"), recording).start()
    replay = ReplayLLM(tmp_path / "c.json")
    assert replay.guided is True
    assert llm_fsm.Conversation(model_opening("form_filling"), replay).start().message == "Hi!"


def test_with_tools_in_the_json_form_the_schema_offers_the_reply_or_a_call_of_a_listed_tool():
    path = EXAMPLES / "support_triage.json"
    llm = ScriptedLLM([reply("triage", {}, "Hi, what happened?")], tool_calling="json")
    conversation = llm_fsm.Conversation(model_opening("support_triage"), llm, hooks=example_hooks(path), guided=True)
    conversation.start()
    (request,) = llm.requests
    answer, call = request.strict_schema["anyOf"]
    assert answer == guided_schema(conversation.definition, "triage", {}, opening=True)
    assert valid(request.strict_schema, reply("triage", {}))
    service = {"service": "login"}
    assert valid(request.strict_schema, {"tool_calls": [{"name": "service_status", "arguments": service}]})
    assert not valid(request.strict_schema, {"tool_calls": [{"name": "service_status", "arguments": {}}]})
    assert not valid(request.strict_schema, {"tool_calls": [{"name": "rm_rf", "arguments": service}]})
    assert not valid(call, {"tool_calls": []})
    # one tool: one call per round (a small model repeats a call until its reply is cut off)
    assert not valid(call, {"tool_calls": [{"name": "service_status", "arguments": service}] * 2})


def test_a_moves_values_are_narrowed_by_its_simple_comparisons():
    schema = guided_schema(example("restaurant_booking"), "welcome", {})
    assert valid(schema, reply("date_time", {"party_size": 4, "booking_abandoned": None}))
    assert not valid(schema, reply("date_time", {"party_size": 10, "booking_abandoned": None}))  # 1 to 8
    assert valid(schema, reply("large_party", {"party_size": 10, "booking_abandoned": None}))
    assert not valid(schema, reply("large_party", {"party_size": 8, "booking_abandoned": None}))  # more than 8
    assert not valid(schema, reply("not_booked", {"party_size": None, "booking_abandoned": False}))  # == true
    assert valid(schema, reply("not_booked", {"party_size": None, "booking_abandoned": True}))
    triage = guided_schema(example("support_triage"), "triage", {})
    update = dict.fromkeys(["category", "issue_summary", "severity", "product_area", "error_message", "invoice_number"])
    billing = {**update, "category": "billing", "issue_summary": "charged twice", "severity": "low"}
    assert valid(triage, reply("billing", billing))
    assert not valid(triage, reply("billing", {**billing, "severity": "whenever"}))
    wide = guided_schema(example("restaurant_booking"), "welcome", {}, narrow=False)
    assert valid(wide, reply("date_time", {"party_size": 10, "booking_abandoned": None}))  # the engine refuses it


def test_without_eagerness_the_model_may_stay_whatever_it_wrote():
    lazy = guided_schema(example("form_filling"), "collect_name", {}, eager=False)
    assert valid(lazy, reply("collect_name", {"name": "Maya Chen"}))
    assert not valid(lazy, reply("collect_email", {"name": None}))


def test_a_key_tested_to_be_whole_is_an_integer_so_a_grammar_can_hold_its_bounds():
    definition = example("restaurant_booking")
    assert value_schema(definition, definition.states["welcome"], "party_size") == {"type": "integer"}
    schema = guided_schema(definition, "welcome", {})
    assert not valid(schema, reply("date_time", {"party_size": 2.5, "booking_abandoned": None}))
    assert valid(schema, reply("date_time", {"party_size": 2, "booking_abandoned": None}))


def test_an_or_of_values_of_one_key_narrows_it_to_those_values():
    schema = guided_schema(example("support_triage"), "triage", {})
    update = dict.fromkeys(["category", "issue_summary", "severity", "product_area", "error_message", "invoice_number"])
    technical = {**update, "category": "technical", "issue_summary": "cannot log in", "severity": "high"}
    assert valid(schema, reply("technical", technical))
    assert valid(schema, reply("technical", {**technical, "category": "account_access"}))
    assert not valid(schema, reply("technical", {**technical, "category": "session_expired"}))


def test_an_earlier_move_the_update_fulfils_wins_over_a_later_one():
    schema = guided_schema(example("restaurant_booking"), "welcome", {})
    # a party of 4 is a date_time move (priority 10): giving up (not_booked, 90) needs no valid party size
    assert not valid(schema, reply("not_booked", {"party_size": 4, "booking_abandoned": True}))
    assert valid(schema, reply("not_booked", {"party_size": None, "booking_abandoned": True}))
    assert not valid(schema, reply("not_booked", {"party_size": 12, "booking_abandoned": True}))  # large_party
    assert valid(schema, reply("date_time", {"party_size": 4, "booking_abandoned": True}))
    # large_party narrows party_size as date_time does: the value tells them apart, and the engine checks it
    assert valid(schema, reply("large_party", {"party_size": 12, "booking_abandoned": None}))
    talk = guided_schema(example("small_talk"), "greeting", {})
    assert not valid(talk, reply("farewell", {"user_name": "Maya", "user_said_goodbye": True}))  # check_in first
    assert valid(talk, reply("farewell", {"user_name": None, "user_said_goodbye": True}))


def definition_with(transitions: list[dict[str, Any]], **state: Any) -> llm_fsm.FSMDefinition:
    return llm_fsm.FSMDefinition.model_validate(
        {
            "name": "t",
            "initial_state": "a",
            "states": {
                "a": {"id": "a", "purpose": "p", "transitions": transitions, **state},
                "b": {"id": "b", "purpose": "end", "transitions": []},
                "c": {"id": "c", "purpose": "end", "transitions": []},
            },
        }
    )


def move(target: str, logic: Any = None, keys: list[str] | None = None, priority: int = 100) -> dict[str, Any]:
    condition: dict[str, Any] = {"description": "c"}
    if logic is not None:
        condition["logic"] = logic
    if keys:
        condition["requires_context_keys"] = keys
    return {"target_state": target, "priority": priority, "conditions": [condition]}


def test_what_the_user_said_can_be_written_without_making_a_move_hold():
    # a user of 15: the model records it and stays (it need not invent an 18 to write anything)
    definition = definition_with([move("b", {">=": [{"var": "age"}, 18]})], writable_keys=["age"])
    schema = guided_schema(definition, "a", {})
    assert valid(schema, reply("a", {"age": 15}))
    assert not valid(schema, reply("a", {"age": 20}))  # a value that makes the move hold: move
    assert valid(schema, reply("b", {"age": 20}))


def test_conditions_the_grammar_cannot_read_are_offered_and_never_forced():
    for logic, update in [
        ({"or": [{"var": "x"}, {"var": "y"}]}, {"x": "yes", "y": None}),  # one of two keys
        ({"==": [{"var": "a.b"}, True]}, {"a": None}),  # a nested path: left to the engine
        ({"!": {"var": "x"}}, {"x": None}),  # holds when the key is absent
        ({"==": [{"var": "x"}, None]}, {"x": None}),
        ({"==": [{"var": ["x", "basic"]}, "basic"]}, {"x": None}),  # a default
    ]:
        keys = sorted({k.split(".")[0] for k in llm_fsm.logic.rules.keys_read(logic)})
        schema = guided_schema(definition_with([move("b", logic)], writable_keys=keys), "a", {})
        full = {k: update.get(k) for k in keys}
        assert valid(schema, reply("b", full)), logic
        assert valid(schema, reply("a", {k: "said" for k in keys})), logic  # never forced to move


def test_two_moves_that_need_the_same_key_are_both_reachable():
    definition = definition_with([move("b", keys=["issue"], priority=1), move("c", keys=["issue"], priority=2)])
    schema = guided_schema(definition, "a", {})
    assert valid(schema, reply("b", {"issue": "charged twice"}))
    assert valid(schema, reply("c", {"issue": "my wifi is broken"}))


def test_a_key_compared_with_an_expression_takes_any_scalar():
    definition = example("order_flow")
    assert "integer" not in str(value_schema(definition, definition.states["select_product"], "unit_price"))
    schema = guided_schema(definition, "select_product", {})
    assert valid(
        schema, reply("choose_quantity", {"product": "burr_grinder", "unit_price": 129, "customer_cancelled": None})
    )


def test_a_flag_that_moves_either_way_forces_the_move_once_written_and_an_enum_leaves_its_other_values():
    quiz = guided_schema(example("quiz"), "q1", {})
    assert not valid(quiz, reply("q1", {"q1_answer": "Sydney", "q1_correct": False}))  # answered: move on
    assert valid(quiz, reply("q2", {"q1_answer": "Sydney", "q1_correct": False}))
    definition = definition_with([move("b", {"==": [{"var": "tier"}, "gold"]})], writable_keys=["tier"]).model_copy(
        update={"context_schema": {"tier": {"type": "string", "enum": ["gold", "silver", "bronze"]}}}
    )
    schema = guided_schema(definition, "a", {})
    assert valid(schema, reply("a", {"tier": "silver"})) and not valid(schema, reply("a", {"tier": "gold"}))
    assert valid(schema, reply("b", {"tier": "gold"})) and not valid(schema, reply("b", {"tier": "silver"}))


def test_text_a_value_must_contain_is_a_pattern_and_lacking_it_lets_the_model_stay():
    # form_filling moves on once the email holds an "@" and a "."
    schema = guided_schema(example("form_filling"), "collect_email", {"name": "Maya"})
    assert valid(schema, reply("collect_age", {"email": "maya.chen@example.com"}))
    assert not valid(schema, reply("collect_email", {"email": "maya.chen@example.com"}))  # it holds: move on
    assert not valid(schema, reply("collect_age", {"email": "maya@home"}))  # the move cannot hold
    assert valid(schema, reply("collect_email", {"email": "maya@home"}))  # what was said can be written
    # an email (context_schema format) holds an "@" wherever it is written: the engine refuses one without
    assert not valid(schema, reply("collect_email", {"email": "maya at home"}))
    confirm = guided_schema(example("form_filling"), "confirm", {"name": "Maya", "email": "m@x.io", "age": 34})
    update = {"confirmed": None, "name": None, "age": None, "field_to_correct": None, "cancelled": None}
    assert valid(confirm, reply("confirm", {**update, "email": "maya@example.com"}))
    assert not valid(confirm, reply("confirm", {**update, "email": "I'm sorry, I cannot help"}))
    assert valid(schema, reply("collect_email", {"email": None}))
    # a raw quote would end the JSON string early: the pattern never lets one through
    assert not valid(schema, reply("collect_age", {"email": 'maya"@example.com'}))
    long = "a" * 150 + "@" + "b" * 150 + ".com"
    assert not valid(schema, reply("collect_age", {"email": long}))  # bounded like any text value


def test_containing_longer_text_narrows_a_move_without_forcing_it():
    logic = {"in": ["yes please", {"var": "answer"}]}
    schema = guided_schema(definition_with([move("b", logic)], writable_keys=["answer"]), "a", {})
    assert valid(schema, reply("b", {"answer": "oh yes please!"}))
    assert not valid(schema, reply("b", {"answer": "no"}))
    assert valid(schema, reply("a", {"answer": "oh yes please!"}))  # lacking it cannot be said: never forced
    for text in ['say "yes"', "", "a\\b"]:  # text no pattern can hold unescaped: left to the engine
        logic = {"in": [text, {"var": "answer"}]}
        schema = guided_schema(definition_with([move("b", logic)], writable_keys=["answer"]), "a", {})
        assert valid(schema, reply("b", {"answer": "anything"})), text
        assert valid(schema, reply("a", {"answer": "anything"})), text


def tool_names(request: Any) -> set[str]:
    """The tools the strict schema of a request lets the model call."""
    if "anyOf" not in request.strict_schema or "tool_calls" not in str(request.strict_schema["anyOf"][-1]):
        return set()
    items = request.strict_schema["anyOf"][-1]["properties"]["tool_calls"]["items"]
    return {call["properties"]["name"]["enum"][0] for call in items.get("anyOf", [items])}


def support_conversation(script: list[Any]) -> tuple[llm_fsm.Conversation, ScriptedLLM]:
    from tests.tools.test_tools import OPENING, SUPPORT, make_hooks

    llm = ScriptedLLM([OPENING, *script], tool_calling="json")
    conversation = llm_fsm.Conversation(llm_fsm.load(SUPPORT), llm, hooks=make_hooks(), guided=True)
    conversation.start()
    return conversation, llm


def test_once_the_tool_rounds_are_used_the_schema_asks_for_the_answer():
    calls = tool_calls(("broken", {}))  # fails every time, so it stays on offer
    conversation, llm = support_conversation([*[calls] * 3, reply("ask", {"order_id": None}, "Sorry.")])
    assert conversation.send("loop").state == "ask"
    *rounds, last = llm.requests[1:]
    assert len(rounds) == 3
    five = {"lookup_order", "refund", "big_refund", "slow", "broken"}
    for request in rounds:  # while rounds are left: the answer, or as many calls as there are tools
        assert tool_names(request) == five
        assert request.strict_schema["anyOf"][-1]["properties"]["tool_calls"]["maxItems"] == 5
        assert valid(request.strict_schema, calls)
    assert tool_names(last) == set() and not valid(last.strict_schema, calls)  # max_tool_rounds 3: the answer
    assert valid(last.strict_schema, reply("ask", {"order_id": None}))


def test_a_tool_that_answered_is_not_offered_again_in_the_turn():
    # SmolLM2-135M asked check_availability the same question three rounds running
    calls = tool_calls(("lookup_order", {"order_id": "A-1"}))
    conversation, llm = support_conversation([calls, reply("found", {"order_id": "A-1"}, "It shipped.")])
    assert conversation.send("A-1").state == "found"
    first, second = llm.requests[1:]
    assert "lookup_order" in tool_names(first) and tool_names(second) == tool_names(first) - {"lookup_order"}
    assert not valid(second.strict_schema, calls)


def test_patterns_are_sent_in_classes_a_grammar_server_reads():
    from llm_fsm.guided.schema import portable_pattern

    # llama.cpp's patterns lack \d, \w and \s (it then accepts any text): the tool's time and date were free
    path = EXAMPLES / "restaurant_booking.json"
    script = [reply("date_time", {"party_size": 2}), reply("date_time", {}, "When?")]  # it opens by itself
    llm = ScriptedLLM(script, tool_calling="json")
    conversation = llm_fsm.Conversation(llm_fsm.load(path), llm, hooks=example_hooks(path), guided=True)
    conversation.start()
    conversation.send("a table for two")
    conversation.send("friday at 7")
    sent = str(llm.requests[-1].strict_schema)
    assert "[0-9]{4}-[0-9]{2}-[0-9]{2}" in sent and "\\\\d" not in sent
    call = {"name": "check_availability", "arguments": {"date": "2026-12-04", "time": "19:00", "party_size": 2}}
    assert valid(llm.requests[-1].strict_schema, {"tool_calls": [call]})
    late = {**call, "arguments": {**call["arguments"], "time": "19:00:00"}}
    assert not valid(llm.requests[-1].strict_schema, {"tool_calls": [late]})
    for pattern, same, other in [
        (r"^\d{2}$", "42", "4x"),
        (r"^[\w.+-]+@\w+$", "a.b+c@host", "a b@host"),
        (r"^\D\S\s$", "a- ", "1- "),
        (r"^[^\s]+$", "x", "x y"),
        (r"^\\d$", "\\d", "1"),  # an escaped backslash and a "d": unchanged
        # a raw quote, backslash or control character would break the JSON string (llama.cpp answers 500)
        (r"^[^@\s]+@[^@\s]+$", "a@b", "a\n@b"),
        (r"^[^@]+@.+$", "a@b", 'a@b"'),
        (r"^\S+$", "ab", "a\tb"),
        (r"^[^\s-]+$", "ab", "a-b"),  # the characters we exclude come first: no "-" becomes a range
        (r"^[^,-]+$", "ab", "a,b"),
        (r"^[^-a]+$", "bc", "b-c"),
        # unbounded repeats are bounded (the grammar ignores maxLength next to a pattern)
        (r"^a+$", "a" * 80, "a" * 81),
        (r"^a{2,}b*$", "aa" + "b" * 40, "a" * 41),  # repeats share the length: 80 in all
        (r"^[^@\s]+@[^@\s]+\.[^@\s]+$", "m" * 26 + "@" + "e" * 26 + ".com", "m" * 27 + "@e.com"),
    ]:
        import re

        portable = portable_pattern(pattern)
        assert "\\d" not in portable.replace("\\\\d", "") and bool(re.fullmatch(portable, same)), pattern
        assert not re.fullmatch(portable, other), pattern


def test_formats_a_grammar_holds_are_sent_and_an_email_holds_an_at_sign():
    import re

    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "t",
            "initial_state": "a",
            "context_schema": {
                "day": {"type": "string", "format": "date"},
                "mail": {"type": "string", "format": "email"},
                "host": {"type": "string", "format": "ipv4"},
            },
            "states": {"a": {"id": "a", "purpose": "p", "writable_keys": ["day", "mail", "host"]}},
        }
    )
    state = definition.states["a"]
    assert value_schema(definition, state, "day")["format"] == "date"  # llama.cpp has a grammar for it
    assert "format" not in value_schema(definition, state, "host") and "pattern" not in value_schema(
        definition, state, "host"
    )
    mail = value_schema(definition, state, "mail")
    assert re.fullmatch(mail["pattern"], "a@b") and not re.fullmatch(mail["pattern"], "ab")


def test_several_bounds_on_one_key_all_hold_and_a_number_compared_for_equality_is_a_number():
    logic = {"and": [{">=": [{"var": "age"}, 21]}, {">=": [{"var": "age"}, 18]}]}
    schema = guided_schema(definition_with([move("b", logic)], writable_keys=["age"]), "a", {})
    assert not valid(schema, reply("b", {"age": 19})) and valid(schema, reply("b", {"age": 21}))
    assert valid(schema, reply("a", {"age": 19}))  # what the user said can be written: stay
    schema = guided_schema(
        definition_with([move("b", {"==": [{"var": "guests"}, 2]})], writable_keys=["guests"]), "a", {}
    )
    assert valid(schema, reply("b", {"guests": 2})) and valid(schema, reply("a", {"guests": 3}))
    assert not valid(schema, reply("b", {"guests": "two"}))


def test_an_enum_with_a_bound_leaves_the_values_outside_it_to_stay_with():
    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "t",
            "initial_state": "a",
            "context_schema": {"n": {"type": "integer", "enum": [1, 2, 3, 4]}},
            "states": {
                "a": {"id": "a", "purpose": "p", "transitions": [move("b", {">": [{"var": "n"}, 2]})]},
                "b": {"id": "b", "purpose": "end", "transitions": []},
            },
        }
    )
    schema = guided_schema(definition, "a", {})
    assert valid(schema, reply("b", {"n": 3})) and not valid(schema, reply("b", {"n": 1}))
    assert valid(schema, reply("a", {"n": 1})) and not valid(schema, reply("a", {"n": 3}))
