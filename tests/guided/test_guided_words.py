"""Issue 28: what a guided schema offers from the user's words and the whole definition's conditions
(llm_fsm.guided.words, llm_fsm.guided.values), and the move a staying reply's update fulfils."""

from __future__ import annotations

from typing import Any

import llm_fsm
from llm_fsm.guided.entered import fulfilled_move
from llm_fsm.guided.schema import guided_schema
from llm_fsm.guided.values import derived_values
from llm_fsm.guided.words import from_words, pool, spans
from llm_fsm.testing import ScriptedLLM
from llm_fsm.testing.scorecard import course as scorecard_course
from tests.definition.test_corrections import ROOT, _offered
from tests.guided.test_guided import branches, definition_with, example, move, reply, scripted_conversation, valid

WORDS = ("maya chen", "Sydney", "the burr grinder")


def targets(schema: dict[str, Any]) -> set[str]:
    return {branch["properties"]["target_state"]["enum"][0] for branch in branches(schema)}


def test_spans_are_runs_of_words_without_the_punctuation_at_their_edges():
    found = spans("Hey! I'm Maya, from Leeds.")
    assert "Maya" in found and "Maya, from Leeds" in found and "Leeds" in found
    assert "Maya," not in found and "Leeds." not in found
    assert len(spans(" ".join(f"w{i}" for i in range(200)))) < 60 * 8 + 1  # the last 60 words, 8 at most


def test_a_span_of_function_words_only_is_no_value_but_one_with_a_word_of_content_is():
    said = pool("I need all this. I'm 34.")
    assert said is not None
    texts = said.texts
    assert "all" not in texts and "I" not in texts and "this" not in texts
    assert "need all this" in texts  # its number: tests/data/phrases/numbers.en.json
    assert "this. I'm" not in texts and "need all this. I'm 34" not in texts  # a span ends with its sentence
    # the definition's language counts too: "para una" carries nothing in Spanish
    spanish = pool("quería pedir cita para una limpieza", language="es")
    assert spanish is not None and "para una" not in spanish.texts and "limpieza" in spanish.texts
    assert pool(None) is None and pool("   ") is None


def test_a_message_full_of_numbers_offers_twenty():
    # what numbers a phrase gives: tests/data/phrases/numbers.<language>.json
    said = pool(" ".join(str(n) for n in range(600)))
    assert said is not None and len(said.numbers) == 20  # the grammar stays small


def test_tool_results_are_values_too():
    said = pool("what do you have?", [{"slot": "19:30", "seats": 4, "ok": True}])
    assert said is not None and said.told == ("19:30", 4)
    clock = {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}
    assert from_words(clock, said) == {"enum": ["19:30"]} and from_words({"type": "integer"}, said) == {"enum": [4]}
    # what the user says comes first: "9 pm then" is 21:00, not the 22:00 a tool was asked about
    again = pool("Oh, OK. 9 pm then.", [{"time": "22:00", "available": False}])
    assert again is not None and from_words(clock, again) == {"enum": ["21:00"]}


def test_free_text_becomes_the_spans_a_shaped_value_the_least_span_that_has_it():
    said = pool("it's maya.chen@example.com, thanks")
    assert said is not None
    assert from_words({"type": "string", "maxLength": 80}, said) == {"enum": said.texts}
    # the least span that has an email: tests/data/phrases/emails.en.json
    # nothing fits a date said in words: the model writes it in the form asked for
    date = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
    in_words = pool("next Friday, the thirteenth")
    assert in_words is not None and from_words(date, in_words) == date
    # a message that says no date at all, not even in words, gives none to write (it is not invented)
    assert from_words(date, said) is None
    # ... unless the key holds a value already: it changes only to one the user said
    assert from_words(date, said, current="2026-06-13") == {"const": "2026-06-13"}


def test_a_branch_no_number_said_fits_cannot_be_written():
    # the numbers a party's size is offered: tests/data/phrases/counts.en.json, numbers.<language>.json
    said = pool("a table for 4, please")
    assert said is not None
    assert from_words({"type": "integer", "exclusiveMinimum": 8}, said) is None  # a large party: not said
    # null stays possible: the part that cannot be is dropped (20 nights, where 14 is the most: stay)
    large = {"anyOf": [{"type": "integer", "exclusiveMinimum": 8}, {"type": "null"}]}
    assert from_words(large, said) == {"type": "null"}


