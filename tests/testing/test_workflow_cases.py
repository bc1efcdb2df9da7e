"""Conversation test files on a workflow: a step's expectations read the whole run it started, and every state the
run went through counts for coverage."""

from __future__ import annotations

import json

from llm_fsm.testing.conversation_tests import coverage, run_files

SUPPORT = {
    "name": "support", "initial_state": "collect",
    "tools": {"lookup": {"description": "Look an order up.", "result_key": "order",
                         "parameters": {"type": "object", "properties": {"order_number": {"type": "string"}}}}},
    "states": {
        "collect": {"id": "collect", "purpose": "Ask for the order number.", "required_context_keys": ["order_number"],
                    "transitions": [{"target_state": "triage", "automatic": True,
                                     "conditions": [{"requires_context_keys": ["order_number"]}]}]},
        "triage": {"id": "triage", "acts": True, "purpose": "Find what happened to the order.", "tools": ["lookup"],
                   "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["order"]}]}]},
        "done": {"id": "done", "purpose": "Say what happened."},
    },
}  # fmt: skip


def case_file(tmp_path, expect):
    (tmp_path / "support.json").write_text(json.dumps(SUPPORT))
    replies = [
        {"transition": {"target_state": "collect", "context_update": {"order_number": "A-17"}}, "message": "Looking."},
        {"tool_calls": [{"name": "lookup", "arguments": {"order_number": "A-17"}}]},
        {"transition": {"target_state": "done", "context_update": {}}, "message": "A-17 has shipped."},
    ]
    step = {"user": "order A-17", "replies": replies, "expect": expect}
    case = {"name": "triage", "definition": "support.json", "tools": {"lookup": {"result": {"status": "shipped"}}}}
    path = tmp_path / "support.test.json"
    path.write_text(json.dumps({"cases": [{**case, "steps": [step]}]}))
    return path


def test_a_steps_expectations_read_every_step_of_its_run(tmp_path):
    expect = {"state": "done", "message": "shipped", "max_llm_calls": 3, "tool_calls": [{"name": "lookup"}]}
    (outcome,) = run_files([case_file(tmp_path, expect)])
    assert outcome.passed, outcome.steps
    (covered,) = coverage([outcome])
    assert covered.covered_states == {"collect", "triage", "done"}
    assert ("collect", "triage") in covered.covered_transitions


def test_the_runs_calls_are_counted_in_all(tmp_path):
    (outcome,) = run_files([case_file(tmp_path, {"max_llm_calls": 2})])
    assert not outcome.passed and "llm calls: 3 > 2" in str(outcome.steps)
