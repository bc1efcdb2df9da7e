"""Async at scale: one event loop, many conversations, no thread per call; cancellation; no global state."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import pytest

import llm_fsm
from llm_fsm.llm import LLMRequest, LLMResponse, Usage
from llm_fsm.streaming import MessageDelta
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply


@pytest.fixture
def slow_server():
    from benchmarks.bench_async import start_server

    process, url = start_server(1.5)  # long enough that 200 calls overlap even on a loaded machine
    yield url
    process.terminate()
    process.wait(timeout=10)


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.loads(response.read())


def test_200_concurrent_asend_in_one_loop_without_a_thread_per_call(slow_server):
    from benchmarks.bench_async import CHAT, client

    definition = llm_fsm.load(CHAT)
    llm = client(slow_server)
    conversations = [llm_fsm.Conversation(definition, llm) for _ in range(200)]
    threads: list[int] = []
    before = threading.active_count()  # earlier tests may leave idle worker threads behind

    async def sample_threads(stop: asyncio.Event) -> None:
        while not stop.is_set():
            threads.append(threading.active_count())
            await asyncio.sleep(0.02)

    async def scenario():
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_threads(stop))
        results = await asyncio.gather(*(c.asend(f"hi {i}") for i, c in enumerate(conversations)))
        stop.set()
        await sampler
        return results

    results = asyncio.run(scenario())
    assert all(r.state == "chat" and r.llm_calls == 1 for r in results)
    assert all(len(c.history) == 1 for c in conversations)
    served = stats(slow_server)
    assert served["requests"] == 200
    assert served["max_in_flight"] >= 100, "the calls really overlapped in one event loop"
    assert max(threads) - before < 40, f"no thread per call (saw {max(threads) - before} more threads)"


class SlowLLM:
    """An async model that takes its time, so a test can cancel the turn in the middle."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        self.started.set()
        await asyncio.sleep(10)
        return LLMResponse(json.dumps(reply("ask_email", "never")), Usage())

    def stream_complete(self, request: LLMRequest):
        raise NotImplementedError

    async def astream_complete(self, request: LLMRequest):
        self.started.set()
        yield '{"transition": {"target_state": "ask_name", "context_update": {}}, "message": "Hel'
        await asyncio.sleep(10)
        yield LLMResponse("", Usage())


@pytest.mark.parametrize("mode", ["asend", "astream"])
def test_a_cancelled_task_leaves_the_conversation_as_before(signup, mode):
    slow = SlowLLM()
    conversation = llm_fsm.Conversation(signup, slow)
    before = conversation.snapshot()
    shown: list[str] = []

    async def consume():
        if mode == "asend":
            await conversation.asend("I'm Ann")
        else:
            async for event in conversation.astream("I'm Ann"):
                if isinstance(event, MessageDelta):
                    shown.append(event.text)

    async def scenario():
        task = asyncio.create_task(consume())
        await slow.started.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert conversation.snapshot() == before
    if mode == "astream":
        assert shown == ["Hel"], "text streamed before the cancellation"
    conversation.llm = ScriptedLLM([reply("ask_email", "Email?", name="Ann")])
    assert conversation.send("I'm Ann").state == "ask_email", "the conversation takes the next turn"


def test_litellm_globals_are_left_alone(fake_openai):
    import litellm

    names = ["suppress_debug_info", "num_retries", "drop_params", "api_base", "api_key", "request_timeout",
             "callbacks", "success_callback", "failure_callback", "set_verbose", "cache"]  # fmt: skip
    before = {name: repr(getattr(litellm, name, None)) for name in names}
    fake_openai.add("hello", "world")
    llm = llm_fsm.LiteLLMClient("openai/x", api_base=fake_openai.url, api_key="k", temperature=0.1, timeout=9)
    llm.complete(LLMRequest([{"role": "user", "content": "hi"}]))
    asyncio.run(llm.acomplete(LLMRequest([{"role": "user", "content": "hi"}])))
    assert {name: repr(getattr(litellm, name, None)) for name in names} == before
    assert fake_openai.requests[0]["temperature"] == 0.1, "settings travel with each call"