def test_a_guided_schema_offers_a_closed_set_alone():
    triage = example("support_triage")
    schema = guided_schema(triage, "triage", {})
    assert not valid(schema, reply("triage", {"category": "triage"}))  # what the 135M model wrote


def test_a_closed_set_the_words_name_none_of_keeps_its_collected_value():
    # the values the words name: tests/data/phrases/choices.en.json
    said = pool("I'd like the burr grinder, please")
    assert said is not None
    products = {"type": "string", "enum": ["espresso_machine", "burr_grinder"]}
    other = pool("whatever you recommend")
    assert other is not None
    assert from_words(products, other, current="espresso_machine") == {"const": "espresso_machine"}
    assert from_words({"type": "boolean"}, said) == {"type": "boolean"}  # a flag is the model's to judge


def test_a_price_tied_to_the_product_is_offered_only_with_the_consistent_pairs():
    order = example("order_flow")
    schema = guided_schema(order, "select_product", {}, said="Hi! I'd like to order the burr grinder.")
    moving = [b for b in branches(schema) if b["properties"]["target_state"]["enum"] == ["choose_quantity"]]
    assert len(moving) == 1  # the product the user named
    update = moving[0]["properties"]["context_update"]["properties"]
    assert update["product"] == {"const": "burr_grinder"} and update["unit_price"] == {"const": 129}
    grinder = {"product": "burr_grinder", "unit_price": 129, "customer_cancelled": None}
    assert not valid(schema, reply("select_product", grinder))
    assert valid(schema, reply("choose_quantity", grinder))
    # unsaid, every product is offered with its own price
    every = guided_schema(order, "select_product", {}, said="what do you sell?")
    frother = {"product": "milk_frother", "unit_price": 59, "customer_cancelled": None}
    assert valid(every, reply("choose_quantity", frother))
    assert not valid(every, reply("choose_quantity", {**frother, "unit_price": 129}))


def test_a_total_within_a_cent_is_computed_and_the_keys_it_reads_keep_their_values():
    order = example("order_flow")
    move_ = next(t for t in order.moves("shipping_method") if t.target_state == "review")
    context = {"unit_price": 129, "quantity": 2}
    schemas = {"shipping_method": {"type": "string", "enum": ["standard", "express"]}, "shipping_cost": {},
               "order_total": {}, "quantity": {"type": "number"}, "unit_price": {"type": "number"}}  # fmt: skip
    offers = derived_values(move_, context, schemas)
    by_method = {offer["shipping_method"]["const"]: offer for offer in offers}
    assert by_method["standard"]["shipping_cost"] == {"const": 0} and by_method["standard"]["order_total"] == {
        "const": 258
    }
    assert by_method["express"]["order_total"] == {"const": 277}
    assert by_method["express"]["quantity"] == {"anyOf": [{"const": 2}, {"type": "null"}]}  # not rewritten


def test_a_move_on_judgment_alone_is_not_offered_with_an_answer_to_the_state():
    claim = example("insurance_claim")
    schema = guided_schema(claim, "ask_policy", {}, said="my policy is HM-204518")
    assert not valid(schema, reply("handover", {"policy_number": "HM-204518"}))
    assert valid(schema, reply("identity", {"policy_number": "HM-204518"}))
    assert valid(schema, reply("handover", {"policy_number": None}))  # asked for a person, nothing else


def test_where_only_moves_on_judgment_lead_on_one_of_them_is_the_flow():
    # "the role is known: ask about the budget", with no condition: it is offered with the role written
    unconditional = {"target_state": "b", "priority": 100, "description": "The role is known"}
    person = {"target_state": "c", "priority": 20, "description": "The user asks for a person"}
    definition = definition_with([person, unconditional], required_context_keys=["role"])
    schema = guided_schema(definition, "a", {}, said="I run the support team")
    assert valid(schema, reply("b", {"role": "support team"}))


def test_flags_are_written_after_the_values_the_words_hold():
    schema = guided_schema(example("form_filling"), "confirm", {"name": "A", "email": "a@b.co", "age": 30})
    for branch in branches(schema):
        keys = list(branch["properties"]["context_update"]["properties"])
        assert keys[-2:] == ["confirmed", "cancelled"], keys


