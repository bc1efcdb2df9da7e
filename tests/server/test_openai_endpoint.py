"""``llm-fsm serve`` speaks OpenAI's chat completions, with the official ``openai`` SDK as the client: against a
real ``serve`` process (``--model simulated``, tokens, SQLite) for the conversations found from resent
message lists, branches, streams and errors; in-process (the SDK over a TestClient) for pauses and failed turns.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import llm_fsm
from llm_fsm import Break, Hooks
from llm_fsm.errors import LLMUnavailableError
from llm_fsm.server import create_app
from llm_fsm.server.openai_index import points
from llm_fsm.testing import ScriptedLLM
from tests.conftest import ROOT, reply
from tests.server.test_serve_cli import wait_until_serving
from tests.server.test_server import signup

openai = pytest.importorskip("openai")

EXAMPLES = ROOT / "fsm_definitions"
ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef00"
MODEL = "form_filling"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``llm-fsm serve`` of form_filling and small_talk on the simulated model, two clients' tokens."""
    home = tmp_path_factory.mktemp("serve")
    with serving(home) as base:
        yield base


def serving(home: Path) -> Any:
    import contextlib

    @contextlib.contextmanager
    def run() -> Iterator[str]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [
            str(Path(sys.executable).parent / "llm-fsm"), "serve", str(EXAMPLES / "form_filling.json"),
            str(EXAMPLES / "small_talk.json"), "--model", "simulated", "--store", f"sqlite:{home / 'c.db'}",
            "--port", str(port),
        ]  # fmt: skip
        env = {**os.environ, "LLM_FSM_HOME": str(home), "LLM_FSM_SERVER_TOKENS": f"alice:{ALICE},bob:{BOB}"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until_serving(process, base)
            yield base
        finally:
            process.terminate()
            process.communicate(timeout=10)

    return run()


def sdk(base: str, token: str = ALICE) -> Any:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0)


def ask(client: Any, messages: list[dict[str, Any]], **options: Any) -> tuple[str, dict[str, Any]]:
    """The reply's text and its ``llm_fsm`` extension."""
    completion = client.chat.completions.create(model=options.pop("model", MODEL), messages=messages, **options)
    return completion.choices[0].message.content, completion.model_extra["llm_fsm"]


def talk(client: Any, *texts: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A conversation of ``texts`` as a chat client has it: each call resends the whole list. The list, and
    each turn's extension."""
    messages: list[dict[str, Any]] = []
    extensions = []
    for text in texts:
        messages.append({"role": "user", "content": text})
        content, extension = ask(client, messages)
        messages.append({"role": "assistant", "content": content})
        extensions.append(extension)
    return messages, extensions


def native(base: str, conversation_id: str, token: str = ALICE) -> dict[str, Any]:
    response = httpx.get(f"{base}/conversations/{conversation_id}", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


# -- a real serve process --------------------------------------------------------------------------


@pytest.mark.slow
def test_the_models_are_the_definitions_served(server: str):
    assert sorted(model.id for model in sdk(server).models.list()) == ["form_filling", "small_talk"]
    assert sdk(server).models.retrieve("small_talk").id == "small_talk"


@pytest.mark.slow
def test_resent_messages_continue_one_conversation(server: str):
    """Each call resends the whole list: every turn lands in the one conversation, the native API shows it."""
    messages, extensions = talk(sdk(server), "hello", "Ada Lovelace", "ada@example.com")
    ids = {extension["conversation_id"] for extension in extensions}
    assert len(ids) == 1 and not any(extension["branched_from"] for extension in extensions)
    conversation = native(server, ids.pop())
    assert conversation["history_len"] == 4  # the opening, then three turns
    assert [exchange["user"] for exchange in conversation["history"]] == [
        None,
        "hello",
        "Ada Lovelace",
        "ada@example.com",
    ]
    # the first reply holds the opening, then the answer to "hello": what the client shows is what it resends
    assert messages[1]["content"].startswith(conversation["history"][0]["assistant"])
    assert extensions[-1]["state"] == conversation["state"]


@pytest.mark.slow
def test_the_headers_and_usage_say_what_a_chat_client_cannot_show(server: str):
    raw = sdk(server).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}]
    )
    completion, extension = raw.parse(), raw.parse().model_extra["llm_fsm"]
    assert raw.headers["x-llm-fsm-conversation-id"] == extension["conversation_id"]
    assert raw.headers["x-llm-fsm-state"] == extension["state"] and raw.headers["x-llm-fsm-ended"] == "false"
    assert extension["notes"] == ["system messages are ignored: the definition is the system prompt"]
    assert completion.usage.total_tokens > 0 and completion.object == "chat.completion"


