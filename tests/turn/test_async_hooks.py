"""Issue 12 §2: async handlers and async Python checks, awaited by the async API, refused clearly by the sync one."""

from __future__ import annotations

import asyncio
import json
import warnings

import pytest

import llm_fsm
from llm_fsm.streaming import MessageDelta
from llm_fsm.testing import ScriptedLLM
from tests.conftest import SIGNUP, reply

NAME = reply("ask_email", "Thanks Ann! Your email?", name="Ann")


def run(coroutine):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "coroutine was never awaited" warning fails the test
        return asyncio.run(coroutine)


def test_an_async_handler_is_awaited_and_its_delta_applied(signup):
    hooks = llm_fsm.Hooks()
    order = []

    @hooks.on("before_llm_call")
    async def look_up_customer(*, context, **_):
        await asyncio.sleep(0)
        order.append("async")
        return {"customer": {"tier": "gold"}}

    @hooks.on("before_llm_call")
    def after_it(*, context, **_):
        order.append(("sync sees", context.get("customer")))

    conv = llm_fsm.Conversation(signup, ScriptedLLM([NAME]), hooks=hooks)
    result = run(conv.asend("I'm Ann"))
    assert result.state == "ask_email" and conv.context["customer"] == {"tier": "gold"}
    assert order == ["async", ("sync sees", {"tier": "gold"})], "handlers run in order, each sees the last"
    assert conv.provenance["customer"]["by"] == "handler:look_up_customer"


def test_an_async_handler_can_pause_a_streamed_turn(signup):
    hooks = llm_fsm.Hooks()

    @hooks.on("before_transition", targets=["ask_email"])
    async def review(**_):
        raise llm_fsm.Break("needs review", {"why": "new customer"}, message="A person checks this first.")

    conv = llm_fsm.Conversation(signup, ScriptedLLM([NAME], chunk_size=3), hooks=hooks)

    async def collect():
        return [event async for event in conv.astream("I'm Ann")]

    events = run(collect())
    assert events[-1].paused and conv.state == "ask_name" and conv.pending.payload == {"why": "new customer"}
    assert "".join(e.text for e in events if isinstance(e, MessageDelta)) == "A person checks this first."


@pytest.mark.parametrize("policy", ["raise", "continue"])
def test_an_async_handler_that_fails_follows_its_policy(signup, policy):
    hooks = llm_fsm.Hooks()

    @hooks.on("context_update", policy=policy)
    async def broken(**_):
        raise RuntimeError("the CRM is down")

    conv = llm_fsm.Conversation(signup, ScriptedLLM([NAME]), hooks=hooks)
    before = conv.snapshot()
    if policy == "raise":
        with pytest.raises(llm_fsm.HandlerError, match="the CRM is down"):
            run(conv.asend("I'm Ann"))
        assert conv.snapshot() == before
    else:
        assert run(conv.asend("I'm Ann")).state == "ask_email"


def test_an_async_python_check_is_awaited_and_its_feedback_retries(signup):
    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["checks"] = [{"kind": "python", "name": "polite"}]
    definition = llm_fsm.load(data)
    hooks = llm_fsm.Hooks()

    @hooks.check("polite")
    async def polite(*, message, **_):
        await asyncio.sleep(0)
        return "please" in message or "say please"

    llm = ScriptedLLM([reply("ask_name", "Name?"), reply("ask_name", "Your name, please?")])
    result = run(llm_fsm.Conversation(definition, llm, hooks=hooks).asend("hi"))
    assert result.message == "Your name, please?" and result.llm_calls == 2
    assert [r.reason for r in result.rejected] == ["check 'python check #1' failed: say please"]
    assert "say please" in llm.requests[1].messages[-1]["content"]


def test_the_sync_api_refuses_async_hooks_before_the_turn_starts(signup):
    hooks = llm_fsm.Hooks()
    ran = []
    hooks.on("start")(lambda **_: ran.append("sync start handler"))

    @hooks.on("after_reply")
    async def audit(**_):
        return None

    @hooks.check("slow")
    async def slow(**_):
        return True

    llm = ScriptedLLM([NAME])
    conv = llm_fsm.Conversation(signup, llm, hooks=hooks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(llm_fsm.ConversationError, match="handler 'audit', check 'slow' are async: use astart"):
            conv.send("I'm Ann")
        with pytest.raises(llm_fsm.ConversationError, match="are async"):
            list(conv.stream("I'm Ann"))
    assert ran == [] and llm.calls == 0 and conv.snapshot().turns == 0 and not conv._busy


def test_a_sync_handler_returning_an_awaitable_is_named_not_leaked(signup):
    async def later():
        return {"x": 1}

    hooks = llm_fsm.Hooks()
    hooks.on("before_llm_call", name="sneaky")(lambda **_: later())
    conv = llm_fsm.Conversation(signup, ScriptedLLM([NAME]), hooks=hooks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(llm_fsm.ConversationError, match="handler 'sneaky' returned an awaitable: use astart"):
            conv.send("hi")
    assert run(conv.asend("hi")).state == "ask_email" and conv.context["x"] == 1, "the async API awaits it"


def test_an_async_error_handler_is_refused_when_registered():
    hooks = llm_fsm.Hooks()

    async def report(**_):
        return None

    with pytest.raises(TypeError, match="'error' handler must be a plain function"):
        hooks.on("error")(report)