def test_a_staying_reply_whose_update_fulfils_a_move_takes_it():
    quiz = example("quiz")
    before = {"q1_correct": True, "q2_correct": True, "q1_answer": "Canberra", "q2_answer": "Mars"}
    after = {**before, "q3_answer": "Six", "q3_correct": True}
    assert fulfilled_move(quiz, "q3", before, after) == "passed"
    assert fulfilled_move(quiz, "q3", before, before) is None  # nothing new: the model chose to stay
    # a move that held before the update was declined: a later one the update fulfils is not taken
    talk = example("small_talk")
    declined = fulfilled_move(talk, "chatting", {"user_said_goodbye": True}, {"user_said_goodbye": True, "topic": "x"})
    assert declined is None


def test_a_guided_conversation_takes_the_move_its_update_fulfils_and_says_the_entered_states_message():
    quiz = example("quiz")
    context = {"q1_correct": True, "q2_correct": False, "q1_answer": "Canberra", "q2_answer": "Venus"}
    stay = reply("q3", {"q3_answer": "Six", "q3_correct": True}, "Right, six! Next question?")
    llm = ScriptedLLM([stay, reply("passed", {}, "You passed the quiz, well done!")])
    guided = llm_fsm.Conversation(quiz, llm, state="q3", context=context, guided=True)
    result = guided.send("Six!")
    assert (result.state, result.message, result.llm_calls) == ("passed", "You passed the quiz, well done!", 2)
    assert llm.requests[1].state == "passed" and "q3_answer" in (llm.requests[1].context or {})
    # the model chose to stay: plain mode keeps its choice, and its message with it
    plain = llm_fsm.Conversation(quiz, ScriptedLLM([stay]), state="q3", context=context)
    assert (plain.send("Six!").state, plain.context["q3_answer"]) == ("q3", "Six")
    # an opening has nothing the user said: a key it writes does not move it on
    form = example("form_filling")
    opening = llm_fsm.Conversation(
        form, ScriptedLLM([reply("collect_name", {"name": "Ann"}, "Hi! Your name?")]), guided=True
    )
    assert opening.start().state == "collect_name"


def test_a_state_with_nothing_to_collect_routes_the_users_message():
    workshop = example("workshop_signup")
    routed = guided_schema(workshop, "help", {"name": "Maya"}, back_to="ask_email", said="ok, that's fine")
    assert targets(routed) == {"ask_email"}  # its own way back: not a hand-over, which its prompt lists first
    # with no message to route (a resume) it may stay, as it may where there is something to collect
    assert "help" in targets(guided_schema(workshop, "help", {"name": "Maya"}, back_to="ask_email"))
    assert "ask_email" in targets(guided_schema(workshop, "ask_email", {"name": "Maya"}, said="it's maya@x.org"))
    # a message that only asks goes to the detour (a state whose move goes back), where the state has one
    assert targets(guided_schema(workshop, "ask_email", {"name": "Maya"}, said="how much is it?")) == {"help"}
    assert targets(guided_schema(workshop, "ask_email", {"name": "Maya"}, said="wait, what should I bring?")) == {
        "help"
    }
    asked_and_answered = guided_schema(workshop, "ask_email", {"name": "Maya"}, said="Is it paid? It's maya@x.org")
    assert "choose_session" in targets(asked_and_answered)  # it also states something: not only a detour


def test_a_guided_client_on_a_server_of_your_own_asks_for_the_dry_sampler(fake_openai, signup):
    import json

    from tests.llm.test_llm import client

    good = json.dumps(reply("ask_email", {"name": "Ann"}, "Your email?"))
    fake_openai.add(good, good, good)
    for options in ({"guided": True}, {}, {"guided": True, "extra_body": {"repeat_penalty": 1.1}}):
        llm = client(fake_openai, response_format="json_schema", **options)
        llm_fsm.Conversation(signup, llm).send("I'm Ann")
    guided, plain, own = fake_openai.requests
    assert guided["dry_multiplier"] == 0.8  # llama.cpp's DRY sampler: no "please, please, please"
    assert "dry_multiplier" not in plain  # a plain client sends what it always sent
    assert own["repeat_penalty"] == 1.1 and "dry_multiplier" not in own  # your own extra_body replaces it


