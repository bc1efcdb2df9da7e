"""``serve`` on a workflow (a definition whose states act on their own and whose moves may be automatic): a
request runs the whole run under the conversation's lock, a stream sends a ``step`` event per step before its
``result``, and ``/v1`` answers with the last step's report; definitions without workflows answer as before."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import llm_fsm
from llm_fsm import Break, Hooks
from llm_fsm.llm import LLMRequest, LLMResponse, Usage
from llm_fsm.server import create_app
from llm_fsm.testing import ScriptedLLM, tool_calls
from tests.conftest import reply
from tests.server.test_server import error_of, live, send_message, settled, signup, sse, wait_for

openai = pytest.importorskip("openai")

# intake waits for a person; write acts (a tool, then its draft); an automatic move takes it on to present,
# which waits for the person again: a person's message is a run of three steps (turn, act, automatic)
PIPELINE = {
    "name": "pipeline",
    "initial_state": "intake",
    "tools": {
        "outline": {
            "description": "An outline of a topic",
            "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
        }
    },
    "states": {
        "intake": {
            "purpose": "Ask for a topic",
            "opening": "Which topic?",
            "required_context_keys": ["topic"],
            "transitions": [{"target_state": "write", "description": "A topic was given"}],
        },
        "write": {
            "purpose": "Write a draft on the topic",
            "acts": True,
            "tools": ["outline"],
            "required_context_keys": ["draft"],
            "transitions": [
                {"target_state": "present", "automatic": True, "conditions": [{"requires_context_keys": ["draft"]}]}
            ],
        },
        "present": {
            "purpose": "Show the draft and take the person's feedback",
            "transitions": [{"target_state": "done", "description": "The person is happy"}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}
RUN = [  # the replies of the run from "owls"
    reply("write", "On it.", topic="owls"),
    tool_calls(("outline", {"topic": "owls"})),
    reply("write", "Drafted.", draft="# Owls"),
]


class HeldLLM:
    """Scripted replies, streamed as the script streams them; call ``hold`` (0-based) waits for ``gate`` before
    it answers (``entered`` is set once it is waiting). ``usage`` sums the usage of every answer given."""

    def __init__(self, replies: list[Any], hold: int | None = None) -> None:
        self.script = ScriptedLLM(replies)
        self.hold, self.calls = hold, 0
        self.gate, self.entered = threading.Event(), threading.Event()
        self.usage = Usage()

    def _counted(self, response: LLMResponse) -> LLMResponse:
        self.usage += response.usage
        return response

    async def _wait(self) -> None:
        self.calls += 1
        if self.calls - 1 == self.hold:
            self.entered.set()
            while not self.gate.is_set():
                await asyncio.sleep(0.005)

    def complete(self, request: LLMRequest) -> LLMResponse:
        return self._counted(self.script.complete(request))

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        for item in self.script.stream_complete(request):
            yield self._counted(item) if isinstance(item, LLMResponse) else item

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        await self._wait()
        return self.complete(request)

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        await self._wait()
        for item in self.stream_complete(request):
            yield item


def pipeline() -> llm_fsm.FSMDefinition:
    return llm_fsm.load(json.loads(json.dumps(PIPELINE)))


def outline_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.tool()
    def outline(topic: str) -> list[str]:
        return [f"what {topic} eat", f"where {topic} live"]

    return hooks


def served(llm: Any, definition: Any = None, **options: Any) -> TestClient:
    options.setdefault("store", "memory:")
    app = create_app([definition or pipeline()], llm, hooks=outline_hooks(), **options)
    return TestClient(app, raise_server_exceptions=False)


def kinds(results: list[dict[str, Any]]) -> list[str]:
    return [r.get("step", "turn") for r in results]


def started(http: TestClient) -> str:
    created = http.post("/conversations", json={}).json()
    assert created["result"]["message"] == "Which topic?" and created["result"]["llm_calls"] == 0  # its own opening
    cid: str = created["id"]
    return cid


# -- the native routes -------------------------------------------------------------------------------


def test_a_message_runs_the_whole_workflow_and_answers_with_the_last_step_and_the_earlier_ones():
    llm = HeldLLM(RUN)
    http = served(llm)
    cid = started(http)
    answer = http.post(f"/conversations/{cid}/messages", json={"message": "owls"})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["step"] == "automatic" and result["message"] == "" and result["llm_calls"] == 0
    assert (result["previous_state"], result["state"], result["ended"]) == ("write", "present", False)
    first, act = result["steps"]
    assert kinds(result["steps"]) == ["turn", "act"] and "steps" not in first and "steps" not in act
    assert (first["user"], first["message"], first["state"]) == ("owls", "On it.", "write")
    assert (act["message"], act["llm_calls"], act["context_updates"]) == ("Drafted.", 2, {"draft": "# Owls"})
    assert [run["name"] for run in act["tool_calls"]] == ["outline"]
    assert llm.calls == 3
    shown = http.get(f"/conversations/{cid}").json()
    assert shown["state"] == "present" and shown["context"] == {"topic": "owls", "draft": "# Owls"}
    # the person's next message is one step: an answer of the usual shape
    llm.script.add(reply("done", "Glad you like it."))
    after = http.post(f"/conversations/{cid}/messages", json={"message": "great"}).json()
    assert (after["message"], after["state"], after["previous_state"]) == ("Glad you like it.", "done", "present")
    assert "steps" not in after and "step" not in after


def test_a_resume_goes_on_with_the_rest_of_the_run():
    hooks = outline_hooks()

    @hooks.on("state_enter", states=["write"])
    def hold(*, context: dict[str, Any], **_: Any) -> None:
        if not context.get("approved"):
            raise Break("an editor must approve the topic", {"topic": context["topic"]})

    llm = HeldLLM(RUN)
    http = TestClient(create_app([pipeline()], llm, hooks=hooks, store="memory:"), raise_server_exceptions=False)
    cid = started(http)
    paused = http.post(f"/conversations/{cid}/messages", json={"message": "owls"}).json()
    assert paused["status"] == "paused" and "steps" not in paused and llm.calls == 1  # the run stops at the pause
    token = paused["pending"]["token"]
    resumed = http.post(f"/conversations/{cid}/resume", json={"token": token, "result": {"approved": True}}).json()
    # the resumed turn is write's own (its tools, its draft), then the automatic move: the run's last step
    assert kinds([*resumed["steps"], resumed]) == ["act", "automatic"] and resumed["state"] == "present"
    (went_on,) = resumed["steps"]
    assert (went_on["state"], went_on["message"], went_on["context_updates"]) == (
        "write",
        "Drafted.",
        {"draft": "# Owls"},
    )
    assert [run["name"] for run in went_on["tool_calls"]] == ["outline"] and llm.calls == 3


def limited() -> llm_fsm.FSMDefinition:
    return llm_fsm.load({**json.loads(json.dumps(PIPELINE)), "max_run_steps": 1})


def test_a_run_past_its_limit_is_409_naming_it():
    http = served(HeldLLM(RUN), limited())
    cid = started(http)
    error = error_of(http.post(f"/conversations/{cid}/messages", json={"message": "owls"}), 409, "run_limit")
    assert error["limit"] == 1 and error["state"] == "write" and "POST /conversations/{id}/run" in error["message"]


def test_after_its_limit_a_run_goes_on_with_run_from_the_last_step():
    llm = HeldLLM(RUN)  # the act step saved before the limit stopped the run: /run does not act again
    http = served(llm, limited())
    cid = started(http)
    error_of(http.post(f"/conversations/{cid}/messages", json={"message": "owls"}), 409, "run_limit")
    went_on = http.post(f"/conversations/{cid}/run", json={})
    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["step"] == "automatic" and went_on.json()["state"] == "present" and llm.calls == 3
    error_of(http.post(f"/conversations/{cid}/run"), 409, "conversation_conflict")  # it waits for a person


def test_run_goes_on_once_per_idempotency_key_and_refuses_what_it_cannot_run():
    llm = HeldLLM([*RUN[1:], reply("done", "Bye.")])
    http = served(llm)
    # made in the acting state, without its first turn: /run runs it (the state acts), then the automatic move
    made = http.post("/conversations", json={"state": "write", "context": {"topic": "owls"}, "start": False})
    cid = made.json()["id"]
    first = http.post(f"/conversations/{cid}/run", headers={"Idempotency-Key": "go"})
    assert first.status_code == 200, first.text
    assert kinds([*first.json()["steps"], first.json()]) == ["act", "automatic"] and llm.calls == 2
    again = http.post(f"/conversations/{cid}/run", headers={"Idempotency-Key": "go"})
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json() and llm.calls == 2
    nothing = error_of(http.post(f"/conversations/{cid}/run"), 409, "conversation_conflict")
    assert "'present' waits for a person" in nothing["message"]
    http.post(f"/conversations/{cid}/messages", json={"message": "great"})
    error_of(http.post(f"/conversations/{cid}/run"), 410, "conversation_ended")


def test_a_definition_without_workflows_answers_as_before():
    replies = [reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann"), reply("ask_email", "And?")]
    http = served(ScriptedLLM(replies), signup())
    cid = http.post("/conversations", json={}).json()["id"]
    streamed = list(sse(http.post(f"/conversations/{cid}/stream", json={"message": "Ann"}).text.splitlines()))
    assert compressed(streamed) == ["delta", "result"] and not {"step", "steps"} & streamed[-1][1].keys()
    answer = http.post(f"/conversations/{cid}/messages", json={"message": "hm"}).json()
    assert answer["message"] == "And?" and not {"step", "steps"} & answer.keys()


def compressed(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The events' names, each run of deltas as one ``delta``."""
    names: list[str] = []
    for name, _ in events:
        if not (name == "delta" and names and names[-1] == "delta"):
            names.append(name)
    return names


