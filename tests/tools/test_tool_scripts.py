"""Tool use tested without a model: scripted calls and stubbed results in test files, the simulated
model calling tools, and cassettes that record and replay tool calls."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.testing import RecordingLLM, ReplayLLM, ScriptedLLM, SimulatedLLM, tool_calls
from llm_fsm.testing.conversation_tests import read, run_files
from llm_fsm.testing.simulation import arguments_for
from llm_fsm.testing.tool_scripts import StubbedTools, ToolStub
from tests.conftest import reply

runner = CliRunner()
ENV = {"COLUMNS": "200"}

SHOP = {
    "name": "shop",
    "description": "Look orders up and refund them.",
    "initial_state": "ask",
    "tools": {
        "lookup_order": {
            "description": "Find an order by id",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean", "default": False}},
                "required": ["order_id"],
            },
            "result_key": "order",
        },
        "refund": {
            "description": "Refund an order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "minimum": 5}},
                "required": ["order_id", "amount"],
            },
            "approval": "always",
        },
    },
    "states": {
        "ask": {
            "purpose": "Ask for the order id and look it up",
            "tools": ["lookup_order", "refund"],
            "transitions": [
                {"target_state": "found", "description": "known", "conditions": [{"requires_context_keys": ["order"]}]}
            ],
        },
        "found": {"purpose": "Tell the order's status", "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Say goodbye"},
    },
}
OPENING = {"user": None, "reply": reply("ask", "Your order number?"), "expect": {"state": "ask"}}
LOOKUP = tool_calls(("lookup_order", {"order_id": "A-17"}))
SHIPPED = {"result": {"id": "A-17", "status": "shipped"}}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "shop.json").write_text(json.dumps(SHOP))
    return tmp_path


def write(folder, *steps, name="shop.test.json", **fields):
    """A test file of one case with ``steps`` (``fields``: the file's, e.g. ``tools``)."""
    case = {"name": "case", "definition": "shop.json", "steps": [OPENING, *steps]}
    path = folder / name
    path.write_text(json.dumps({**fields, "cases": [case]}, indent=1))
    return path


def failures(path):
    (outcome,) = run_files([path])
    return [failure for step in outcome.steps for failure in step.failures] + ([outcome.error] if outcome.error else [])


def lookup_step(target="ask", user="Where is A-17?", **expect):
    """A step that looks A-17 up, then replies moving to ``target`` (``ask`` lists the tools, ``found`` none)."""
    return {"user": user, "replies": [LOOKUP, reply(target, "It shipped.")], "expect": {"state": target, **expect}}


# -- a test file with tools stubbed -------------------------------------------------------------


def test_a_stubbed_tool_needs_no_code_and_the_file_passes_through_run_files_and_the_cli(folder):
    expected = {"name": "lookup_order", "arguments": {"order_id": "A-17"}, "result": {"status": "shipped"}}
    step = lookup_step("found", context={"order": {"status": "shipped"}}, tool_calls=[expected], max_llm_calls=2)
    path = write(folder, step, {"user": "thanks", "reply": reply("done", "Bye"), "expect": {"tool_calls": []}},
                 tools={"lookup_order": SHIPPED, "refund": {"error": "not in this test"}})  # fmt: skip
    (outcome,) = run_files([path])
    assert outcome.passed, outcome.steps
    run = outcome.steps[1].result.tool_calls[0]
    assert run.result == SHIPPED["result"] and run.error is None
    result = runner.invoke(app, ["test", str(path), "-v"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "1 passed, 0 failed" in result.stdout and "ask → found (2 calls" in result.stdout


def test_without_a_stub_or_code_the_case_says_how_to_provide_the_tool(folder):
    (error,) = failures(write(folder, lookup_step()))
    assert "lists tool 'lookup_order', which is not registered" in error
    assert 'stub the tools in the test file\'s "tools" field' in error


def test_stubs_in_a_step_replace_the_cases_which_replace_the_files(folder):
    step = lookup_step(tool_calls=[{"name": "lookup_order", "result": "from the step"}])
    step["tools"] = {"lookup_order": {"result": "from the step"}}
    later = lookup_step(user="again", tool_calls=[{"name": "lookup_order", "result": "from the case"}])
    path = write(folder, step, later, tools={"lookup_order": {"result": "from the file"}, "refund": {"result": 1}})
    document = json.loads(path.read_text())
    document["cases"][0]["tools"] = {"lookup_order": {"result": "from the case"}}
    path.write_text(json.dumps(document))
    assert failures(path) == []


def test_an_error_stub_and_successive_outcomes(folder):
    calls = tool_calls(("lookup_order", {"order_id": "A"}), ("lookup_order", {"order_id": "B"}))
    step = {
        "user": "A and B",
        "replies": [calls, reply("ask", "A is down, B shipped.")],
        "tools": {"lookup_order": [{"error": "the database is down"}, {"result": "B shipped"}]},
        "expect": {
            "tool_calls": [
                {"name": "lookup_order", "arguments": {"order_id": "A"}, "error": "database is down"},
                {"name": "lookup_order", "arguments": {"order_id": "B"}, "result": "B shipped"},
            ],
            "rejected": [{"kind": "tool", "reason": "ToolError: the database is down"}],
        },
    }
    assert failures(write(folder, step, tools={"refund": {"result": 1}})) == []
    three = tool_calls(*[("lookup_order", {"order_id": x}) for x in "ABC"])
    step = {**step, "replies": [three, reply("ask", "Hm.")], "expect": {}}
    (failure,) = failures(write(folder, step, tools={"refund": {"result": 1}}))
    assert failure == "tool 'lookup_order' was called 3 times, but its stub lists 2 outcomes"


def test_a_stub_of_a_tool_no_state_lists_is_an_error_with_a_did_you_mean(folder):
    step = {**lookup_step(), "tools": {"lookup_ordr": SHIPPED}}
    (error,) = failures(write(folder, step, tools={"lookup_order": SHIPPED, "refund": {"result": 1}}))
    assert error == "the test stubs tool 'lookup_ordr', which no state lists (did you mean 'lookup_order'?)"


def test_a_tool_stubbed_in_another_step_only_fails_where_it_has_no_stub_and_no_code(folder):
    first = lookup_step()
    first["tools"] = {"lookup_order": SHIPPED, "refund": {"result": 1}}
    again = lookup_step(user="again")
    assert failures(write(folder, first, again)) == [
        "tool 'lookup_order' was called in a step that does not stub it, and it has no code"
    ]


def test_real_hooks_still_run_and_a_stub_replaces_them(folder):
    (folder / "shop_hooks.py").write_text(
        "from llm_fsm import Hooks\n"
        "hooks = Hooks()\n"
        "@hooks.tool()\n"
        "def lookup_order(order_id: str) -> dict:\n"
        "    return {'id': order_id, 'status': 'from code'}\n"
        "@hooks.tool()\n"
        "async def refund(order_id: str, amount: float) -> dict:\n"
        "    return {'refunded': amount}\n"
    )
    by_code = lookup_step(tool_calls=[{"name": "lookup_order", "result": {"status": "from code"}}])
    stubbed = lookup_step(user="again", tool_calls=[{"name": "lookup_order", "result": "stubbed"}])
    stubbed["tools"] = {"lookup_order": {"result": "stubbed"}}
    refund = {"user": "refund", "reply": tool_calls(("refund", {"order_id": "A-17", "amount": 40}))}
    by_async_code = {"resume": {"approved": True}, "reply": reply("ask", "Done.")}
    by_async_code["expect"] = {"tool_calls": [{"name": "refund", "result": {"refunded": 40}}]}
    async_stubbed = {**by_async_code, "tools": {"refund": {"result": "stubbed"}}}
    async_stubbed["expect"] = {"tool_calls": [{"name": "refund", "result": "stubbed"}]}
    steps = [by_code, stubbed, refund, by_async_code, {**refund, "user": "again"}, async_stubbed]
    assert failures(write(folder, *steps, hooks="shop_hooks.py:hooks")) == []
    # the stub keeps the code's schema: arguments the code would refuse are refused
    bad = {
        "user": "bad",
        "replies": [tool_calls(("lookup_order", {"order_id": 17})), reply("ask", "Hm.")],
        "tools": {"lookup_order": {"result": "never"}},
        "expect": {"tool_calls": [{"name": "lookup_order", "error": "do not match the schema"}]},
    }
    assert failures(write(folder, bad, hooks="shop_hooks.py:hooks")) == []


# -- expectations that do not hold, in words ----------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ([{"name": "refund"}], "tool call 1: expected 'refund', got 'lookup_order' with {\"order_id\": \"A-17\"}"),
        (
            [{"name": "lookup_order", "arguments": {"order_id": "A-18"}}],
            "tool call 1 ('lookup_order'): argument 'order_id' is \"A-17\", expected \"A-18\"",
        ),
        (
            [{"name": "lookup_order", "arguments": {"reason": "asked"}}],
            "tool call 1 ('lookup_order'): argument 'reason' missing",
        ),
        (
            [{"name": "lookup_order", "result": {"status": "lost"}}],
            "tool call 1 ('lookup_order'): result 'status' is \"shipped\", expected \"lost\"",
        ),
        (
            [{"name": "lookup_order", "error": "down"}],
            "tool call 1 ('lookup_order'): succeeded, expected an error matching /down/",
        ),
        (
            [{"name": "lookup_order", "approval": "approved"}],
            "tool call 1 ('lookup_order'): approval is none (no person decided), expected 'approved'",
        ),
        (
            [{"name": "lookup_order"}, {"name": "refund"}],
            "tool call 2: expected a call to 'refund', but only 1 call was made",
        ),
        ([], 'tool calls: expected none, got 1: \'lookup_order\' with {"order_id": "A-17"}'),
    ],
)
def test_a_tool_call_expectation_that_fails_says_what_differed(folder, expected, message):
    path = write(folder, lookup_step(tool_calls=expected), tools={"lookup_order": SHIPPED, "refund": {"result": 1}})
    assert failures(path) == [message]
    result = runner.invoke(app, ["test", str(path)], env=ENV)
    assert result.exit_code == 1 and message in result.stdout


def test_a_missing_call_and_an_unexpected_call(folder):
    stubs = {"lookup_order": SHIPPED, "refund": {"result": 1}}
    none = {"user": "hi", "reply": reply("ask", "Which order?"), "expect": {"tool_calls": [{"name": "lookup_order"}]}}
    assert failures(write(folder, none, tools=stubs)) == [
        "tool call 1: expected a call to 'lookup_order', but no tool was called"
    ]
    two = tool_calls(("lookup_order", {"order_id": "A-17"}), ("lookup_order", {"order_id": "B-2"}))
    extra = {**lookup_step(tool_calls=[{"name": "lookup_order"}]), "replies": [two, reply("ask", "Both.")]}
    assert failures(write(folder, extra, tools=stubs)) == [
        'tool call 2: unexpected call \'lookup_order\' with {"order_id": "B-2"}'
    ]


# -- approval: a pause, then a step that resumes it with a decision -----------------------------


@pytest.mark.parametrize(
    ("decision", "call"),
    [
        ({"approved": True}, {"approval": "approved", "result": {"refunded": 40}}),
        ({"approved": False, "reason": "too much"}, {"approval": "rejected", "error": "rejected this call: too much"}),
        ({"result": "refunded by hand"}, {"approval": "supplied", "result": "refunded by hand"}),
    ],
)
def test_a_step_pauses_for_approval_and_the_next_resumes_it(folder, decision, call):
    refund = tool_calls(("refund", {"order_id": "A-17", "amount": 40}))
    paused = {
        "user": "refund 40 on A-17",
        "reply": refund,
        "expect": {
            "status": "paused",
            "tool_calls": [],
            "awaiting_approval": {"name": "refund", "arguments": {"amount": 40}},
            "message": "approve",
        },
    }
    resumed = {
        "resume": decision,
        "reply": reply("ask", "Done."),
        "expect": {"status": "active", "tool_calls": [{"name": "refund", **call}], "message": "Done"},
    }
    stubs = {"refund": {"result": {"refunded": 40}}, "lookup_order": SHIPPED}
    assert failures(write(folder, paused, resumed, tools=stubs)) == []
    wrong = {**paused, "expect": {"awaiting_approval": {"name": "lookup_order", "arguments": {"amount": 41}}}}
    assert failures(write(folder, wrong, tools=stubs)) == [
        "awaiting approval: expected tool 'lookup_order', but 'refund' waits"
    ]
    not_paused = {**lookup_step(), "expect": {"awaiting_approval": {"name": "refund"}}}
    assert failures(write(folder, not_paused, tools=stubs)) == [
        "awaiting approval: expected a pause for tool 'refund', but the turn did not pause"
    ]


# -- the file model stays strict ----------------------------------------------------------------


def test_typos_in_stubs_and_tool_expectations_get_a_did_you_mean_with_line_and_column(folder):
    step = lookup_step(tool_calls=[{"name": "lookup_order", "argments": {}}])
    step["tools"] = {"lookup_order": [{"result": 1}, {"reslt": 2}]}
    path = write(folder, step, tools={"refund": {"eror": "x"}})
    result = runner.invoke(app, ["test", str(path)], env=ENV)
    assert result.exit_code == 2, result.output
    lines = path.read_text().splitlines()
    for typo, hint in (("argments", "arguments"), ("reslt", "result"), ("eror", "error")):
        line = next(n for n, text in enumerate(lines, 1) if f'"{typo}"' in text)
        assert f"{path}:{line}:" in result.stderr and f"unknown field '{typo}'" in result.stderr
        assert f"did you mean '{hint}'?" in result.stderr
    assert "one stub" not in result.stderr and "stubs in order" not in result.stderr


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        ({"result": 1, "error": "x"}, 'a tool stub gives either a "result" or an "error", not both'),
        ({}, 'a tool stub gives either a "result" or an "error", e.g.'),
        (3, "expected an object (a tool stub) or a list of tool stubs, got a number (3)"),
    ],
)
def test_a_stub_that_is_not_one_says_so_in_words(folder, stub, message):
    path = write(folder, lookup_step(), tools={"lookup_order": stub})
    result = runner.invoke(app, ["test", str(path)], env=ENV)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert "Value error" not in result.stderr