def test_a_name_said_first_in_a_long_message_is_offered():
    long = "Hi, my name is Maya Chen. " + " ".join(["and then something else happened"] * 14)
    assert "Maya Chen" in spans(long) and len(long.split()) > 60


def test_a_collected_yes_can_become_no_and_an_enum_with_null_is_not_pinned():
    answer = {"type": "string", "enum": ["yes", "no"]}
    said = pool("no, not yes... I mean NO")
    assert said is not None and from_words(answer, said, current="yes") == {**answer, "enum": ["yes", "no"]}
    assert from_words(answer, pool("no") or pool("x"), current="yes") == {**answer, "enum": ["no"]}  # type: ignore[arg-type]  # pool("no") is not None
    sizes = {"enum": ["small", "large", None]}
    assert from_words(sizes, pool("whatever") or pool("x")) == sizes  # type: ignore[arg-type]  # not None


def test_a_chat_whose_only_way_out_ends_the_conversation_may_stay():
    chat = {"target_state": "b", "priority": 10, "description": "The user leaves"}
    schema = guided_schema(definition_with([chat]), "a", {}, said="I went hiking today")
    assert targets(schema) == {"a", "b"}  # never a goodbye forced on every message


def test_a_state_whose_move_waits_on_code_or_has_no_way_back_may_still_stay():
    claim = example("insurance_claim")
    nowhere = guided_schema(claim, "help", {"policy_number": "HM-204518"}, said="ok, thanks")
    assert "help" in targets(nowhere)  # no way back: staying, not a forced hand-over or cancellation
    routed = guided_schema(claim, "help", {"policy_number": "HM-204518"}, back_to="damage", said="ok, thanks")
    assert targets(routed) == {"damage"}


def test_a_nullable_declared_type_is_narrowed_like_its_type():
    data = {"name": "t", "initial_state": "a", "context_schema": {"k": {"type": ["integer", "null"]}},
            "states": {"a": {"id": "a", "purpose": "p", "transitions": [move("b", {">": [{"var": "k"}, 3]})]},
                       "b": {"id": "b", "purpose": "end", "transitions": []}}}  # fmt: skip
    schema = guided_schema(llm_fsm.FSMDefinition.model_validate(data), "a", {}, said="I have 2")
    assert valid(schema, reply("a", {"k": 2})) and not valid(schema, reply("b", {"k": 2}))


def test_the_dry_sampler_goes_only_to_a_server_on_this_machine_or_your_network():
    from llm_fsm.llm.litellm_client import _local_server

    assert _local_server("openai/smollm2", "http://127.0.0.1:8080/v1")
    assert _local_server("openai/smollm2", "http://llama:8080/v1")  # a container's name
    assert not _local_server("openai/gpt-4o-mini", "https://api.openai.com/v1")
    assert not _local_server("groq/llama3", "http://127.0.0.1:8080/v1")


def test_a_question_states_nothing_and_an_answer_said_unsure_still_does():
    asked = pool("Why do you need all this?")
    assert asked is not None and asked.numbers == []  # its texts: tests/data/phrases/texts.en.json
    # free text has nothing to come from: the key is left unwritten (it was "do you need all this" as a name)
    assert from_words({"type": "string", "maxLength": 80}, asked) is None
    assert from_words({"anyOf": [{"type": "string"}, {"type": "null"}]}, asked) == {"type": "null"}
    # "Sydney?" is an answer, said unsure; "Okay, fair enough." an acknowledgement, no date of birth; what follows a
    # question is stated, what it names is not: tests/data/phrases/texts.en.json, choices.en.json


def test_a_confirmation_is_the_user_s_yes_or_no_and_another_flag_needs_its_words():
    definition = definition_with(
        [
            {**move("b", {"==": [{"var": "confirmed"}, True]}), "description": "The user confirms"},
            {**move("c", {"==": [{"var": "user_said_goodbye"}, True]}), "description": "The user says goodbye"},
        ],
        writable_keys=["confirmed", "user_said_goodbye"],
    )

    def moves(said: str) -> set[str]:
        return targets(guided_schema(definition, "a", {}, said=said))

    assert moves("Looks good, go ahead.") == {"b"}  # a yes: confirmed is written, and true
    assert "b" not in moves("Oh no, the email is wrong.")  # a no: never confirmed
    assert "c" not in moves("Hey! I'm Maya.")  # nothing about leaving: no goodbye
    assert "c" in moves("I've got to run. Bye!") and "a" not in moves("I've got to run. Bye!")  # named: true
    assert "c" in moves("no, I'm not leaving, bye") and "a" in moves("no, I'm not leaving, bye")  # with a no: either
    said = reply("a", {"confirmed": False, "user_said_goodbye": False})
    assert not valid(guided_schema(definition, "a", {}, said="Yes, that's all correct now."), said)


