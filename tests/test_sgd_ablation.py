"""benchmarks/sgd/ablation.py: each family of guided mode's hand-written rules, switched off, changes what guided
mode offers as its rule says, and nothing else changes (offline: guided schemas, scripted models)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import llm_fsm
from benchmarks.sgd import run
from benchmarks.sgd.ablation import FAMILIES, listing, without
from benchmarks.sgd.data import DATA
from llm_fsm.guided.dates import dates
from llm_fsm.guided.schema import guided_schema
from llm_fsm.llm import LLMRequest
from tests.definition.test_corrections import BOOKED, _offered, dentist
from tests.guided.test_guided import reply, scripted_conversation, valid
from tests.guided.test_guided_tool_moves import READY, first_request, found, pharmacy, reply_and_tools
from tests.guided.test_guided_words import targets


def form(keys: dict[str, Any], moves: list[dict[str, Any]] | None = None) -> llm_fsm.FSMDefinition:
    """A state ``ask`` that collects ``keys`` (their schemas) and moves on to ``done`` once all are given."""
    given = {"description": "given", "requires_context_keys": list(keys)}
    moves = moves or [{"target_state": "done", "conditions": [given]}]
    ends = {move["target_state"] for move in moves}
    return llm_fsm.load(
        {
            "name": "t",
            "initial_state": "ask",
            "context_schema": keys,
            "states": {
                "ask": {"purpose": "Ask.", "required_context_keys": list(keys), "transitions": moves},
                **{end: {"purpose": f"Say {end}.", "transitions": []} for end in ends},
            },
        }
    )


def is_(key: str, value: Any) -> dict[str, Any]:
    return {"description": key, "logic": {"==": [{"var": key}, value]}}


TEXT = {"type": "string"}
NAME = form({"name": TEXT})


def said(definition: llm_fsm.FSMDefinition, text: str, **options: Any) -> dict[str, Any]:
    return guided_schema(definition, definition.initial_state, options.pop("context", {}), said=text, **options)


# each family's case: what guided mode does with the family on (off=False) or off, asserted, and returned to compare


def spans(off: bool) -> Any:
    schema = said(NAME, "I'm Maya Chen")
    assert valid(schema, reply("done", {"name": "Maya Chen"}))
    assert valid(schema, reply("done", {"name": "Bob"})) == off  # free text, where the words' spans were offered
    return schema


def function_words(off: bool) -> Any:
    schema = said(NAME, "okay, fair enough")
    assert valid(schema, reply("done", {"name": "fair enough"})) == off
    return schema


def questions(off: bool) -> Any:
    schema = said(NAME, "Why do you need my name?")
    assert valid(schema, reply("done", {"name": "need my name"})) == off
    return schema


def dates_(off: bool) -> Any:
    schema = said(form({"date": TEXT}), "on March 14th")
    (day,) = dates("March 14th")
    assert "March 14th" in _offered(schema, "date") and (day in _offered(schema, "date")) != off
    return schema


def times(off: bool) -> Any:
    schema = said(form({"time": TEXT}), "at 9 pm")
    assert "9 pm" in _offered(schema, "time") and ("21:00" in _offered(schema, "time")) != off
    return schema


def numbers(off: bool) -> Any:
    schema = said(form({"guests": {"type": "integer"}}), "a table for 4")
    assert valid(schema, reply("done", {"guests": 4}))
    assert valid(schema, reply("done", {"guests": 7})) == off  # any number, where 4 was offered
    return schema


def no_number(off: bool) -> Any:
    schema = said(form({"job": TEXT, "income": {"type": "number"}}), "a nurse at the county hospital")
    assert valid(schema, reply("done", {"job": "a nurse", "income": 50000})) == off
    return schema


def codes(off: bool) -> Any:
    code = said(form({"ref": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{8}$"}}), "it's pf 4471 9902")
    assert valid(code, reply("done", {"ref": "PF44719902"})) != off
    phone = said(form({"phone": {"type": "string", "pattern": "^[0-9 ]{7,14}$"}}), "call me on 555 123 4567")
    assert "123 4567" in _offered(phone, "phone") and ("555 123 4567" in _offered(phone, "phone")) != off
    return code, phone


def flags(off: bool) -> Any:
    human = {"target_state": "human", "conditions": [is_("wants_human", True)]}
    moves = [{"target_state": "done", "conditions": [{"description": "n", "requires_context_keys": ["name"]}]}, human]
    definition = form({"name": TEXT, "wants_human": {"type": "boolean"}}, moves)
    schema = said(definition, "my name is Maya")  # nothing about a human: the flag is false
    assert ("human" in targets(schema)) == off
    return schema


def yes_no(off: bool) -> Any:
    definition = form({"confirmed": {"type": "boolean"}}, [
        {"target_state": "done", "conditions": [is_("confirmed", True)]},
        {"target_state": "redo", "conditions": [is_("confirmed", False)]},
    ])  # fmt: skip
    schema = said(definition, "yes please")  # the state's one question, answered yes
    assert "done" in targets(schema) and ("redo" in targets(schema)) == off
    return schema


def named_values(off: bool) -> Any:
    schema = said(form({"size": {"type": "string", "enum": ["small", "large"]}}), "the large one please")
    assert valid(schema, reply("done", {"size": "small"})) == off
    price = {"if": [{"==": [{"var": "product"}, "basic"]}, 10, 20]}
    tied = {"target_state": "done", "conditions": [{"description": "p", "logic": {"==": [{"var": "price"}, price]}}]}
    product = {"type": "string", "enum": ["basic", "deluxe"]}
    offers = said(form({"product": product, "price": {"type": "number"}}, [tied]), "the deluxe one")
    assert valid(offers, reply("done", {"product": "deluxe", "price": 20}))
    assert valid(offers, reply("done", {"product": "basic", "price": 10})) == off  # the pair the words name
    return schema, offers


def key_names(off: bool) -> Any:
    schema = said(form({"rent": {"type": "number"}, "deposit": {"type": "number"}}), "rent is 1100, deposit 2000")
    assert _offered(schema, "rent") == ([1100, 2000] if off else [1100])
    return schema


def addresses(off: bool) -> Any:
    schema = said(form({"name": TEXT, "email": {"type": "string", "format": "email"}}), "maya.chen@example.com")
    assert _offered(schema, "email") == ["maya.chen@example.com"]
    assert ("maya.chen@example.com" in _offered(schema, "name")) == off
    return schema


def corrections(off: bool) -> Any:
    text = "the service should be a check-up actually"  # names the service: the time stays as collected
    schema = guided_schema(dentist(corrections=True), "read_back", BOOKED, said=text)
    assert ("a check-up" in _offered(schema, "time")) == off and ("10:00" in _offered(schema, "time")) != off
    return schema


def tool_results(off: bool) -> Any:
    clock = form({"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}})
    schema = said(clock, "that works", results=[{"slot": "19:30", "seats": 4}])
    assert _offered(schema, "time") == ([] if off else ["19:30"])
    return schema


def tool_form(off: bool) -> Any:
    _, call = reply_and_tools(first_request(pharmacy([READY]), "Refill RX12345 please"))
    another = {"tool_calls": [{"name": "lookup_rx", "arguments": {"rx_number": "RX99999"}}]}
    assert valid(call, another) == off  # the number said, or any the parameter's pattern takes
    return call


def tool_waits(off: bool) -> Any:
    answer, _ = reply_and_tools(first_request(pharmacy([READY, found({"!": {"var": "rx.found"}})]), "Refill RX12345"))
    assert ("not_found" in targets(answer)) == off  # not found before the lookup has answered
    return answer


def openings(off: bool) -> Any:
    schema = said(NAME, "Maya", earlier=["Hello! What is your name?"])
    assert ("pattern" in schema["properties"]["message"]) != off
    return schema


def loops(off: bool) -> Any:
    looping = "I'm happy. I'm happy. I'm happy. I'm happy."
    conversation, _ = scripted_conversation("form_filling", [reply("collect_name", {}, looping)], guided=True)
    message = conversation.start().message
    assert message == (looping if off else "I'm happy.")
    return message


def fulfilled(off: bool) -> Any:
    script = [reply("collect_name", {}, "Hi! Your name?"), reply("collect_name", {"name": "Maya Chen"}, "Name?")]
    conversation, _ = scripted_conversation(
        "form_filling", [*script, reply("collect_email", {}, "Email?")], guided=True
    )
    conversation.start()
    result = conversation.send("maya chen")  # the reply stays, and its update fulfils the move to the email
    assert result.state == ("collect_name" if off else "collect_email")
    return result.state, result.message


def dry(off: bool) -> Any:
    client = llm_fsm.LiteLLMClient("openai/smollm2", api_base="http://127.0.0.1:9/v1", guided=True)
    params = client._params(LLMRequest([{"role": "user", "content": "x"}]), stream=False)
    assert ("dry_multiplier" in params.get("extra_body", {})) != off
    return params


def words(off: bool) -> Any:
    return spans(off), flags(off), function_words(off)  # free text and flags alike as the schema says them


CASES: dict[str, Callable[[bool], Any]] = {
    "spans": spans, "function_words": function_words, "questions": questions, "dates": dates_, "times": times,
    "numbers": numbers, "no_number": no_number, "codes": codes, "flags": flags, "yes_no": yes_no,
    "named_values": named_values, "key_names": key_names, "addresses": addresses, "corrections": corrections,
    "tool_results": tool_results, "tool_form": tool_form, "tool_waits": tool_waits, "openings": openings,
    "loops": loops, "fulfilled": fulfilled, "dry": dry, "words": words,
}  # fmt: skip


def test_every_family_has_a_case_and_a_line_that_says_where_it_is():
    assert list(CASES) == list(FAMILIES)
    for name, line in FAMILIES.items():
        assert "\n" not in line and "(" in line, name  # its module.function, in parentheses
        assert name in listing()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_off_changes_what_guided_mode_offers_as_its_rule_says(family: str):
    on = CASES[family](False)
    with without(family) as stack:
        assert stack is not None
        off = CASES[family](True)
    assert off != on
    assert CASES[family](False) == on  # put back as it was


def test_with_no_family_off_nothing_changes_and_families_nest_and_combine():
    on = {family: case(False) for family, case in CASES.items()}
    with without():
        assert {family: case(False) for family, case in CASES.items()} == on
    with without("dates"), without("times", "times"):  # nested, and a family named twice
        dates_(True)
        times(True)
        spans(False)
    with without(*FAMILIES):
        assert valid(said(NAME, "I'm Maya Chen"), reply("done", {"name": "Bob"}))
    assert {family: case(False) for family, case in CASES.items()} == on


def test_an_unknown_family_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="no family 'date'.*dates"):
        without("dates", "date")
    spans(False)  # nothing was left patched


def test_the_runner_lists_the_families_and_takes_them_only_with_guided(capsys: pytest.CaptureFixture[str]):
    assert run.main(["--without", "list"]) == 0
    assert capsys.readouterr().out.strip() == listing()
    for argv in (["--without", "date"], ["--without", "dates"]):  # unknown; not guided
        with pytest.raises(SystemExit):
            run.main(argv)
    assert "--without turns off rules of guided mode" in capsys.readouterr().err


@pytest.mark.skipif(not DATA.is_dir(), reason="SGD's dev split is not beside the checkout")
def test_the_runner_records_the_families_it_ran_without(tmp_path: Any):
    out = tmp_path / "out.json"
    argv = ["--guided", "--without", "dates", "--without", "times", "--service", "Alarm_1", "--json", str(out)]
    assert run.main([*argv, "--mode", "own"]) == 0
    assert json.loads(out.read_text())["setup"]["without"] == ["dates", "times"]
