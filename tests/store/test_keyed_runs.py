"""A keyed request whose run was saved part-way (its process died between two steps) goes on with the run when it
is sent again: it does not take the run's first step (its message) a second time (issue 48)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.errors import IdempotencyKeyReused
from llm_fsm.store import StoredConversation, aadvance, advance, open_store
from llm_fsm.testing import ScriptedLLM, reply
from tests.store.test_crash_points import lines
from tests.store.test_crash_points_runs import SCRIPT, WORKFLOW, ByState, tool_hooks
from tests.store.test_store import KINDS, url_for

ENTER = reply("gather", "On it.", topic="quantum")  # the person's turn: the run's first step
DIES = {**SCRIPT, "ask": [ENTER], "check": [RuntimeError("the process died")]}  # in the check step


def opened(store: Any, effects: Path) -> None:
    """A new conversation, opened: it waits in ``ask`` for a topic."""
    hooks = tool_hooks(effects)
    advance(store, "c1", llm_fsm.load(WORKFLOW), ScriptedLLM([reply("ask", "Your topic?")]), None, hooks=hooks)


def send(store: Any, llm: Any, effects: Path, text: str = "quantum") -> Any:
    return advance(store, "c1", llm_fsm.load(WORKFLOW), llm, text, hooks=tool_hooks(effects), idempotency_key="k1")


@pytest.mark.parametrize("kind", KINDS)
def test_a_keyed_run_that_died_between_steps_goes_on_when_sent_again(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store, effects = open_store(url_for(kind, tmp_path, request)), tmp_path / "effects"
    opened(store, effects)
    with pytest.raises(RuntimeError, match="died"):
        send(store, ByState(script=DIES), effects)
    assert store.load("c1").snapshot.state == "check"  # the steps before it are saved
    again = ByState(script={**SCRIPT, "ask": [ENTER]})
    answer = send(store, again, effects)
    assert (answer.state, answer.message) == ("done", "Checked: it holds.")
    assert [r.state for r in again.requests] == ["check", "check"]  # the check step's replies, nothing before it
    snapshot = store.load("c1").snapshot
    assert [h.user for h in snapshot.history].count("quantum") == 1  # the message was taken once
    assert [e["tool"] for e in lines(effects)] == ["gather", "write", "verify"]
    assert send(store, ScriptedLLM(), effects).to_dict() == answer.to_dict()  # and now its answer is kept


def test_a_stored_conversation_says_a_run_it_went_on_with_was_not_its_action(tmp_path: Path) -> None:
    store, effects = open_store("memory:"), tmp_path / "effects"
    opened(store, effects)
    with pytest.raises(RuntimeError):
        send(store, ByState(script=DIES), effects)
    definition, llm = llm_fsm.load(WORKFLOW), ByState(script={**SCRIPT, "ask": [ENTER]})
    hooks = tool_hooks(effects)
    stored = StoredConversation(store, "c1", lambda s: llm_fsm.Conversation.restore(s, definition, llm, hooks=hooks))

    def action(conversation: llm_fsm.Conversation) -> Any:
        raise AssertionError("the request's action ran again: its message would be taken twice")

    answer = stored.run(action, idempotency_key="k1", fingerprint=None)
    assert stored.replayed and answer.state == "done" and [s.state for s in answer.steps] == []


def test_a_key_of_a_run_saved_part_way_sent_with_another_request_is_refused(tmp_path: Path) -> None:
    store, effects = open_store("memory:"), tmp_path / "effects"
    opened(store, effects)
    with pytest.raises(RuntimeError):
        send(store, ByState(script=DIES), effects)
    with pytest.raises(IdempotencyKeyReused):
        send(store, ByState(), effects, text="another topic")
    assert store.load("c1").snapshot.state == "check"


def test_the_async_api_goes_on_with_a_keyed_run_alike(tmp_path: Path) -> None:
    store, effects = open_store(f"sqlite://{tmp_path / 'c.db'}"), tmp_path / "effects"
    opened(store, effects)
    definition, hooks = llm_fsm.load(WORKFLOW), tool_hooks(effects)

    def asend(llm: Any) -> Any:
        return asyncio.run(aadvance(store, "c1", definition, llm, "quantum", hooks=hooks, idempotency_key="k1"))

    with pytest.raises(RuntimeError):
        asend(ByState(script=DIES))
    again = ByState(script={**SCRIPT, "ask": [ENTER]})
    assert asend(again).state == "done"
    assert [r.state for r in again.requests] == ["check", "check"]
    assert [h.user for h in store.load("c1").snapshot.history].count("quantum") == 1


def test_a_keyed_streamed_run_goes_on_alike(tmp_path: Path) -> None:
    """As serve streams a keyed message: the run's events consumed under ``arun``; sent again, the rest of the run
    is the answer (serve sends it as a kept one) and the stream's action does not run again."""
    store, effects = open_store(f"sqlite://{tmp_path / 'c.db'}"), tmp_path / "effects"
    opened(store, effects)
    definition, hooks = llm_fsm.load(WORKFLOW), tool_hooks(effects)

    def stream(llm: Any) -> tuple[Any, bool]:
        stored = StoredConversation(
            store, "c1", lambda s: llm_fsm.Conversation.restore(s, definition, llm, hooks=hooks)
        )
        streamed: list[Any] = []

        async def action(conversation: llm_fsm.Conversation) -> Any:
            async for event in conversation.astream("quantum"):
                streamed.append(event)
            return streamed[-1]

        return asyncio.run(stored.arun(action, idempotency_key="k1")), stored.replayed

    with pytest.raises(RuntimeError):
        stream(ByState(script=DIES))
    answer, replayed = stream(ByState(script={**SCRIPT, "ask": [ENTER]}))
    assert replayed and (answer.state, answer.message) == ("done", "Checked: it holds.")
    assert [h.user for h in store.load("c1").snapshot.history].count("quantum") == 1
    assert [e["tool"] for e in lines(effects)] == ["gather", "write", "verify"]