def test_a_value_the_words_give_one_move_is_not_invented_by_another():
    # a corrected email: staying would need one without a dot; the user wrote one with a dot
    form = example("form_filling")
    schema = guided_schema(form, "collect_email", {"name": "maya chen"}, said="maya.chen@exmaple.com")
    assert valid(schema, reply("collect_age", {"email": "maya.chen@exmaple.com"}))
    assert not valid(schema, reply("collect_email", {"email": "maya chen@exmaple-12345"}))  # what the model wrote
    assert valid(schema, reply("collect_email", {"email": None}))


def test_a_guided_message_opens_like_no_earlier_message():
    import re

    from llm_fsm.guided.patterns import not_opening_like

    earlier = ["Hi! I'll set up your Northwind profile.", "jon"]
    schema = guided_schema(example("form_filling"), "collect_email", {"name": "maya"}, said="hi", earlier=earlier)
    message = schema["properties"]["message"]
    opening = re.compile(message["pattern"])
    assert not opening.match("Hi! I'll set up your Northwind profile.")  # what the 135M model wrote again
    # in any case, with other spaces and punctuation: the opening's first 12 letters and digits
    assert not opening.match("hi, I’ll setup your profile") and not opening.match("😀 Hi! I'll set up your")
    # a short earlier message is avoided as a whole only: "jon" again, not "jonas"
    assert not opening.match("Jon!") and opening.match("jonas") and opening.match("jo")
    assert opening.match("Hi Maya! What's your email?") and opening.match("")
    assert opening.match("Hi! I'll set it up") and not opening.match("x" * 241)  # still bounded
    assert (
        not_opening_like([], 240) is None
        and "pattern"
        not in guided_schema(example("form_filling"), "collect_email", {}, said="hi")["properties"]["message"]
    )
    assert not_opening_like(["...!"], 240) is None  # no letters: nothing to avoid


def test_a_collected_value_that_breaks_a_move_is_not_kept_by_writing_null():
    # 120 employees collected: "fewer than 50" cannot hold by leaving company_size unwritten (null keeps 120)
    definition = definition_with(
        [
            move("b", {">=": [{"var": "size"}, 50]}, keys=["timeline"]),
            move("c", {"<": [{"var": "size"}, 50]}, keys=["timeline"]),
        ],
        required_context_keys=["timeline"],
        writable_keys=["timeline", "size"],
    )
    schema = guided_schema(definition, "a", {"size": 120}, said="next quarter ideally")
    assert "b" in targets(schema) and "c" not in targets(schema)
    # a number said that fits changes it
    assert "c" in targets(guided_schema(definition, "a", {"size": 120}, said="next quarter, we're 30 now"))


def test_a_message_that_only_asks_chooses_nothing_from_a_closed_set():
    sizes = {"type": "string", "enum": ["small", "medium", "large"]}
    asked = pool("whats the difference between medium and large?")
    assert asked is not None and asked.asked and from_words(sizes, asked) is None
    vague = pool("the big one")
    assert vague is not None and from_words(sizes, vague) == sizes  # the model normalizes what it names


