"""A refused value in plain mode (no guided schema): every corrective call gets the state's schema, the last
one too. Holding the last try to the user's words was a small model's aid; a capable model that reformats a
value ("May 3rd" as 2024-05-03) on its last try must still be able to write it."""

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


def test_the_last_try_is_asked_with_the_states_own_schema_and_a_reformatted_value_is_taken():
    junk = reply("done", "Thanks Ana!", name="Ana", phone="1234")
    fixed = reply("done", "Thanks Ana!", name="Ana", phone="06123456789")
    schemas, state = phone_schemas("I'm Ana, call me on 0612 345 6789", [junk, junk, fixed])
    assert schemas[0] == schemas[1] == schemas[2] == {"type": ["string", "null"]} and state == "done"
    # a value no span of the words holds, written right on the last try, is the model's to write
    reformatted = reply("done", "Thanks Ana!", name="Ana", phone="44612345678")
    schemas, state = phone_schemas("I'm Ana, call me on +44 (0)612 345 678", [junk, junk, reformatted])
    assert "enum" not in schemas[2] and state == "done"


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_reply_with_no_refused_value_is_not_held(max_retries):
    wrong = reply("nowhere", "?", name="Ana")
    schemas, state = phone_schemas("I'm Ana", [wrong, reply("done", "Bye", name="Ana")], max_retries=max_retries)
    assert all("enum" not in s and s != {"type": "null"} for s in schemas) and state == "done"