@pytest.mark.slow
def test_a_streamed_turn_sends_chunks_and_the_extension_last(server: str):
    client = sdk(server)
    messages, extensions = talk(client, "hello")
    messages.append({"role": "user", "content": "Grace Hopper"})
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = next(c for c in reversed(chunks) if c.choices)
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["llm_fsm"]["conversation_id"] == extensions[0]["conversation_id"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    # the streamed text is what the client resends: the next call continues the same conversation
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "grace@example.com"}]
    assert ask(client, messages)[1]["conversation_id"] == extensions[0]["conversation_id"]


@pytest.mark.slow
def test_an_async_client_streams_and_continues(server: str):
    async def chat() -> tuple[str, str]:
        client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key=ALICE, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hello there"}]
        first = await client.chat.completions.create(model=MODEL, messages=messages)
        messages += [
            first.choices[0].message.model_dump(include={"role", "content"}),
            {"role": "user", "content": "Alan"},
        ]
        stream = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
        last = [chunk async for chunk in stream][-1]
        return first.model_extra["llm_fsm"]["conversation_id"], last.model_extra["llm_fsm"]["conversation_id"]

    first, second = asyncio.run(chat())
    assert first == second


@pytest.mark.slow
def test_an_edited_message_branches_and_the_original_stays(server: str):
    client = sdk(server)
    messages, extensions = talk(client, "hello", "Ada Lovelace", "ada@example.com")
    original = extensions[0]["conversation_id"]
    before = native(server, original)
    # the person edits their second message: the list up to it, then the new text
    edited = [*messages[:2], {"role": "user", "content": "Ada King"}]
    _, extension = ask(client, edited)
    assert extension["branched_from"] == original and extension["conversation_id"] != original
    branch = native(server, extension["conversation_id"])
    assert [e["user"] for e in branch["history"]] == [None, "hello", "Ada King"]
    assert native(server, original)["history"] == before["history"]  # the original, as it was
    # and the original goes on when its own list is sent
    messages.append({"role": "user", "content": "yes"})
    assert ask(client, messages)[1]["conversation_id"] == original


@pytest.mark.slow
def test_a_regeneration_branches_and_the_original_stays(server: str):
    client = sdk(server)
    messages, extensions = talk(client, "hello", "Ada Lovelace")
    original = extensions[0]["conversation_id"]
    before = native(server, original)
    _, extension = ask(client, messages[:-1])  # the last reply regenerated: the same list without it
    assert extension["branched_from"] == original
    assert native(server, original)["history"] == before["history"]
    assert native(server, extension["conversation_id"])["history_len"] == before["history_len"]


@pytest.mark.slow
def test_a_client_names_its_conversation(server: str):
    client = sdk(server)
    _, extensions = talk(client, "hello")
    named = extensions[0]["conversation_id"]
    # a fresh list (no history): the header, or metadata, says which conversation it goes on
    _, extension = ask(client, [{"role": "user", "content": "Ada"}], extra_headers={"X-Conversation-Id": named})
    assert extension["conversation_id"] == named
    _, extension = ask(client, [{"role": "user", "content": "ada@example.com"}], metadata={"conversation_id": named})
    assert extension["conversation_id"] == named
    assert native(server, named)["history_len"] == 4