def test_a_closed_set_the_words_name_none_of_is_offered_whole_only_where_it_is_asked():
    # SGD (benchmarks/SGD.md): a closed set offered whole beside a question it does not answer had its first value
    # written ("has_seating_outdoors": "True") on 371 slots of the dev subset; one the state asks is still answered
    # in other words ("the big one" for a size) and the model normalizes it
    sizes, seating = {"type": "string", "enum": ["small", "large"]}, {"type": "string", "enum": ["indoors", "outside"]}
    definition = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "t",
            "initial_state": "a",
            "context_schema": {"size": sizes, "seating": seating},
            "states": {
                "a": {
                    "id": "a",
                    "purpose": "p",
                    "required_context_keys": ["size"],
                    "writable_keys": ["size", "seating"],
                    "transitions": [move("b", keys=["size"])],
                },
                "b": {"id": "b", "purpose": "end", "transitions": []},
            },
        }
    )
    updates = [
        branch["properties"]["context_update"]["properties"]
        for branch in branches(guided_schema(definition, "a", {}, said="the big one, please"))
    ]
    assert updates and all(update["seating"] == {"type": "null"} for update in updates)  # asked by nothing here
    assert any(update["size"].get("enum") == sizes["enum"] for update in updates)  # asked: the model names it
    outside = branches(guided_schema(definition, "a", {}, said="the big one, outside"))
    named = [branch["properties"]["context_update"]["properties"]["seating"] for branch in outside]
    assert named and all(value["anyOf"][0] == {**seating, "enum": ["outside"]} for value in named)  # or null
    assert from_words(sizes, pool("the big one"), asked=False) is None  # type: ignore[arg-type]
    assert from_words({"enum": [True, False]}, pool("fine"), asked=False) == {"enum": [True, False]}  # type: ignore[arg-type]


def test_a_request_that_is_not_a_question_states_something():
    # that it does not ask, and a question in the definition's language: tests/data/phrases/asks.<language>.json
    for request in ("Can I get a refund?", "Can I come at 7pm?", "Could you book it for Ana?"):
        said = pool(request)
        assert said is not None and said.texts, request


def test_a_day_alone_is_of_the_month_collected():
    # the dates said with a month's name: tests/data/phrases/dates.<language>.json
    iso = {"type": "string", "format": "date"}
    again = pool("make it the 15th instead")
    assert again is not None and from_words(iso, again, current="2027-03-14") == {"enum": ["2027-03-15"]}
    spans_only = pool("make it later")
    assert spans_only is not None and from_words(iso, spans_only) is None  # no span is a date, none said


def test_a_state_that_asks_for_nothing_routes_to_its_moves_that_already_hold():
    # a change desk: every answer is there and valid, the user names the new one: back to the review
    hotel = llm_fsm.load("benchmarks/unseen/hotel_booking.json")
    context = {"check_in": "2027-03-14", "nights": 10, "guests": 2, "field_to_change": "check_in", "confirmed": False}
    schema = guided_schema(hotel, "change_answer", context, said="make it the 15th instead")
    assert targets(schema) == {"review"}
    assert valid(schema, reply("review", {"check_in": "2027-03-15", "nights": None, "guests": None}))


def test_a_guided_tool_request_takes_its_arguments_from_what_was_said_then_from_what_was_collected():
    from llm_fsm.guided.tools import guided_arguments

    params = {
        "type": "object",
        "properties": {
            "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
            "time": {"type": "string", "pattern": "^([01]\\d|2[0-3]):[0-5]\\d$"},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 8},
            "notes": {"type": "object"},
        },
    }
    call = {"type": "object", "properties": {"name": {"enum": ["check"]}, "arguments": params}}
    schema = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": call}}}
    context = {"date": "2026-06-13", "time": "22:00", "party_size": 4}
    out = guided_arguments(schema, "Oh, OK. 9 pm then.", context)
    arguments = out["properties"]["tool_calls"]["items"]["properties"]["arguments"]["properties"]
    # 21:00 as the user just said, not the 22:00 collected (a shaped value said now); the date and the party as
    # collected
    assert arguments["time"] == {"enum": ["21:00"]} and arguments["date"] == {"enum": ["2026-06-13"]}
    assert arguments["party_size"] == {"enum": [4]} and arguments["notes"] == {"type": "object"}
    assert guided_arguments(schema, None, context) == schema  # a resume: nothing said, the tool as declared


def test_a_guided_memory_slot_holds_what_the_user_said_or_nothing():
    insurance = example("insurance_claim")
    script = [reply("ask_policy", {}, "Hi")] * 2
    llm = ScriptedLLM(script)
    conversation = llm_fsm.Conversation(insurance, llm, guided=True)
    conversation.start()
    conversation.send("Hi, my policy is HM-204518. I'm at work until 5pm, call me after.")
    schema = llm.requests[-1].strict_schema
    branch = branches(schema)[0]
    slot = branch["properties"]["memory_update"]["properties"]["preferences"]
    said = {"transition": {**branch_reply(branch), "memory_update": {"preferences": "I'm at work until 5pm"}}}
    assert valid(schema, {**said, "message": "Thanks!"})
    looping = {"transition": {**branch_reply(branch), "memory_update": {"preferences": "10.1.1.2.1.0.0.1.3.3"}}}
    assert not valid(schema, {**looping, "message": "Thanks!"}), slot  # what the 135M model wrote, to the limit