def test_an_invalid_regex_in_a_tool_error_expectation_fails_the_step(folder):
    step = lookup_step(tool_calls=[{"name": "lookup_order", "error": "down ("}])
    path = write(folder, step, tools={"lookup_order": SHIPPED, "refund": {"result": 1}})
    (failure,) = failures(path)
    assert failure.startswith("tool_calls[0].error: /down (/ is not a valid regular expression")
    assert read(path).cases[0].steps[1].expect.tool_calls[0].name == "lookup_order"


# -- the simulated model ------------------------------------------------------------------------


def stub_hooks(**results):
    tools = StubbedTools()
    tools.begin({name: ToolStub(result=result) for name, result in results.items()})
    return tools.hooks(None, results)


@pytest.mark.parametrize("mode", ["native", "json"])
def test_the_simulated_model_calls_each_tool_once_then_replies(mode):
    refund = {k: v for k, v in SHOP["tools"]["refund"].items() if k != "approval"}
    definition = llm_fsm.load({**SHOP, "tools": {**SHOP["tools"], "refund": refund}})
    llm = SimulatedLLM(definition, path=["ask", "found"], tool_calling=mode)
    conversation = llm_fsm.Conversation(definition, llm, hooks=stub_hooks(lookup_order={"id": "x"}, refund="ok"))
    opening = conversation.start()  # the initial state lists tools: called in the opening too
    assert [r.name for r in opening.tool_calls] == ["lookup_order", "refund"] and opening.llm_calls == 2
    assert opening.tool_calls[0].arguments == {"order_id": "sample order_id"}  # the default is left out
    assert opening.tool_calls[1].arguments == {"order_id": "sample order_id", "amount": 5.0}
    assert not opening.rejected and all(r.ok for r in opening.tool_calls)
    first, second = llm.requests[:2]
    if mode == "native":
        assert first.tools and llm.replies[0] == {"tool_calls": [
            {"name": "lookup_order", "arguments": {"order_id": "sample order_id"}},
            {"name": "refund", "arguments": {"order_id": "sample order_id", "amount": 5.0}},
        ]}  # fmt: skip
        assert second.messages[-3]["tool_calls"][0]["function"]["name"] == "lookup_order"
    else:
        assert first.tools is None and second.messages[-2]["content"].startswith('{"tool_calls"')
    assert "transition" in llm.replies[1]
    again = conversation.send("go on")  # a new turn: the tools are called again, once each
    assert again.state == "found" and [r.name for r in again.tool_calls] == ["lookup_order", "refund"]
    assert again.llm_calls == 2
    last = conversation.send("bye")
    assert last.tool_calls == () and last.llm_calls == 1  # found lists no tools