@pytest.mark.slow
def test_two_clients_conversations_are_kept_apart(server: str):
    alice, bob = sdk(server, ALICE), sdk(server, BOB)
    said = ("hello", "Ada Lovelace")
    _, theirs = talk(alice, *said)
    _, ours = talk(bob, *said)  # the very same messages
    assert theirs[0]["conversation_id"] != ours[0]["conversation_id"]
    assert {e["conversation_id"] for e in ours} == {ours[0]["conversation_id"]}
    with pytest.raises(openai.NotFoundError):  # another client's conversation does not exist for bob
        ask(bob, [{"role": "user", "content": "x"}], extra_headers={"X-Conversation-Id": theirs[0]["conversation_id"]})


@pytest.mark.slow
def test_bad_requests_get_openai_errors(server: str):
    client = sdk(server)
    with pytest.raises(openai.NotFoundError) as unknown:
        ask(client, [{"role": "user", "content": "hi"}], model="no_such_model")
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    for token in ("", "wrong-token-0123456789abcdef"):
        with pytest.raises(openai.AuthenticationError) as refused:
            ask(
                openai.OpenAI(base_url=f"{server}/v1", api_key=token or "-", max_retries=0),
                [{"role": "user", "content": "hi"}],
            )
        assert refused.value.status_code == 401 and refused.value.body["type"] == "authentication_error"
    response = httpx.get(f"{server}/v1/models")  # no Authorization header at all
    assert response.status_code == 401 and set(response.json()["error"]) == {"message", "type", "param", "code"}
    image = [{"type": "image_url", "image_url": {"url": "x"}}]
    bad = {
        "messages": ([], "messages"),
        "last": ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes?"}], "messages"),
        "image": ([{"role": "user", "content": image}], "messages[0].content[0]"),
        "tool": ([{"role": "tool", "content": "42"}, {"role": "user", "content": "x"}], "messages[0].role"),
        "blank": ([{"role": "user", "content": "   "}], "messages"),
    }
    for name, (messages, param) in bad.items():
        with pytest.raises(openai.BadRequestError) as refused:
            ask(client, messages)
        assert refused.value.param == param, name
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, [{"role": "user", "content": "hi"}], n=2, stream=True)
    assert refused.value.param == "n"
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": "again"}]  # text parts are text
    assert ask(client, [{"role": "user", "content": parts}])[0]


@pytest.mark.slow
def test_the_index_survives_a_restart(tmp_path: Path):
    with serving(tmp_path) as base:
        messages, extensions = talk(sdk(base), "hello", "Ada Lovelace")
    with serving(tmp_path) as base:
        messages.append({"role": "user", "content": "ada@example.com"})
        assert ask(sdk(base), messages)[1]["conversation_id"] == extensions[0]["conversation_id"]


# -- in process: pauses and failed turns -----------------------------------------------------------


def in_process(llm: Any, hooks: Hooks | None = None, definition: Any = None) -> tuple[Any, TestClient]:
    app = create_app([definition or signup()], llm, hooks=hooks, store="memory:")
    http = TestClient(app, raise_server_exceptions=False)
    return openai.OpenAI(base_url="http://testserver/v1", api_key="-", http_client=http, max_retries=0), http


def asking_hooks(payload: dict[str, Any]) -> Hooks:
    hooks = Hooks()

    @hooks.on("state_enter", states=["ask_email"])
    def hold(**_: Any) -> None:
        raise Break("staff must approve", payload)

    return hooks