def branch_reply(branch: dict[str, Any]) -> dict[str, Any]:
    """A reply's transition that the branch takes, every key null."""
    keys = branch["properties"]["context_update"]["properties"]
    return {"context_update": dict.fromkeys(keys), "target_state": branch["properties"]["target_state"]["enum"][0]}


def test_a_guided_message_loses_a_loop_and_the_prompt_s_tags_and_nothing_else():
    from llm_fsm.guided.schema import tidy

    looping = "Happy Friday! I'm happy to see you. I'm happy, I'm happy. I'm happy.</assistant>"
    assert tidy(looping) == "Happy Friday! I'm happy to see you. I'm happy."
    assert tidy("please, please, please call me") == "please."
    # a loop of 13 words, cut at the token limit (a plain reply): said once, up to its sentence end
    long = "You can book it for £10.00. I'm unable to provide details. Please book the workshop for £10.00. "
    assert (
        tidy("Sure. " + long * 3 + "I'm unable") == "Sure. You can book it for £10.00. I'm unable to provide details."
    )
    for fine in ("A normal message. Yes, yes.", "What's your name?", "¿Cuál es tu nombre?"):
        assert tidy(fine) == fine

    # and the turn sends the user the tidied message
    conversation, _ = scripted_conversation(
        "form_filling",
        [reply("collect_name", {}, "Hi!"), reply("collect_email", {"name": "Maya"}, "Thanks. Thanks. Thanks.")],
        guided=True,
    )
    conversation.start()
    assert conversation.send("maya").message == "Thanks."


def test_words_that_answer_another_question_and_say_no_number_give_a_number_key_no_value():
    # "im employed full time, nurse at the county hospital" answers the status and states no income: offered any
    # number, a 135M model wrote the loan amount it had collected (18000) as the income and moved on
    definition = definition_with(
        [move("b", {">=": [{"var": "income"}, 0]}, keys=["status", "income"])],
        required_context_keys=["status", "income"],
        writable_keys=["status", "income"],
    )
    nurse = guided_schema(definition, "a", {}, said="im employed full time, nurse at the county hospital")
    assert targets(nurse) == {"a"}
    assert "b" in targets(guided_schema(definition, "a", {}, said="employed, 42k a year"))
    assert "b" in targets(guided_schema(definition, "a", {}, said="employed, about fifty thousand"))  # in words
    # all the state asks is the number: "none" is the model's to write (0), not a question left open forever
    alone = definition_with([move("b", {">=": [{"var": "claims"}, 0]}, keys=["claims"])], writable_keys=["claims"])
    assert "b" in targets(guided_schema(alone, "a", {}, said="never made one"))


def test_a_collected_number_to_correct_is_offered_beside_the_said_ones():
    # at a read-back, "about 250 a month" was written over the income: the collected value stays on offer, first
    number = {"type": "number", "minimum": 0}
    assert from_words(number, pool("just my credit card, about 250 a month"), current=42000, keep=True) == {
        "enum": [42000, 250]
    }
    assert from_words(number, pool("about 250 a month"), current=42000) == {"enum": [250]}  # the state's own key


def test_a_number_said_beside_a_key_name_is_not_offered_to_another_key():
    # "the rent is 1,100 and the deposit is 2k" offered both numbers to both keys (a stranger's audit)
    keys = ["monthly_rent", "deposit_amount", "household_size"]
    definition = definition_with(
        [move("b", {"and": [{">=": [{"var": key}, 0]} for key in keys]}, keys=keys)],
        required_context_keys=keys,
        writable_keys=keys,
    )
    paired = guided_schema(definition, "a", {}, said="the rent is 1,100 and the deposit is 2k, 3 of us")
    assert [_offered(paired, key) for key in keys] == [[1100], [2000], [3]]
    said_apart = guided_schema(definition, "a", {}, said="rent's 1100 deposit 2000")
    assert [_offered(said_apart, key) for key in keys[:2]] == [[1100], [2000]]
    # every number another key's: this one may still have any (a wrong pairing never leaves a key without one)
    assert _offered(said_apart, "household_size") == [1100, 2000]
    unnamed = guided_schema(definition, "a", {}, said="1100 and 2000")  # naming no key: any number is any key's
    assert [_offered(unnamed, key) for key in keys] == [[1100, 2000]] * 3
    # a correction "was X, now Y": the number said beside the name comes first, and the new one is on offer too
    collected = {"monthly_rent": 1100, "deposit_amount": 2000}
    corrected = guided_schema(definition, "a", collected, said="no, deposit was 2000 but it's 1800 now")
    assert 1800 in _offered(corrected, "deposit_amount")