def test_the_simulated_model_asks_for_approval_once_and_replies_after_the_decision():
    definition = llm_fsm.load(SHOP)
    llm = SimulatedLLM(definition, seed=3)
    conversation = llm_fsm.Conversation(definition, llm, hooks=stub_hooks(lookup_order={"id": "x"}, refund="ok"))
    opening = conversation.start()
    assert opening.paused and opening.pending.tool_call["name"] == "refund"
    assert [r.name for r in opening.tool_calls] == ["lookup_order"]
    result = conversation.resume(opening.pending.token, {"approved": True})
    assert not result.paused and result.llm_calls == 1 and result.tool_calls[0].approval == "approved"
    assert len(llm.requests) == 2 and "transition" in llm.replies[-1]


def test_the_simulated_model_is_deterministic_with_its_seed():
    definition = llm_fsm.load(SHOP)

    def replies(seed):
        llm = SimulatedLLM(definition, seed=seed)
        conversation = llm_fsm.Conversation(definition, llm, hooks=stub_hooks(lookup_order={"id": "x"}, refund=1))
        conversation.start()
        for _ in range(20):
            if conversation.ended:
                break
            if conversation.pending is not None:
                conversation.resume(conversation.pending.token, {"approved": True})
            else:
                conversation.send("next")
        return llm.replies

    assert replies(7) == replies(7)


