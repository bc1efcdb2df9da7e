"""A refused value in plain mode (no guided schema): the state's last corrective call holds it to what the
user said, or to null (``requests.said_or_left_out``)."""

from __future__ import annotations

from typing import Any

import pytest

import llm_fsm
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply

CALLBACK = {
    "name": "callback",
    "description": "Take a name and a phone number for a callback.",
    "initial_state": "ask",
    "context_schema": {"phone": {"type": "string", "pattern": "^[0-9]{11}$"}, "name": {"type": "string"}},
    "states": {
        "ask": {
            "purpose": "Ask for the caller's name and phone number",
            "required_context_keys": ["name"],
            "writable_keys": ["name", "phone"],
            "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["name"]}]}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}


def phone_schemas(said: str, replies: list[dict[str, Any]], max_retries: int = 2) -> tuple[list[Any], str]:
    """The phone's schema in each request of a turn on ``said``, and the state the turn ends in."""
    data = {
        **CALLBACK,
        "states": {**CALLBACK["states"], "ask": {**CALLBACK["states"]["ask"], "max_retries": max_retries}},
    }
    llm = ScriptedLLM(replies)
    result = llm_fsm.Conversation(llm_fsm.load(data), llm).send(said)
    schemas = [r.strict_schema["properties"]["transition"]["properties"]["context_update"]["properties"]["phone"]
               for r in llm.requests]  # fmt: skip
    return schemas, result.state


def test_the_last_try_holds_a_refused_value_to_the_users_words_and_the_move_is_saved():
    junk = reply("done", "Thanks Ana!", name="Ana", phone="1234")
    fixed = reply("done", "Thanks Ana!", name="Ana", phone="06123456789")
    schemas, state = phone_schemas("I'm Ana, call me on 0612 345 6789", [junk, junk, fixed])
    # the first tries leave it free (a model that reformats "May 3rd" fixes it there); the last offers what was said
    assert schemas[0] == schemas[1] and "enum" not in schemas[0]
    assert schemas[2] == {"type": ["string", "null"], "enum": ["06123456789", None]} and state == "done"


def test_a_value_the_user_never_gave_is_left_out_on_the_last_try():
    junk = reply("done", "Thanks Ana!", name="Ana", phone="1234")
    without = reply("done", "Thanks Ana!", name="Ana", phone=None)
    schemas, state = phone_schemas("I'm Ana", [junk, without], max_retries=1)
    assert schemas[1] == {"type": "null"} and state == "done"


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_reply_with_no_refused_value_is_not_held(max_retries):
    wrong = reply("nowhere", "?", name="Ana")
    schemas, state = phone_schemas("I'm Ana", [wrong, reply("done", "Bye", name="Ana")], max_retries=max_retries)
    assert all("enum" not in s and s != {"type": "null"} for s in schemas) and state == "done"