def test_an_address_that_fits_another_key_is_not_offered_as_free_text():
    # at form_filling's read-back, "It should be maya.chen@example.com" was written over the name too
    definition = example("form_filling")
    collected = {"name": "Maya Chen", "email": "maya@x.co", "age": 30}
    schema = guided_schema(definition, "confirm", collected, said="It should be maya.chen@example.com")
    assert _offered(schema, "name") == ["Maya Chen"]
    assert _offered(schema, "email") == ["maya.chen@example.com"]
    named = guided_schema(definition, "confirm", collected, said="the name should be Maya Li")
    assert "Maya Li" in _offered(named, "name")
    keys = ["full_name", "email", "age"]
    own = llm_fsm.FSMDefinition.model_validate(
        {
            "name": "t",
            "initial_state": "a",
            "context_schema": {"email": {"type": "string", "format": "email"}, "age": {"type": "integer"}},
            "states": {
                "a": {"id": "a", "purpose": "p", "required_context_keys": keys, "transitions": [move("b", keys=keys)]},
                "b": {"id": "b", "purpose": "end", "transitions": []},
            },
        }
    )
    with_age = guided_schema(own, "a", {}, said="It should be maya.chen@example.com, age 34")  # a number named too
    assert _offered(with_age, "age") == [34]
    assert not any("@" in str(value) for value in _offered(with_age, "full_name"))


def test_a_date_in_digits_is_offered_to_free_text_as_written():
    # the dates said in digits, and a date's or a time's digits being no number: tests/data/phrases/days.*.json,
    # numbers.*.json; a date key offered them: codes.en.json
    assert from_words({"type": "string", "maxLength": 80}, pool("06/13/2027")) == {"enum": ["06/13/2027"]}  # a name


def test_a_key_with_no_schema_takes_the_shape_of_the_tool_argument_of_its_name():
    # restaurant_booking declares no context_schema; its tools take date as YYYY-MM-DD: "Oh, OK. 9 pm then" at the
    # date and time question had a 135M model write "21:00" as the date, and the availability check never matched
    from llm_fsm.guided.schema import value_schema

    definition = example("restaurant_booking")
    assert value_schema(definition, definition.states["date_time"], "date")["pattern"] == "^\\d{4}-\\d{2}-\\d{2}$"
    collected = {"party_size": 4, "date": "2027-06-13", "day_of_week": "Friday", "time": "22:00"}
    schema = guided_schema(definition, "date_time", collected, said="Oh, OK. 9 pm then.")
    assert _offered(schema, "date") == ["2027-06-13"] and _offered(schema, "time") == ["21:00"]


def test_a_guided_move_that_waits_on_a_tool_the_turn_still_offers_is_left_out_until_the_tool_answers():
    # "Oh, OK. 9 pm then.": a 135M model moved to the contact details while the free table the move needs was the
    # one check_availability had found for 22:00; the move is offered once the tool has answered for 21:00
    course = scorecard_course(ROOT / "fsm_definitions" / "restaurant_booking.json")
    llm = course.scripted()
    llm.tool_calling = "json"
    conversation = llm_fsm.Conversation(course.definition, llm, hooks=course.hooks, guided=True)
    conversation.start()
    for line in course.lines[:2]:
        conversation.send(line)
    before = len(llm.requests)
    conversation.send(course.lines[2])
    first, after_the_tool = llm.requests[before], llm.requests[before + 1]
    reply, tool_form = first.strict_schema["anyOf"]
    assert "contact_details" not in targets(reply) and "tool_calls" in tool_form["properties"]
    assert "contact_details" in targets(after_the_tool.strict_schema)
    assert conversation.state == "contact_details"
