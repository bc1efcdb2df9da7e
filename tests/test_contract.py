from __future__ import annotations

import json

import pytest

from llm_fsm.contract import parse_reply, reply_schema, writable_keys
from llm_fsm.errors import ReplyFormatError, ReplyTruncated
from tests.conftest import reply

VALID = reply("ask_email", "Thanks! Your email?", name="Ann")
TEXT = json.dumps(VALID)


@pytest.mark.parametrize(
    "raw",
    [
        TEXT,
        f"```json\n{TEXT}\n```",
        f"```\n{TEXT}\n```",
        f"Sure! Here is my answer:\n{TEXT}\nHope that helps.",
        f"<think>The user gave a name {{not json}}, so...</think>\n{TEXT}",
        f"<thinking>hmm</thinking>{TEXT}",
        TEXT.replace('"message"', "'message'"),  # single quotes: repaired
        TEXT[:-1] + ",}",  # trailing comma: repaired
    ],
)
def test_tolerant_extraction(raw):
    parsed = parse_reply(raw)
    assert parsed.transition.target_state == "ask_email"
    assert parsed.transition.context_update == {"name": "Ann"}
    assert parsed.message.startswith("Thanks! Your email?")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "empty"),
        ("I cannot answer that.", "not a JSON object"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"transition": {"target_state": "x"}}', "message"),
        ('{"transition": {"target_state": 5}, "message": "hi"}', "target_state"),
        ('{"transition": "x", "message": "hi"}', "transition"),
        ('{"message": ""}', "message"),
    ],
)
def test_unusable_replies_say_what_is_wrong(raw, why):
    with pytest.raises(ReplyFormatError, match=why):
        parse_reply(raw)


CUT = json.dumps(reply("ask_guests", "Great, how many guests will join you?", date="Friday"))


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (TEXT[:-2], "in the middle of a string"),  # json-repair would close it: the end would be invented
        (CUT[: CUT.index("how many g") + len("how many g")], "in the middle of a string"),
        (CUT[: CUT.index(', "message"')], "left open"),
        (CUT[:-1], "left open"),  # only the last brace is missing
        (f"```json\n{CUT[:40]}", "in the middle of a string"),  # a fenced block cut off before its fence
        (f"I set {{guests}} to 4.\n{CUT[:-30]}", "in the middle of a string"),  # a brace in the prose first
        (CUT.replace('"', "'")[:-25].replace("how many", "how} many"), "in the middle of a string"),  # single quotes
    ],
)
def test_a_reply_that_stops_short_is_refused_never_completed(raw, where):
    with pytest.raises(ReplyTruncated, match=where):
        parse_reply(raw)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"target_state": "ask_guests", "context_update": {"date": "Friday"}, "message": "Great, how many guests?"}',
         'inside a "transition" object'),
        ('{"transition": null, "message": "Great, how many guests?"}', '"transition" is null'),
        ('{"message": "Great, how many guests?"}', 'no "transition"'),
        ('{"transition": {"target_state": "a"}, "context_update": {"x": 1}, "message": "m"}',
         "context_update belongs inside"),
        ('{"transition": {"target_state": "a", "message": "m"}, "message": "m"}', '"message" belongs at the top'),
    ],
)  # fmt: skip
def test_a_reply_of_another_shape_is_refused_never_taken_for_a_stay(raw, why):
    with pytest.raises(ReplyFormatError, match=why) as caught:
        parse_reply(raw)
    assert "target_state" in str(caught.value), "the correction shows the shape to use"


def test_a_null_update_means_empty():
    parsed = parse_reply('{"transition": {"target_state": "a", "context_update": null}, "message": "m"}')
    assert parsed.transition.context_update == {}


def test_reply_schema_enumerates_allowed_targets(signup):
    state = signup.states["ask_email"]
    schema = reply_schema(state, strict=True)
    transition = schema["properties"]["transition"]["properties"]
    assert transition["target_state"]["enum"] == ["ask_email", "ask_name", "done"]
    update = transition["context_update"]
    assert update["additionalProperties"] is False and update["required"] == ["email", "approved"]
    assert reply_schema(state, strict=False)["properties"]["transition"]["properties"]["context_update"] == {
        "type": "object"
    }
    assert writable_keys(state) == ["email", "approved"]
    assert writable_keys(state, signup.handler_only_keys) == ["email"]
    protected = reply_schema(state, strict=True, protected=signup.handler_only_keys)
    assert protected["properties"]["transition"]["properties"]["context_update"]["required"] == ["email"]


def test_only_leading_thinking_is_stripped():
    inner = json.dumps(reply("ask_name", "<think>this is my text</think> and <thinking>more"))
    assert parse_reply(f"<think>plan {{x}}</think>\n<thinking>again</thinking>{inner}").message.startswith(
        "<think>this"
    )
    with pytest.raises(ReplyFormatError, match="empty"):
        parse_reply("<think>still thinking when the reply was cut off")


def test_deeply_nested_replies_are_refused_not_recursed_into():
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    with pytest.raises(ReplyFormatError):
        parse_reply('{"transition": {"target_state": "x", "context_update": {"d": ' + deep + '}}, "message": "m"}')
    nested = '{"a": ' * 40 + "1" + "}" * 40
    with pytest.raises(ReplyFormatError, match="more than 32 levels"):
        parse_reply('{"transition": {"target_state": "x", "context_update": {"d": ' + nested + '}}, "message": "m"}')


def test_explicit_writable_keys_are_what_the_strict_schema_and_the_prompt_offer():
    import llm_fsm
    from llm_fsm.contract import state_reply_schemas
    from llm_fsm.engine import initial_snapshot
    from llm_fsm.prompt import PromptBuilder
    from tests.conftest import SIGNUP

    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["writable_keys"] = ["name", "cancel", "_extra"]
    definition = llm_fsm.load(data)
    _, strict = state_reply_schemas(definition, "ask_name")
    update = strict["properties"]["transition"]["properties"]["context_update"]
    assert "cancel" in json.dumps(update)
    prompt = PromptBuilder().system_prompt(definition, initial_snapshot(definition))
    assert "cancel" in prompt