def test_a_pause_asks_its_question_and_takes_the_next_message_as_its_answer():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada"),
                       reply("ask_email", "And your email?")])  # fmt: skip
    hooks = asking_hooks({"question": "What is your staff code?", "answer_key": "staff_code"})
    client, http = in_process(llm, hooks)
    messages = [{"role": "user", "content": "Ada"}]
    content, extension = ask(client, messages, model="signup")
    assert extension["paused"] and extension["question"] == "What is your staff code?"
    assert content.endswith("What is your staff code?")
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "S-42"}]
    content, resumed = ask(client, messages, model="signup")
    assert not resumed["paused"] and resumed["conversation_id"] == extension["conversation_id"]
    assert content == "And your email?"
    assert http.get(f"/conversations/{extension['conversation_id']}").json()["context"]["staff_code"] == "S-42"


def test_a_pause_that_takes_no_message_says_so():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada")])
    client, _ = in_process(llm, asking_hooks({}))
    messages = [{"role": "user", "content": "Ada"}]
    content, extension = ask(client, messages, model="signup")
    assert extension["paused"] and extension["question"] == "staff must approve"
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "well?"}]
    with pytest.raises(openai.ConflictError) as refused:
        ask(client, messages, model="signup")
    assert refused.value.code == "conversation_paused"


def test_a_failed_turn_changes_nothing():
    down = LLMUnavailableError("openai/x: 503 overloaded", model="x", status_code=503)
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?"), down,
                       reply("ask_email", "Thanks Ada.", name="Ada")])  # fmt: skip
    client, http = in_process(llm)
    messages, extensions = talk_signup(client, "hello")
    messages.append({"role": "user", "content": "Ada"})
    with pytest.raises(openai.InternalServerError) as failed:
        ask(client, messages, model="signup")
    assert failed.value.status_code == 502 and failed.value.code == "provider_error"
    conversation_id = extensions[0]["conversation_id"]
    assert http.get(f"/conversations/{conversation_id}").json()["history_len"] == 2
    _, extension = ask(client, messages, model="signup")  # sent again: the same conversation, not a branch
    assert extension["conversation_id"] == conversation_id and extension["branched_from"] is None


def talk_signup(client: Any, *texts: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    extensions = []
    for text in texts:
        messages.append({"role": "user", "content": text})
        content, extension = ask(client, messages, model="signup")
        messages.append({"role": "assistant", "content": content})
        extensions.append(extension)
    return messages, extensions


BYE = {
    "name": "bye",
    "initial_state": "talk",
    "states": {
        "talk": {"purpose": "Chat", "transitions": [{"target_state": "end", "description": "The user leaves"}]},
        "end": {"purpose": "Say goodbye"},
    },
}


def test_an_ended_conversation_answers_410():
    llm = ScriptedLLM([reply("talk", "Hi!"), reply("end", "Bye.")])
    client, _ = in_process(llm, definition=llm_fsm.load(BYE))
    messages = [{"role": "user", "content": "bye"}]
    content, extension = ask(client, messages, model="bye")
    assert extension["ended"] and extension["status"] == "ended"
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "still there?"}]
    with pytest.raises(openai.APIStatusError) as ended:
        ask(client, messages, model="bye")
    assert ended.value.status_code == 410 and ended.value.code == "conversation_ended"


def test_transcript_points_end_after_assistant_messages():
    said = [("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")]
    found = points("x", said)
    assert [length for length, _ in found] == [4, 2]
    assert points("x", said[:2])[0] == found[1]  # a prefix's hash is the same however long the list
    assert points("y", said)[0] != found[0]  # and each definition has its own


def orders_with_approval(llm: Any) -> tuple[Any, TestClient, list[str]]:
    from tests.server.test_server import orders_needing_approval

    definition, hooks, ran = orders_needing_approval()
    client, http = in_process(llm, hooks, definition)
    return client, http, ran