def test_arguments_are_made_from_the_parameters_schema():
    schema = {
        "type": "object",
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 4}}}},
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 2},
            "when": {"type": "string", "format": "date"},
            "size": {"enum": ["S", "M"]},
            "note": {"anyOf": [{"type": "null"}, {"type": "string"}], "default": None},
            "count": {"type": ["integer", "null"], "minimum": 3},
        },
        "required": ["items", "when", "size", "count"],
    }
    arguments = arguments_for(schema)
    assert arguments == {"items": [{"sku": "samp"}] * 2, "when": "2026-01-15", "size": "S", "count": 3}
    from llm_fsm.schemas import violation

    assert violation(schema, arguments) is None
    assert arguments_for({"type": "object"}) == {} and arguments_for({}) == {}


def test_llm_fsm_test_with_the_simulated_model_runs_a_file_with_stubbed_tools(folder):
    steps = [
        {"user": None, "expect": {"status": "paused", "tool_calls": [{"name": "lookup_order"}]}},
        {"resume": {"approved": True}, "expect": {"state": "found", "tool_calls": [{"name": "refund"}]}},
    ]
    path = folder / "sim.test.json"
    case = {"name": "simulated", "definition": "shop.json", "steps": steps}
    path.write_text(json.dumps({"tools": {"lookup_order": SHIPPED, "refund": {"result": "ok"}}, "cases": [case]}))
    result = runner.invoke(app, ["test", str(path), "--model", "simulated"], env=ENV)
    assert result.exit_code == 0, result.output


