"""``aadvance``: the stored turn for async servers (lock, load, turn, save), with no thread per waiting task."""

from __future__ import annotations

import asyncio

import pytest

import llm_fsm
from llm_fsm.store import aadvance, open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.store.test_store import CHAT

STORES = ["memory", "file", "sqlite", "redis"]


@pytest.fixture(params=STORES)
def store(request, tmp_path):
    kind = request.param
    if kind == "redis":
        url = request.getfixturevalue("redis_url") + f"?prefix=aadvance-{tmp_path.name}"
    else:
        url = {"memory": "memory:", "file": f"file://{tmp_path}/files", "sqlite": f"sqlite://{tmp_path}/c.db"}[kind]
    store = open_store(url)
    yield store
    store.close()


def test_aadvance_creates_continues_resumes_and_saves_nothing_on_failure(store):
    definition = llm_fsm.load(CHAT)
    hooks = llm_fsm.Hooks()
    hooks.on("after_transition", "context_update", keys=["topic"])(
        lambda **_: (_ for _ in ()).throw(llm_fsm.Break("check"))
    )

    async def scenario():
        first = await aadvance(store, "u1", definition, ScriptedLLM([reply("chat", "Hello!")]), None, hooks=hooks)
        llm = ScriptedLLM([reply("chat", "Tea it is.", topic="tea")])
        paused = await aadvance(store, "u1", definition, llm, "tea?", hooks=hooks)
        token = paused.pending.token
        before = store.load("u1")
        with pytest.raises(llm_fsm.LLMError):
            down = ScriptedLLM([llm_fsm.LLMUnavailableError("down")])
            await aadvance(store, "u1", definition, down, None, hooks=hooks, action=lambda c: c.aresume(token))
        assert store.load("u1") == before, "a failed turn saves nothing"
        llm = ScriptedLLM([reply("chat", "Checked: tea.")])
        resumed = await aadvance(store, "u1", definition, llm, None, hooks=hooks, action=lambda c: c.aresume(token))
        return first, paused, resumed

    first, paused, resumed = asyncio.run(scenario())
    assert (first.turn, paused.paused, resumed.message) == (0, True, "Checked: tea.")
    assert store.load("u1").snapshot.status == "active" and store.load("u1").version == 3


def test_fifty_tasks_on_one_conversation_take_their_turns_one_after_another(store):
    definition = llm_fsm.load(CHAT)
    llm = ScriptedLLM([reply("chat", "Hello!")] + [reply("chat", f"answer {i}") for i in range(50)])

    async def scenario():
        await aadvance(store, "busy", definition, llm, None)
        return await asyncio.gather(*(aadvance(store, "busy", definition, llm, f"q{i}", wait=60) for i in range(50)))

    results = asyncio.run(scenario())
    assert sorted(r.turn for r in results) == list(range(1, 51)), "every turn saved, none lost to a conflict"
    record = store.load("busy")
    assert record.snapshot.turns == 50 and record.snapshot.history_len == 51