def test_a_tool_call_waiting_for_approval_is_not_the_chat_users_to_approve():
    from llm_fsm.definition.texts import runtime_text
    from llm_fsm.testing import tool_calls

    llm = ScriptedLLM([reply("help", "How can I help?"), tool_calls(("find_order", {"order_id": "A-17"})),
                       reply("help", "A-17 has shipped."), reply("help", "You are welcome.")])  # fmt: skip
    client, http, ran = orders_with_approval(llm)
    waiting = runtime_text(signup(), "approval")  # the built-in English text
    messages = [{"role": "user", "content": "Where is A-17?"}]
    content, paused = ask(client, messages, model="orders")
    conversation_id = paused["conversation_id"]
    assert paused["paused"] and paused["question"] == waiting and content.endswith(waiting) and ran == []
    assert "May I run" not in content and any(f"/conversations/{conversation_id}/resume" in n for n in paused["notes"])
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "yes"}]
    response = http.post("/v1/chat/completions", json={"model": "orders", "messages": messages})
    assert response.status_code == 409 and response.json()["error"]["code"] == "conversation_paused"
    assert response.headers["x-should-retry"] == "false" and ran == []  # the SDK does not send it again
    assert response.headers["X-LLM-FSM-Conversation-Id"] == conversation_id
    message = response.json()["error"]["message"]
    assert f"POST /conversations/{conversation_id}/resume" in message and "{id}" not in message
    # a person approves it through the native route; the chat then goes on in the same conversation
    token = http.get(f"/conversations/{conversation_id}").json()["pending"]["token"]
    resumed = http.post(f"/conversations/{conversation_id}/resume", json={"token": token, "result": {"approved": True}})
    assert resumed.status_code == 200 and ran == ["A-17"]
    messages[-1] = {"role": "user", "content": "thanks"}
    content, after = ask(client, messages, model="orders")
    assert content == "You are welcome." and after["conversation_id"] == conversation_id
    assert after["branched_from"] is None and not after["paused"]


def test_a_stream_that_fails_after_it_started_ends_with_an_error_and_saves_nothing():
    down = LLMUnavailableError("openai/x: 503 overloaded", model="x", status_code=503)
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), down, reply("ask_name", "Hi! Your name?"),
                       reply("ask_email", "Thanks Ada.", name="Ada")])  # fmt: skip
    client, http = in_process(llm)
    messages = [{"role": "user", "content": "Ada"}]
    with pytest.raises(openai.APIError) as failed:
        list(client.chat.completions.create(model="signup", messages=messages, stream=True))
    assert "provider" in str(failed.value)
    content, extension = ask(client, messages, model="signup")  # sent again: a new conversation, as the first was
    assert extension["state"] == "ask_email" and extension["notes"] == []
    assert http.get(f"/conversations/{extension['conversation_id']}").json()["history_len"] == 2


def test_a_deleted_conversation_is_branched_from_its_mark():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?"),
                       reply("ask_email", "Thanks Ada.", name="Ada")])  # fmt: skip
    client, http = in_process(llm)
    messages, extensions = talk_signup(client, "hello")
    gone = extensions[0]["conversation_id"]
    assert http.delete(f"/conversations/{gone}").status_code == 204
    messages.append({"role": "user", "content": "Ada"})
    _, extension = ask(client, messages, model="signup")
    assert extension["branched_from"] == gone and extension["state"] == "ask_email"
    assert http.get(f"/conversations/{extension['conversation_id']}").json()["history_len"] == 3


def test_a_request_sent_again_with_its_idempotency_key_gets_the_kept_answer():
    thanks = reply("ask_email", "Thanks Ada.", name="Ada")
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), thanks, reply("ask_name", "Hi again! Your name?"), thanks])
    _, http = in_process(llm)
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}]}
    first = http.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    again = http.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["choices"] == first.json()["choices"] and again.json()["llm_fsm"] == first.json()["llm_fsm"]
    assert llm.calls == 2  # the turn ran once
    streamed = http.post("/v1/chat/completions", json={**body, "stream": True}, headers={"Idempotency-Key": "k-1"})
    assert streamed.headers["Idempotent-Replayed"] == "true" and streamed.text.endswith("data: [DONE]\n\n")
    other = {**body, "messages": [{"role": "user", "content": "Bob"}]}
    reused = http.post("/v1/chat/completions", json=other, headers={"Idempotency-Key": "k-1"})
    assert reused.status_code == 422 and reused.json()["error"]["code"] == "idempotency_key_reused"
    regenerated = http.post("/v1/chat/completions", json=body)  # no key, no retry: a regeneration (a branch)
    assert regenerated.json()["llm_fsm"]["conversation_id"] != first.json()["llm_fsm"]["conversation_id"]