def test_paths_writes_tests_for_a_definition_with_tools_that_run_as_written(folder):
    out = folder / "tests" / "shop.test.json"
    result = runner.invoke(app, ["paths", str(folder / "shop.json"), "--write-tests", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["tools"] == {
        "lookup_order": {"result": "sample order"},
        "refund": {"result": "sample result of refund"},
    }
    opening, resumed = document["cases"][0]["steps"][:2]
    assert opening["reply"]["tool_calls"][0]["name"] == "lookup_order"
    assert opening["expect"]["awaiting_approval"]["name"] == "refund" and opening["expect"]["status"] == "paused"
    assert resumed["resume"] == {"approved": True} and resumed["expect"]["tool_calls"][0]["name"] == "refund"
    outcomes = run_files([out])
    assert outcomes and all(o.passed for o in outcomes), [o.steps for o in outcomes]
    assert runner.invoke(app, ["test", str(out)], env=ENV).exit_code == 0


# -- cassettes ----------------------------------------------------------------------------------


def shop_conversation(llm, hooks=None):
    hooks = hooks or stub_hooks(lookup_order={"id": "A-17", "status": "shipped"}, refund="ok")
    return llm_fsm.Conversation(llm_fsm.load(SHOP), llm, hooks=hooks)


def talk(conversation):
    results = [conversation.start(), conversation.send("Where is A-17?"), conversation.send("refund 40")]
    results.append(conversation.resume(conversation.pending.token, {"approved": True}))
    return [{k: v for k, v in r.to_dict().items() if k not in ("latency_ms", "pending")} for r in results]


SCRIPT = [
    reply("ask", "Your order number?"),
    LOOKUP,
    reply("ask", "It shipped. Anything else?"),
    tool_calls(("refund", {"order_id": "A-17", "amount": 40})),
    reply("found", "Refunded."),
]


def without_durations(turns):
    """The turns without what differs between two conversations: durations, and keys (made from each one's uid)."""
    same = {"duration": 0, "idempotency_key": None}
    return [{**t, "tool_calls": [{**c, **same} for c in t["tool_calls"]]} for t in turns]


@pytest.mark.parametrize("mode", ["native", "json"])
def test_a_cassette_records_and_replays_tool_calls(tmp_path, mode):
    cassette = tmp_path / "c.json"
    recorded = talk(shop_conversation(RecordingLLM(ScriptedLLM(SCRIPT, tool_calling=mode), cassette)))
    data = json.loads(cassette.read_text())
    assert data["tool_mode"] == mode and len(data["interactions"]) == 5
    asked, answered = data["interactions"][1], data["interactions"][2]
    if mode == "native":
        assert [t["function"]["name"] for t in asked["tools"]] == ["lookup_order", "refund"]
        assert asked["response"]["tool_calls"] == [
            {"id": "call_2_1", "name": "lookup_order", "arguments": '{"order_id": "A-17"}'}
        ]
        assistant, tool = answered["messages"][-2:]
        assert assistant["content"] is None and assistant["tool_calls"][0]["id"] == "call_2_1"
        assert tool["role"] == "tool" and tool["tool_call_id"] == "call_2_1"
    else:
        assert "tools" not in asked and "tool_calls" not in asked["response"]
    replayer = ReplayLLM(cassette)
    assert replayer.tool_mode() == mode
    replayed = talk(shop_conversation(replayer))
    assert without_durations(replayed) == without_durations(recorded) and replayer.remaining == 0
    assert recorded[1]["tool_calls"][0]["result"] == {"id": "A-17", "status": "shipped"}


def test_a_different_tool_result_on_replay_is_a_mismatch_that_shows_the_tool_message(tmp_path):
    cassette = tmp_path / "c.json"
    talk(shop_conversation(RecordingLLM(ScriptedLLM(SCRIPT), cassette)))
    changed = stub_hooks(lookup_order={"id": "A-17", "status": "lost"}, refund="ok")
    conversation = shop_conversation(ReplayLLM(cassette), changed)
    conversation.start()
    with pytest.raises(llm_fsm.testing.CassetteMismatch) as caught:
        conversation.send("Where is A-17?")
    diff = caught.value.diff
    assert '-[tool call_2_1] {"result": {"id": "A-17", "status": "shipped"}}' in diff
    assert '+[tool call_2_1] {"result": {"id": "A-17", "status": "lost"}}' in diff


def test_a_cassette_without_tool_fields_still_replays(tmp_path):
    old = tmp_path / "old.json"
    definition = {**SHOP, "states": {k: {**v, "tools": []} for k, v in SHOP["states"].items()}}
    recorder = RecordingLLM(ScriptedLLM([reply("ask", "Number?"), reply("ask", "Which one?")]), old)
    conversation = llm_fsm.Conversation(llm_fsm.load(definition), recorder)
    conversation.start()
    conversation.send("hi")
    data = json.loads(old.read_text())
    for interaction in data["interactions"]:  # a cassette as written before tools
        interaction["response"] = {k: v for k, v in interaction["response"].items() if k in ("text", "usage", "model")}
    assert "tool_mode" not in data and "tools" not in data["interactions"][0]
    old.write_text(json.dumps(data))
    replayer = ReplayLLM(old)
    replayed = llm_fsm.Conversation(llm_fsm.load(definition), replayer)
    assert replayed.start().message == "Number?" and replayed.send("hi").message == "Which one?"
    assert replayer.tool_mode() == "json"


def test_a_cassette_with_malformed_tool_calls_is_not_a_cassette(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"interactions": [{"messages": [], "response": {"text": "", "tool_calls": [{}]}}]}))
    with pytest.raises(llm_fsm.errors.LLMError, match="the response of call 1 has 'tool_calls' that are not a list"):
        ReplayLLM(path)
