from __future__ import annotations

import json

import pytest

from llm_fsm.contract import ReplyFormatError, parse_reply, reply_schema, writable_keys
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
        TEXT[:-2],  # truncated: repaired
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


def test_missing_transition_means_stay_and_null_update_means_empty():
    assert parse_reply('{"message": "hi"}').transition is None
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