def test_an_sdk_retry_of_an_answered_request_gets_the_kept_answer():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada")])
    _, http = in_process(llm)
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}]}
    first = http.post("/v1/chat/completions", json=body, headers={"X-Stainless-Retry-Count": "0"})
    retried = http.post("/v1/chat/completions", json=body, headers={"X-Stainless-Retry-Count": "1"})
    assert retried.status_code == 200 and retried.headers["Idempotent-Replayed"] == "true"
    assert retried.json()["llm_fsm"] == first.json()["llm_fsm"] and llm.calls == 2


class Clock:
    """``time`` for llm_fsm.server.openai_shapes: each reading a thousand seconds after the last, so that
    a completion made anew cannot have the first one's ``created`` by chance."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        self.now += 1000
        return self.now


def heads(response: httpx.Response) -> set[tuple[str, int]]:
    """The ``(id, created)`` of a completion, or of each chunk of a stream."""
    if response.headers["content-type"].startswith("application/json"):
        return {(response.json()["id"], response.json()["created"])}
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    return {(chunk["id"], chunk["created"]) for chunk in map(json.loads, lines)}


def test_a_replay_is_the_kept_completion_its_id_and_created_included(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("llm_fsm.server.openai_shapes.time", Clock())
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada"),
                       reply("ask_email", "Your email, please?")])  # fmt: skip
    _, http = in_process(llm)
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}]}
    first = http.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    (head,) = heads(first)
    for stream in (False, True, False):
        again = http.post("/v1/chat/completions", json={**body, "stream": stream}, headers={"Idempotency-Key": "k-1"})
        assert again.headers["Idempotent-Replayed"] == "true" and heads(again) == {head}  # every chunk's too
    retried = http.post("/v1/chat/completions", json=body, headers={"X-Stainless-Retry-Count": "1"})
    assert retried.headers["Idempotent-Replayed"] == "true" and heads(retried) == {head}
    said = first.json()["choices"][0]["message"]["content"]
    messages = [*body["messages"], {"role": "assistant", "content": said}, {"role": "user", "content": "hm"}]
    streamed = http.post("/v1/chat/completions", json={**body, "messages": messages, "stream": True})
    (other,) = heads(streamed)  # one id and one created for all the chunks of a stream
    assert other[0] != head[0] and other[1] != head[1]  # another turn: another completion
    replayed = http.post("/v1/chat/completions", json={**body, "messages": messages, "stream": True},
                         headers={"X-Stainless-Retry-Count": "2"})  # fmt: skip
    assert replayed.headers["Idempotent-Replayed"] == "true" and heads(replayed) == {other}
    assert llm.calls == 3


class LosingTransport(httpx.BaseTransport):
    """The TestClient's transport, except that the first answer is lost on its way back (a timeout once the
    turn ran), as a dropped connection loses it: the SDK retries, with ``X-Stainless-Retry-Count: 1``."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner, self.lost = inner, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answered = self.inner.handle_request(request)
        response = httpx.Response(answered.status_code, headers=answered.headers, content=answered.read())
        if not self.lost:
            self.lost.append(heads(response))
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


