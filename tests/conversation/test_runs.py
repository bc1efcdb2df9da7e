"""Runs (llm_fsm.running): acting states, automatic moves, the bounds, pauses, streams and traces of a workflow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Break, Hooks, RunLimitError
from llm_fsm.testing import ScriptedLLM, reply, tool_calls

SEARCH = {
    "description": "Search for sources.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    "result_key": "sources",
}


def research(**top: Any) -> llm_fsm.FSMDefinition:
    """research (acts; a search whose result fulfils an automatic move) -> write (acts) -> review (acts) -> done."""
    return llm_fsm.load({
        "name": "research", "initial_state": "research", "tools": {"search": SEARCH}, **top,
        "states": {
            "research": {"id": "research", "acts": True, "purpose": "Gather sources.", "tools": ["search"],
                         "transitions": [{"target_state": "write", "automatic": True,
                                          "conditions": [{"requires_context_keys": ["sources"]}]}]},
            "write": {"id": "write", "acts": True, "purpose": "Write a draft.", "required_context_keys": ["draft"],
                      "transitions": [{"target_state": "review",
                                       "conditions": [{"requires_context_keys": ["draft"]}]}]},
            "review": {"id": "review", "acts": True, "purpose": "Review the draft.",
                       "transitions": [{"target_state": "write", "description": "it needs work"},
                                       {"target_state": "done", "description": "it is good"}]},
            "done": {"id": "done", "purpose": "Finished."},
        },
    })  # fmt: skip


def search_hooks(calls: list[str]) -> Hooks:
    hooks = Hooks()

    @hooks.tool("search")
    def search(q: str) -> list[str]:
        calls.append(q)
        return [f"a source about {q}"]

    return hooks


def research_replies() -> list[Any]:
    return [
        tool_calls(("search", {"q": "quantum computing"})),
        reply("review", "Drafted the report.", draft="# Quantum\nText [1]"),
        reply("done", "The draft is good."),
    ]


def test_a_run_goes_from_the_task_to_the_end_one_step_per_state():
    calls: list[str] = []
    llm = ScriptedLLM(research_replies())
    conversation = llm_fsm.Conversation(research(), llm, hooks=search_hooks(calls))
    results = list(conversation.run("quantum computing"))
    # the search's result fulfilled the automatic move: research ended without a call to read the results
    assert [(r.previous_state, r.state, r.step, r.llm_calls) for r in results] == [
        ("research", "write", "act", 1), ("write", "review", "act", 1), ("review", "done", "act", 1),
    ]  # fmt: skip
    assert calls == ["quantum computing"] and len(llm.requests) == 3
    assert conversation.ended and conversation.context["draft"].startswith("# Quantum")
    assert [r.message for r in results] == ["", "Drafted the report.", "The draft is good."]
    first = llm.requests[0].messages[-1]["content"]
    assert "<act>" in first and "<task_input>quantum computing</task_input>" in first
    later = llm.requests[1].messages[-1]["content"]  # nobody typed: no task, the same note
    assert "<act>" in later and "task_input" not in later
    system = llm.requests[1].messages[0]["content"]  # the state says it acts; the rules say what that changes
    assert "<acts>This state acts on its own" in system and "what its work found or made" in system
    assert [h.user for h in conversation.history] == ["quantum computing", None, None]


def test_send_in_a_workflow_returns_the_last_step_with_the_steps_before_it():
    conversation = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=search_hooks([]))
    result = conversation.send("quantum computing")
    assert result.state == "done" and result.message == "The draft is good."
    assert [r.state for r in result.steps] == ["write", "review"]
    data = result.to_dict()
    assert data["step"] == "act" and [s["state"] for s in data["steps"]] == ["write", "review"]
    assert llm_fsm.TurnResult.from_dict(data).to_dict() == data


SUPPORT = {
    "name": "support", "initial_state": "collect",
    "tools": {"lookup": {"description": "Look an order up.", "result_key": "order"}},
    "states": {
        "collect": {"id": "collect", "purpose": "Ask for the order number.", "required_context_keys": ["order_number"],
                    "transitions": [{"target_state": "triage", "automatic": True,
                                     "conditions": [{"requires_context_keys": ["order_number"]}]}]},
        "triage": {"id": "triage", "acts": True, "purpose": "Find what happened to the order.", "tools": ["lookup"],
                   "transitions": [{"target_state": "follow_up",
                                    "conditions": [{"requires_context_keys": ["order"]}]}]},
        "follow_up": {"id": "follow_up", "purpose": "Answer the person's questions.",
                      "transitions": [{"target_state": "closed"}]},
        "closed": {"id": "closed", "purpose": "Done."},
    },
}  # fmt: skip


def support_hooks(calls: list[str]) -> Hooks:
    hooks = Hooks()

    @hooks.tool("lookup")
    def lookup(order_number: str) -> dict[str, str]:
        calls.append(order_number)
        return {"status": "shipped"}

    return hooks


def test_an_automatic_move_after_a_persons_turn_costs_no_call_and_the_acting_state_reports_back():
    calls: list[str] = []
    llm = ScriptedLLM([
        reply("collect", "Thanks, let me look.", order_number="A-17"),
        tool_calls(("lookup", {"order_number": "A-17"})),
        reply("follow_up", "Your order A-17 has shipped."),
    ])  # fmt: skip
    conversation = llm_fsm.Conversation(llm_fsm.load(SUPPORT), llm, hooks=support_hooks(calls))
    result = conversation.send("my order is A-17")
    assert [(r.step, r.state, r.llm_calls) for r in (*result.steps, result)] == [
        ("turn", "collect", 1), ("automatic", "triage", 0), ("act", "follow_up", 2),
    ]  # fmt: skip
    assert result.message == "Your order A-17 has shipped." and calls == ["A-17"]
    assert conversation.state == "follow_up" and not conversation.ended  # waits for the person
    assert len(llm.requests) == 3
    # the automatic move said nothing and recorded no exchange
    assert [(h.user, h.state) for h in conversation.history] == [("my order is A-17", "collect"), (None, "follow_up")]
    assert "step" not in result.steps[0].to_dict() and result.steps[1].to_dict()["step"] == "automatic"


def test_an_automatic_move_into_a_waiting_state_says_its_opening_without_a_call():
    definition = llm_fsm.load({
        **SUPPORT,
        "states": {**SUPPORT["states"],
                   "collect": {**SUPPORT["states"]["collect"],
                               "transitions": [{"target_state": "follow_up", "automatic": True,
                                                "conditions": [{"requires_context_keys": ["order_number"]}]}]},
                   "follow_up": {**SUPPORT["states"]["follow_up"], "opening": "Order {{ order_number }}: what next?"}},
    })  # fmt: skip
    llm = ScriptedLLM([reply("collect", "Noted.", order_number="B-2")])
    result = llm_fsm.Conversation(definition, llm, hooks=support_hooks([])).send("B-2 please")
    assert (result.step, result.state, result.message, result.llm_calls) == (
        "automatic",
        "follow_up",
        "Order B-2: what next?",
        0,
    )
    assert len(llm.requests) == 1


def test_a_loop_stops_at_max_run_steps_and_its_steps_stand():
    replies = [tool_calls(("search", {"q": "x"}))]
    for _ in range(5):  # review always sends the draft back
        replies += [reply("review", "Drafted.", draft="d"), reply("write", "Needs work.")]
    conversation = llm_fsm.Conversation(research(max_run_steps=3), ScriptedLLM(replies), hooks=search_hooks([]))
    seen = []
    with pytest.raises(RunLimitError, match="max_run_steps: 3") as caught:
        for result in conversation.run("x"):
            seen.append(result.state)
    assert caught.value.limit == 3 and caught.value.state == conversation.state
    assert seen == ["write", "review", "write", "review"]  # the caller's turn, then three on their own
    assert conversation.state == "review" and len(conversation.history) == 4


def test_an_acting_states_checks_are_its_key_results_retried_with_what_failed():
    definition = llm_fsm.load({
        "name": "draft", "initial_state": "write",
        "states": {
            "write": {"id": "write", "acts": True, "purpose": "Write a draft with a heading.", "max_retries": 2,
                      "required_context_keys": ["draft"],
                      "checks": [{"kind": "schema", "key": "draft", "schema": {"type": "string", "pattern": "^# "},
                                  "description": "a heading"}],
                      "transitions": [{"target_state": "done"}]},
            "done": {"id": "done", "purpose": "Finished."},
        },
    })  # fmt: skip
    llm = ScriptedLLM([reply("done", "Done.", draft="no heading"), reply("done", "Done.", draft="# Heading")])
    result = llm_fsm.Conversation(definition, llm).send("write it")
    assert result.state == "done" and result.context["draft"] == "# Heading" and result.llm_calls == 2
    assert "a heading" in llm.requests[1].messages[-1]["content"]


def test_a_pause_in_a_run_stops_it_and_resume_goes_on_to_the_end():
    hooks = search_hooks([])

    @hooks.on("state_enter", states="review")
    def ask_a_person(**_: Any) -> None:
        raise Break("editor review", {"draft": "d"})

    conversation = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=hooks)
    paused = conversation.send("quantum computing")
    assert paused.paused and conversation.state == "review" and [r.state for r in paused.steps] == ["write"]
    assert list(conversation.run()) == []  # paused: nothing to do until it is resumed
    assert conversation.pending is not None
    done = conversation.resume(conversation.pending.token, {"approved": True})
    assert conversation.ended and done.state == "done" and done.context["approved"] is True


def test_a_step_that_falls_back_ends_the_run_where_it_is():
    llm = ScriptedLLM([tool_calls(("search", {"q": "x"})), "not json", "still not json"])
    conversation = llm_fsm.Conversation(research(), llm, hooks=search_hooks([]))
    results = list(conversation.run("x"))
    assert [(r.state, r.fallback) for r in results] == [("write", False), ("write", True)]
    # nobody is there to "tell a bit more": the step says it failed
    assert results[-1].message.startswith("This step could not be finished")
    assert conversation.state == "write"  # run() again goes on from here
    assert len(llm.requests) == 3


def test_run_with_nothing_to_do_yields_nothing_and_start_is_refused_once_started():
    llm = ScriptedLLM([reply("collect", "Your order number?")])
    conversation = llm_fsm.Conversation(llm_fsm.load(SUPPORT), llm, hooks=support_hooks([]))
    assert conversation.start().state == "collect"
    assert list(conversation.run()) == []  # collect waits for the person
    with pytest.raises(llm_fsm.ConversationError, match="already made"):
        conversation.start()


def test_stream_yields_every_steps_events_and_a_result_per_step():
    conversation = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=search_hooks([]))
    events = list(conversation.stream("quantum computing"))
    results = [e for e in events if isinstance(e, llm_fsm.TurnResult)]
    assert [r.state for r in results] == ["write", "review", "done"]
    assert any(type(e).__name__ == "ToolCall" for e in events[: events.index(results[0])])


def test_the_async_run_takes_the_same_steps():
    async def main() -> tuple[list[str], str]:
        conversation = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=search_hooks([]))
        states = [r.state async for r in conversation.arun("quantum computing")]
        other = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=search_hooks([]))
        return states, (await other.asend("quantum computing")).state

    assert asyncio.run(main()) == (["write", "review", "done"], "done")


def test_a_definition_without_acting_states_or_automatic_moves_takes_one_turn_per_send():
    definition = llm_fsm.load({
        "name": "plain", "initial_state": "a",
        "states": {"a": {"id": "a", "purpose": "A.", "transitions": [{"target_state": "b"}]},
                   "b": {"id": "b", "purpose": "B.", "transitions": [{"target_state": "c"}]},
                   "c": {"id": "c", "purpose": "C."}},
    })  # fmt: skip
    assert not definition.is_workflow
    result = llm_fsm.Conversation(definition, ScriptedLLM([reply("b", "On to b.")])).send("go")
    assert (result.state, result.step, result.steps) == ("b", "turn", ())
    assert "step" not in result.to_dict() and "steps" not in result.to_dict()


def test_a_run_is_one_span_with_each_steps_turn_under_it():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llm_fsm import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    try:
        conversation = llm_fsm.Conversation(research(), ScriptedLLM(research_replies()), hooks=search_hooks([]))
        conversation.send("quantum computing")
    finally:
        telemetry.set_tracer_provider(None)
    spans = exporter.get_finished_spans()
    (run,) = [s for s in spans if s.name == "run research"]
    steps = [s for s in spans if s.parent is not None and s.parent.span_id == run.context.span_id]
    assert [s.name for s in steps] == ["invoke_agent research"] * 3
    assert [s.attributes["llm_fsm.turn.kind"] for s in steps] == ["act"] * 3
    assert run.attributes["llm_fsm.run.steps"] == 3 and run.attributes["llm_fsm.run.stopped"] == "ended"
    assert run.attributes["llm_fsm.state.after"] == "done"


CHARGES = {
    "name": "charges", "initial_state": "first",
    "tools": {"charge": {"description": "Charge an amount.", "result_key": "charged",
                         "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}}}},
    "states": {
        "first": {"id": "first", "acts": True, "purpose": "Charge 10.", "tools": ["charge"],
                  "transitions": [{"target_state": "second", "automatic": True,
                                   "conditions": [{"requires_context_keys": ["charged"]}],
                                   "clear_keys": ["charged"]}]},
        "second": {"id": "second", "acts": True, "purpose": "Charge 20.", "tools": ["charge"],
                   "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["charged"]}]}]},
        "done": {"id": "done", "purpose": "Done."},
    },
}  # fmt: skip


def test_each_steps_tool_calls_get_idempotency_keys_of_their_own():
    keys: list[tuple[float, str]] = []
    hooks = Hooks()

    @hooks.tool("charge")
    def charge(amount: float, idempotency_key: str) -> str:
        keys.append((amount, idempotency_key))
        return "ok"

    llm = ScriptedLLM([
        reply("first", "Getting ready."),
        tool_calls(("charge", {"amount": 10})),  # its result fulfils the automatic move: the step says nothing
        tool_calls(("charge", {"amount": 20})),
        reply("done", "Charged 20."),
    ])  # fmt: skip
    conversation = llm_fsm.Conversation(llm_fsm.load(CHARGES), llm, hooks=hooks)
    assert [r.state for r in conversation.run("go")] == ["first", "second", "done"]
    assert [amount for amount, _ in keys] == [10, 20] and keys[0][1] != keys[1][1]


def test_a_message_to_a_run_stopped_part_way_comes_after_the_steps_it_left():
    llm = ScriptedLLM([
        tool_calls(("lookup", {"order_number": "A-17"})),
        reply("follow_up", "Your order A-17 has shipped."),
        reply("follow_up", "It left on Monday."),
    ])  # fmt: skip
    definition = llm_fsm.load(SUPPORT)
    fresh = llm_fsm.Conversation(definition, ScriptedLLM([]), hooks=support_hooks([])).snapshot()
    # as a process killed after the automatic move was saved leaves it: in triage, which acts, with a history
    said = llm_fsm.Exchange(user="A-17", assistant="Looking.", state="collect")
    update = {
        "state": "triage",
        "context": {"order_number": "A-17"},
        "history": (said,),
        "turns": 1,
        "status": "active",
    }
    conversation = llm_fsm.Conversation.restore(
        fresh.model_copy(update=update), definition, llm, hooks=support_hooks([])
    )
    result = conversation.send("When did it ship?")
    assert [(r.state, r.user) for r in (*result.steps, result)] == [
        ("follow_up", None), ("follow_up", "When did it ship?"),
    ]  # fmt: skip
    assert result.message == "It left on Monday."
    assert "task_input" not in llm.requests[0].messages[-1]["content"]  # the person's words were no task


def test_a_tool_result_ends_the_step_only_once_the_state_has_its_keys():
    definition = llm_fsm.load({
        **SUPPORT,
        "states": {**SUPPORT["states"],
                   "triage": {**SUPPORT["states"]["triage"], "required_context_keys": ["summary"],
                              "transitions": [{"target_state": "follow_up", "automatic": True,
                                               "conditions": [{"requires_context_keys": ["order"]}]}]}},
    })  # fmt: skip
    llm = ScriptedLLM([
        reply("collect", "Looking.", order_number="A-17"),
        tool_calls(("lookup", {"order_number": "A-17"})),
        reply("triage", "Found it: shipped.", summary="shipped on Monday"),  # the model reads the result first
    ])  # fmt: skip
    result = llm_fsm.Conversation(definition, llm, hooks=support_hooks([])).send("A-17")
    assert [(r.step, r.state) for r in (*result.steps, result)] == [
        ("turn", "collect"), ("automatic", "triage"), ("act", "triage"), ("automatic", "follow_up"),
    ]  # fmt: skip
    assert result.context["summary"] == "shipped on Monday" and len(llm.requests) == 3


def test_an_acting_first_states_opening_is_said_as_the_opening_then_the_state_acts():
    definition = llm_fsm.load({
        "name": "opens", "initial_state": "work",
        "states": {"work": {"id": "work", "acts": True, "purpose": "Do it.", "opening": "Starting now.",
                            "transitions": [{"target_state": "done"}]},
                   "done": {"id": "done", "purpose": "Done."}},
    })  # fmt: skip
    llm = ScriptedLLM([reply("done", "Did it.")])
    results = list(llm_fsm.Conversation(definition, llm).run())
    assert [(r.step, r.state, r.message, r.llm_calls) for r in results] == [
        ("turn", "work", "Starting now.", 0), ("act", "done", "Did it.", 1),
    ]  # fmt: skip