def step_texts(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The text of the deltas before each ``step`` event."""
    texts, text = [], ""
    for name, data in events:
        if name == "delta":
            text += data["text"]
        elif name == "step":
            texts.append(text)
            text = ""
    return texts


def test_a_stream_sends_each_step_then_the_run_s_result_last():
    llm = HeldLLM(RUN)
    http = served(llm)
    cid = started(http)
    response = http.post(f"/conversations/{cid}/stream", json={"message": "owls"}, headers={"Idempotency-Key": "k"})
    assert response.status_code == 200
    events = list(sse(response.text.splitlines()))
    # the person's turn, the acting state's (a tool, then its report), the automatic move, then the run's result
    assert compressed(events) == ["delta", "step", "tool_call", "tool_result", "delta", "step", "step", "result"]
    steps = [data for name, data in events if name == "step"]
    assert kinds(steps) == ["turn", "act", "automatic"] and [s["message"] for s in steps] == ["On it.", "Drafted.", ""]
    assert step_texts(events) == ["On it.", "Drafted.", ""]  # each step's deltas add up to its message
    result = events[-1][1]
    assert result["steps"] == steps[:2] and {k: v for k, v in result.items() if k != "steps"} == steps[2]
    assert llm.calls == 3
    # sent again with its key: the same events, from the kept answer, with nothing run
    again = http.post(f"/conversations/{cid}/stream", json={"message": "owls"}, headers={"Idempotency-Key": "k"})
    replayed = list(sse(again.text.splitlines()))
    assert again.headers["Idempotent-Replayed"] == "true" and llm.calls == 3
    assert compressed(replayed) == ["delta", "step", "delta", "step", "step", "result"]
    assert [data for name, data in replayed if name == "step"] == steps and replayed[-1][1] == result
    assert step_texts(replayed) == ["On it.", "Drafted.", ""]
    whole = http.post(f"/conversations/{cid}/messages", json={"message": "owls"}, headers={"Idempotency-Key": "k"})
    assert whole.headers["Idempotent-Replayed"] == "true" and whole.json() == result  # a message and its stream


def test_a_step_that_fails_ends_the_stream_with_an_error_after_the_steps_that_committed():
    http = served(HeldLLM(RUN[:2]))  # the acting state's report never comes: the script runs out
    cid = started(http)
    events = list(sse(http.post(f"/conversations/{cid}/stream", json={"message": "owls"}).text.splitlines()))
    assert [name for name, _ in events if name != "delta"][0] == "step" and events[-1][0] == "error"
    assert "result" not in [name for name, _ in events]
    assert http.get(f"/conversations/{cid}").json()["state"] == "write"  # the person's turn stands


# -- a real server: each step as it happens, and the run holds the lock ------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'conversations.db'}"


def read_events(base: str, cid: str, into: list[tuple[str, dict[str, Any]]]) -> None:
    with (
        httpx.Client(base_url=base, timeout=30) as http,
        http.stream("POST", f"/conversations/{cid}/stream", json={"message": "owls"}) as response,
    ):
        into.extend(sse(response.iter_lines()))  # appended one by one: the test reads them as they come


def test_a_run_streams_each_step_as_it_commits_and_holds_the_lock_to_its_end(sqlite_url: str):
    llm = HeldLLM(RUN, hold=1)  # the acting state's first model call waits
    app = create_app([pipeline()], llm, hooks=outline_hooks(), store=sqlite_url, busy="reject")
    events: list[tuple[str, dict[str, Any]]] = []
    with live(app) as base, httpx.Client(base_url=base) as http, ThreadPoolExecutor(1) as pool:
        cid = http.post("/conversations", json={}).json()["id"]
        reading = pool.submit(read_events, base, cid, events)
        try:
            wait_for(llm.entered.is_set, "the acting state's model call")
            wait_for(lambda: any(n == "step" for n, _ in events), "the first step's event")  # sent as it committed
            assert [name for name, _ in events if name != "delta"] == ["step"]
            error_of(send_message(base, cid, "cats"), 409, "busy")  # the run holds the conversation between steps
            error_of(http.delete(f"/conversations/{cid}"), 409, "busy")
            assert http.get(f"/conversations/{cid}").json()["state"] == "write"  # the first step is saved already
        finally:
            llm.gate.set()  # a failed check must not leave the run (and the server's shutdown) waiting
        reading.result()
    assert events[-1][0] == "result" and [name for name, _ in events].count("step") == 3
    record = settled(sqlite_url, f"local@{cid}")
    assert record.snapshot.state == "present" and [e.user for e in record.snapshot.history] == [None, "owls", None]


def test_under_the_queue_policy_a_message_waits_for_the_whole_run(sqlite_url: str):
    llm = HeldLLM([*RUN, reply("done", "Glad you like it.")], hold=1)
    app = create_app([pipeline()], llm, hooks=outline_hooks(), store=sqlite_url, busy="queue", wait=20)
    with live(app) as base, httpx.Client(base_url=base) as http, ThreadPoolExecutor(2) as pool:
        cid = http.post("/conversations", json={}).json()["id"]
        first = pool.submit(send_message, base, cid, "owls")
        try:
            wait_for(llm.entered.is_set, "the acting state's model call")
            second = pool.submit(send_message, base, cid, "great")
            time.sleep(0.2)  # it waits for the lock (a shorter pause only makes the test prove less, never fail)
            assert not second.done()
        finally:
            llm.gate.set()
        run, after = first.result().json(), second.result().json()
    assert kinds([*run["steps"], run]) == ["turn", "act", "automatic"] and run["state"] == "present"
    # the second message ran once the run had ended, in the state the run stopped in
    assert (after["previous_state"], after["state"], after["message"]) == ("present", "done", "Glad you like it.")


# -- /v1: the last step's report ---------------------------------------------------------------------


def chat(http: TestClient) -> Any:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="-", http_client=http, max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_v1_answers_a_run_with_the_last_step_that_said_something(stream: bool):
    llm = HeldLLM([*RUN, reply("done", "Glad you like it.")])
    client = chat(served(llm))
    messages: list[dict[str, str]] = [{"role": "user", "content": "owls"}]
    if stream:
        chunks = list(client.chat.completions.create(model="pipeline", messages=messages, stream=True))
        parts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        said, extension = "".join(parts), chunks[-1].model_extra["llm_fsm"]
        assert "Drafted." in parts  # whole, once the run ended: the last report is known only then
    else:
        completion = client.chat.completions.create(model="pipeline", messages=messages)
        said, extension = completion.choices[0].message.content, completion.model_extra["llm_fsm"]
        assert completion.usage.total_tokens == llm.usage.total_tokens  # every step's model calls
    # the opening (a new conversation), then the run's last report: not the person's turn's, nor the
    # automatic move's empty one
    assert said == "Which topic?\n\nDrafted." and extension["state"] == "present" and llm.calls == 3
    messages += [{"role": "assistant", "content": said}, {"role": "user", "content": "great"}]
    after = client.chat.completions.create(model="pipeline", messages=messages)
    assert after.choices[0].message.content == "Glad you like it."
    assert after.model_extra["llm_fsm"]["conversation_id"] == extension["conversation_id"]  # the same one


def test_v1_gives_a_run_sent_again_its_kept_answer_without_running_anything():
    llm = HeldLLM(RUN)
    http = served(llm)
    body = {"model": "pipeline", "messages": [{"role": "user", "content": "owls"}]}
    first = http.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    said = first.json()["choices"][0]["message"]["content"]
    assert said == "Which topic?\n\nDrafted." and llm.calls == 3
    for stream in (False, True):
        again = http.post("/v1/chat/completions", json={**body, "stream": stream}, headers={"Idempotency-Key": "k-1"})
        assert again.headers["Idempotent-Replayed"] == "true"
        if stream:
            chunks = [json.loads(line[6:]) for line in again.text.splitlines() if line.startswith("data: {")]
            assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == said
        else:
            assert again.json()["choices"] == first.json()["choices"]
    retried = http.post("/v1/chat/completions", json=body, headers={"X-Stainless-Retry-Count": "1"})
    assert retried.headers["Idempotent-Replayed"] == "true" and retried.json()["choices"] == first.json()["choices"]
    assert llm.calls == 3  # nothing ran again


def test_v1_takes_the_first_message_as_the_task_of_a_workflow_that_begins_by_acting():
    definition = llm_fsm.load({
        "name": "summarise",
        "initial_state": "summarise",
        "states": {
            "summarise": {
                "purpose": "Summarise the task",
                "acts": True,
                "required_context_keys": ["summary"],
                "transitions": [
                    {"target_state": "done", "automatic": True, "conditions": [{"requires_context_keys": ["summary"]}]}
                ],
            },
            "done": {"purpose": "Finished"},
        },
    })  # fmt: skip
    llm = HeldLLM([reply("summarise", "Summarised.", summary="owls hunt at night")])
    completion = chat(served(llm, definition)).chat.completions.create(
        model="summarise", messages=[{"role": "user", "content": "owls"}]
    )
    assert completion.choices[0].message.content == "Summarised." and completion.model_extra["llm_fsm"]["ended"]
    assert llm.calls == 1  # no opening run before the task: it would have run the workflow without it
    assert "<task_input>owls</task_input>" in json.dumps(llm.script.requests[0].messages)