@pytest.mark.parametrize("stream", [False, True])
def test_an_sdk_retry_after_a_lost_answer_gets_the_same_completion(stream: bool):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada")])
    _, http = in_process(llm)
    losing = LosingTransport(http._transport)
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="-", max_retries=1,
                           http_client=httpx.Client(transport=losing))  # fmt: skip
    messages = [{"role": "user", "content": "Ada"}]
    if stream:
        chunks = list(client.chat.completions.create(model="signup", messages=messages, stream=True))
        got = {(chunk.id, chunk.created) for chunk in chunks}
    else:
        completion = client.chat.completions.create(model="signup", messages=messages)
        got = {(completion.id, completion.created)}
    assert got == losing.lost[0] and llm.calls == 2  # the lost completion, the turn run once


def test_a_replay_by_another_server_on_the_store_is_the_same_completion(tmp_path: Path):
    store = f"sqlite:{tmp_path / 'c.db'}"
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada")])
    one, two = (TestClient(create_app([signup()], llm, store=store)) for _ in range(2))
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}]}
    first = one.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    again = two.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k-1"})
    assert again.headers["Idempotent-Replayed"] == "true" and heads(again) == heads(first)


def test_a_lone_surrogate_is_replaced_not_a_500():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?"),
                       reply("ask_name", "Your name?")])  # fmt: skip
    client, http = in_process(llm)
    body = '{"model": "signup", "messages": [{"role": "user", "content": "hi \\ud800"}]}'
    response = http.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    said = response.json()["choices"][0]["message"]["content"]
    messages = [{"role": "user", "content": "hi \ufffd"}, {"role": "assistant", "content": said}]
    _, extension = ask(client, [*messages, {"role": "user", "content": "x"}], model="signup")
    assert extension["conversation_id"] == response.json()["llm_fsm"]["conversation_id"]


def test_resent_messages_are_matched_with_their_whitespace_stripped():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?"),
                       reply("ask_name", "Your name?")])  # fmt: skip
    client, _ = in_process(llm)
    messages, extensions = talk_signup(client, "  hello ")
    trimmed = [{"role": m["role"], "content": m["content"].strip() + "\n"} for m in messages]
    _, extension = ask(client, [*trimmed, {"role": "user", "content": "x"}], model="signup")
    assert extension["conversation_id"] == extensions[0]["conversation_id"] and extension["branched_from"] is None


def test_a_named_conversation_of_another_definition_or_none_is_refused():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?")])
    other = llm_fsm.load(BYE)
    app = create_app([signup(), other], llm, store="memory:")
    http = TestClient(app, raise_server_exceptions=False)
    made = http.post("/v1/chat/completions", json={"model": "signup", "messages": [{"role": "user", "content": "hi"}]})
    conversation_id = made.json()["llm_fsm"]["conversation_id"]
    body = {"model": "bye", "messages": [{"role": "user", "content": "hi"}]}
    wrong = http.post("/v1/chat/completions", json=body, headers={"X-Conversation-Id": conversation_id})
    assert wrong.status_code == 400 and "'signup'" in wrong.json()["error"]["message"]
    assert wrong.headers["X-LLM-FSM-Conversation-Id"] == conversation_id
    assert "'bye'" in wrong.json()["error"]["message"]
    long = "f" * 500
    missing = http.post("/v1/chat/completions", json={**body, "metadata": {"conversation_id": long}})
    error = missing.json()["error"]
    assert missing.status_code == 404 and error["param"] == "metadata.conversation_id" and long not in error["message"]
    missing = http.post("/v1/chat/completions", json=body, headers={"X-Conversation-Id": "0" * 32})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "X-Conversation-Id"
    assert "X-LLM-FSM-Conversation-Id" not in missing.headers


