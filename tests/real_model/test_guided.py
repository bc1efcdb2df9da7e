"""Guided replies on the real server: llama-server takes the per-turn schema (anyOf branches) as its grammar,
every reply obeys it, and the small model, which stays put under the plain schema, moves."""

from __future__ import annotations

import json

import jsonschema
import pytest

import llm_fsm
from llm_fsm.guided.schema import guided_schema, portable_patterns
from tests.conftest import ROOT
from tests.real_model.conftest import check_turn, model_opens

pytestmark = pytest.mark.real_model

FORM = ROOT / "fsm_definitions" / "form_filling.json"
LINES = ["maya chen", "maya.chen@example.com", "I'm 34."]


def test_guided_replies_obey_the_schema_of_each_turn_and_the_model_moves(make_client, recorded):
    definition = model_opens(FORM)
    conversation = llm_fsm.Conversation(definition, make_client(api_base=recorded.base_url, guided=True))
    expected = []  # the schema each call should carry: made from the state and context before the turn
    before = conversation.snapshot()
    expected.append(portable_patterns(guided_schema(definition, before.state, before.context, opening=True)))
    check_turn(definition, conversation, before, conversation.start())
    for line in LINES:
        before = conversation.snapshot()
        result = conversation.send(line)
        check_turn(definition, conversation, before, result)
        # values from the user's words; a message that opens like no earlier one
        earlier = [exchange.assistant for exchange in before.history]
        said = guided_schema(definition, before.state, before.context, said=line, earlier=earlier)
        expected.append(portable_patterns(said))
    recorded.wait(len(recorded.requests))
    assert set(recorded.statuses) == {200}
    replies = recorded.replies()
    assert len(replies) == len(recorded.requests) >= len(expected)
    for sent, answer in zip(recorded.requests, replies, strict=True):
        schema = sent["response_format"]["json_schema"]["schema"]
        assert schema in expected  # a correction call keeps its turn's schema
        jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), schema)
    assert all("anyOf" in json.dumps(schema) for schema in expected[1:])  # each turn offered branches
    # under the plain schema this model stays in collect_name for the whole course (benchmarks/REAL_MODEL.md)
    assert conversation.state != "collect_name"