@pytest.mark.parametrize(
    ("message", "param", "says"),
    [
        ({"content": [{"type": "text"}]}, "messages[0].content[0].text", "text part without its 'text' field"),
        ({"content": [{"type": "text", "text": 1}]}, "messages[0].content[0].text", ".text is a number (1)"),
        ({"content": [{"text": "hi"}]}, "messages[0].content[0].type", "[0].type is missing"),
        ({"content": [{"type": "image_url", "image_url": {}}]}, "messages[0].content[0]", "type is 'image_url'"),
        ({"content": ["hi"]}, "messages[0].content[0]", 'is a string ("hi"), not a text part'),
        ({"content": []}, "messages[0].content", "content is an empty list"),
        ({}, "messages[0].content", "content is missing"),
        ({"content": 5}, "messages[0].content", "content is a number (5)"),
        ({"role": None, "content": "hi"}, "messages[0].role", "role is null"),
    ],
)
def test_a_bad_message_says_what_is_missing_or_wrong(message: dict[str, Any], param: str, says: str):
    """Before: a part without its text was "must be a text part, not 'text'"."""
    _, http = in_process(ScriptedLLM([]))
    body = {"model": "signup", "messages": [{"role": "user", **message}]}
    error = http.post("/v1/chat/completions", json=body).json()["error"]
    assert error["param"] == param and says in error["message"], error


def test_a_transcript_longer_than_the_body_limit_names_the_option_that_raises_it():
    """Turn 201 of a chat whose messages are 300 characters, at the default --max-body."""
    _, http = in_process(ScriptedLLM([]))
    said = [{"role": role, "content": role[0] * 300} for _ in range(200) for role in ("user", "assistant")]
    body = json.dumps({"model": "signup", "messages": [*said, {"role": "user", "content": "u" * 300}]}).encode()
    response = http.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    message = response.json()["error"]["message"]
    assert f"is {len(body)} bytes, more than the server's limit of 65536 bytes" in message
    assert "--max-body" in message and "a long chat" in message


def test_small_request_details():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name, please?")])
    app = create_app([signup()], llm, store="memory:", tokens={ALICE: "alice"})
    http = TestClient(app, raise_server_exceptions=False)
    refused = http.post("/v1/chat/completions", content=b"{not json", headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401  # the token is read before the body
    bad = http.post("/v1/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {ALICE}"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "body"
    body = {"model": "signup", "messages": [{"role": "user", "content": "hi"}], "stream": None}
    answered = http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {ALICE}"})
    assert answered.status_code == 200 and answered.json()["object"] == "chat.completion"


def test_a_pause_resumed_through_the_native_route_lets_the_chat_go_on():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ada.", name="Ada"),
                       reply("ask_email", "Your email?"), reply("ask_email", "Got it.")])  # fmt: skip
    client, http = in_process(llm, asking_hooks({}))
    messages = [{"role": "user", "content": "Ada"}]
    content, paused = ask(client, messages, model="signup")
    conversation_id = paused["conversation_id"]
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "ada@example.com"}]
    token = http.get(f"/conversations/{conversation_id}").json()["pending"]["token"]
    assert http.post(f"/conversations/{conversation_id}/resume", json={"token": token}).status_code == 200
    _, extension = ask(client, messages, model="signup")  # before the fix: 409 paused, for ever
    assert extension["conversation_id"] == conversation_id and extension["branched_from"] is None


def test_a_stream_is_data_lines_then_done_as_openai_frames_them():
    _, http = in_process(ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Email?", name="Ada")]))
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}], "stream": True}
    raw = http.post("/v1/chat/completions", json=body).content
    lines = re.findall(rb"data: (.*)\n\n", raw)
    assert b"".join(b"data: %s\n\n" % line for line in lines) == raw  # no event names, no CR, no comments
    assert lines[-1] == b"[DONE]" and [json.loads(line)["object"] for line in lines[:-1]] == [
        "chat.completion.chunk"
    ] * (len(lines) - 1)


def test_a_stream_that_fails_after_it_started_still_ends_with_done():
    down = LLMUnavailableError("openai/x: 503 overloaded", model="x", status_code=503)
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), down])
    _, http = in_process(llm)
    body = {"model": "signup", "messages": [{"role": "user", "content": "Ada"}], "stream": True}
    streamed = http.post("/v1/chat/completions", json=body)
    assert '"error"' in streamed.text and streamed.text.endswith("data: [DONE]\n\n")
