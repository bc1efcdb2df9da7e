"""Idempotency keys: a request sent again with the key of one whose turn was saved gets that turn's result,
and the turn runs once; for every store, across processes, in the library and through ``llm-fsm serve``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import llm_fsm
from llm_fsm.errors import IdempotencyKeyReused, ScriptExhausted
from llm_fsm.llm import Usage
from llm_fsm.memory.summaries import SummaryRun
from llm_fsm.server import create_app
from llm_fsm.server.auth import ANONYMOUS
from llm_fsm.snapshot import Rejection
from llm_fsm.store import Store, StoredConversation, aadvance, advance, open_store
from llm_fsm.store.idempotency import KEPT, fingerprint
from llm_fsm.testing import ScriptedLLM
from llm_fsm.tools.calling import ToolRun
from llm_fsm.turn.runner import TurnResult
from tests.conftest import reply
from tests.postgres_server import free_port
from tests.server.test_serve_cli import wait_until_serving
from tests.server.test_server import create, error_of, pausing_hooks, signup, sse
from tests.store.test_store import CHAT, url_for
from tests.subflows.test_subflows import DATA as SUBFLOWS
from tests.subflows.test_subflows import DOB, OPEN, TO_IDENTITY


@pytest.fixture(params=["memory", "file", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


def chat_llm(*messages: str) -> ScriptedLLM:
    """A model that answers each turn with the next message, staying in ``chat``; it fails past the last."""
    return ScriptedLLM([reply("chat", message) for message in messages])


def same(first: TurnResult, second: TurnResult) -> bool:
    """Whether two results answer alike, as JSON (a kept result came back from a store)."""
    return json.dumps(first.to_dict(), sort_keys=True) == json.dumps(second.to_dict(), sort_keys=True)


# -- the library, on every store -------------------------------------------------------------------------


def test_a_key_sent_again_returns_the_saved_result_in_another_process(store_url: str):
    chat = llm_fsm.load(CHAT)
    first_store, first_llm = open_store(store_url), chat_llm("hello", "noted")
    advance(first_store, "c1", chat, first_llm, None)
    first = advance(first_store, "c1", chat, first_llm, "tea please", idempotency_key="k-1")
    # another process: its own store connection and a model that would answer otherwise (or fail)
    second_store = first_store if store_url == "memory:" else open_store(store_url)
    again = advance(second_store, "c1", chat, chat_llm("a second turn"), "tea please", idempotency_key="k-1")
    assert same(first, again) and again.message == "noted"
    record = second_store.load("c1")
    assert record.version == 2 and record.snapshot.turns == 1 and len(record.snapshot.history) == 2
    later = advance(second_store, "c1", chat, chat_llm("more"), "and milk", idempotency_key="k-2")
    assert later.turn == 2 and later.message == "more"
    for store in {id(first_store): first_store, id(second_store): second_store}.values():
        store.close()


def test_the_async_api_keeps_keys_alike(store_url: str):
    async def scenario() -> Store:
        chat, store = llm_fsm.load(CHAT), open_store(store_url)
        await aadvance(store, "c1", chat, chat_llm("hello"), None, idempotency_key="open")
        first = await aadvance(store, "c1", chat, chat_llm("noted"), "tea", idempotency_key="k")
        again = await aadvance(store, "c1", chat, chat_llm(), "tea", idempotency_key="k")
        opening = await aadvance(store, "c1", chat, chat_llm(), None, idempotency_key="open")
        assert same(first, again) and opening.turn == 0 and opening.message == "hello"
        assert (await store.aload("c1")).snapshot.turns == 1
        with pytest.raises(IdempotencyKeyReused, match="sent before with another request"):
            await aadvance(store, "c1", chat, chat_llm("x"), "coffee", idempotency_key="k")
        return store

    asyncio.run(scenario()).close()


def test_a_key_sent_with_another_request_is_refused_and_changes_nothing(store_url: str):
    chat, store = llm_fsm.load(CHAT), open_store(store_url)
    advance(store, "c1", chat, chat_llm("hello", "noted"), "tea", idempotency_key="k")
    before = store.load("c1")
    with pytest.raises(IdempotencyKeyReused, match="'k' was sent before with another request") as caught:
        advance(store, "c1", chat, chat_llm("other"), "coffee", idempotency_key="k")
    assert store.load("c1") == before and caught.value.state == "chat"
    store.close()


def test_keys_are_per_conversation(store_url: str):
    chat, store = llm_fsm.load(CHAT), open_store(store_url)
    one = advance(store, "one", chat, chat_llm("for one"), "hi", idempotency_key="k")
    two = advance(store, "two", chat, chat_llm("for two"), "hi", idempotency_key="k")
    assert (one.message, two.message) == ("for one", "for two")
    store.close()


def test_a_turn_that_failed_keeps_no_key_and_runs_when_sent_again(store_url: str):
    chat, store = llm_fsm.load(CHAT), open_store(store_url)
    with pytest.raises(ScriptExhausted):
        advance(store, "c1", chat, chat_llm(), "tea", idempotency_key="k")
    assert store.load("c1") is None
    result = advance(store, "c1", chat, chat_llm("now it works"), "tea", idempotency_key="k")
    record = store.load("c1")
    assert result.message == "now it works" and record.version == 1 and record.snapshot.idempotency[0].key == "k"
    store.close()


def test_a_resume_sent_again_returns_its_result_not_a_used_token_error(store_url: str):
    definition, store, hooks = signup(), open_store(store_url), pausing_hooks()
    llm = ScriptedLLM([reply("ask_email", "Thanks, email?", name="Ann"), reply("ask_email", "Approved. Email?")])
    paused = advance(store, "c1", definition, llm, "Ann", hooks=hooks)
    token = paused.pending.token

    def approve(conversation: llm_fsm.Conversation) -> TurnResult:
        return conversation.resume(token, {"approved": True})

    asked = fingerprint("resume", [token, {"approved": True}])
    first = advance(store, "c1", definition, llm, None, action=approve, idempotency_key="r", fingerprint=asked)
    again = advance(store, "c1", definition, llm, None, action=approve, idempotency_key="r", fingerprint=asked)
    assert same(first, again) and again.message == "Approved. Email?"
    store.close()


# -- StoredConversation and the snapshot -------------------------------------------------------------------


def test_a_stored_conversation_says_when_it_replayed_and_runs_no_action():
    store, chat = open_store("memory:"), llm_fsm.load(CHAT)
    stored = StoredConversation(store, "c1", lambda snap: llm_fsm.Conversation(chat, chat_llm("hello", "noted")))
    ran: list[str] = []

    def send(conversation: llm_fsm.Conversation) -> TurnResult:
        ran.append("turn")
        return conversation.send("tea")

    first = stored.run(send, idempotency_key="k", fingerprint="tea")
    assert not stored.replayed
    again = stored.run(send, idempotency_key="k", fingerprint="tea")
    assert stored.replayed and ran == ["turn"] and same(first, again)
    stored.run(lambda c: c.send("milk"), idempotency_key="k2")  # a later turn keeps the earlier keys
    assert [kept.key for kept in store.load("c1").snapshot.idempotency] == ["k", "k2"]
    assert stored.run(send, idempotency_key="k") is not None and stored.replayed, "no fingerprint: the key alone"
    with pytest.raises(ValueError, match="non-empty str of at most 255"):
        stored.run(send, idempotency_key="")


def test_a_conversation_keeps_the_last_keys_only():
    store, chat = open_store("memory:"), llm_fsm.load(CHAT)
    llm = chat_llm(*[f"reply {n}" for n in range(KEPT + 2)])
    for n in range(KEPT + 1):
        advance(store, "c1", chat, llm, f"message {n}", idempotency_key=f"k{n}")
    kept = store.load("c1").snapshot.idempotency
    assert len(kept) == KEPT and kept[0].key == "k1" and kept[-1].key == f"k{KEPT}"
    forgotten = advance(store, "c1", chat, llm, "message 0", idempotency_key="k0")  # runs again: it was forgotten
    assert forgotten.message == f"reply {KEPT + 1}"


def test_kept_keys_survive_snapshot_and_restore_and_never_reach_the_model(store_url: str):
    chat, store = llm_fsm.load(CHAT), open_store(store_url)
    advance(store, "c1", chat, chat_llm("noted"), "tea", idempotency_key="secret-key-4711")
    llm = chat_llm("later")
    advance(store, "c1", chat, llm, "milk")
    snapshot = store.load("c1").snapshot
    assert [kept.key for kept in snapshot.idempotency] == ["secret-key-4711"]
    restored = llm_fsm.Conversation.restore(snapshot.model_dump_json(), chat, chat_llm())
    assert restored.snapshot() == snapshot
    prompt = json.dumps([message for request in llm.requests for message in request.messages])
    assert "secret-key-4711" not in prompt and "idempotency" not in prompt and "noted" in prompt
    store.close()


def test_keys_are_kept_through_sub_conversations():
    claim = llm_fsm.load(SUBFLOWS / "claim.json")
    store, llm = open_store("memory:"), ScriptedLLM([OPEN, TO_IDENTITY, DOB])
    stored = StoredConversation(store, "c1", lambda snap: llm_fsm.Conversation(claim, llm))
    stored.run(lambda c: c.start(), idempotency_key="a")
    pushed = stored.run(lambda c: c.send("P1, I'm Ann"), idempotency_key="b")
    stored.run(lambda c: c.send("1990-01-01"), idempotency_key="c")
    snapshot = store.load("c1").snapshot
    assert [kept.key for kept in snapshot.idempotency] == ["a", "b", "c"] and snapshot.stack
    assert all(frame.snapshot.idempotency == () for frame in snapshot.stack), "kept by the root only"
    again = StoredConversation(store, "c1", lambda snap: llm_fsm.Conversation.restore(snap, claim, ScriptedLLM([])))
    assert same(again.run(lambda c: c.send("P1, I'm Ann"), idempotency_key="b"), pushed) and pushed.frames


def test_a_keyed_first_request_that_opens_in_a_sub_conversation_has_the_same_uids_in_every_retry(tmp_path):
    # a definition that starts in a subflow state: the new conversation has a frame before its first turn,
    # and its uid, like the root's, comes from the store id and the key (the first turn's tool keys do)
    data = json.loads((SUBFLOWS / "claim.json").read_text())
    (tmp_path / "claim.json").write_text(json.dumps({**data, "initial_state": "identity"}))
    (tmp_path / "identity_check.json").write_text((SUBFLOWS / "identity_check.json").read_text())
    claim = llm_fsm.load(tmp_path / "claim.json")

    def first_request() -> llm_fsm.snapshot.Snapshot:
        store = open_store("memory:")  # each retry finds nothing stored
        llm = ScriptedLLM([reply("ask_dob", "Your date of birth?")])
        stored = StoredConversation(store, "c1", lambda snap: llm_fsm.Conversation(claim, llm))
        assert stored.run(lambda c: c.start(), idempotency_key="k").message == "Your date of birth?"
        return store.load("c1").snapshot

    first, retry = first_request(), first_request()
    assert [f.snapshot.definition_name for f in first.stack] == ["identity_check"]
    assert (first.uid, first.stack[0].snapshot.uid) == (retry.uid, retry.stack[0].snapshot.uid)
    assert first.uid != first.stack[0].snapshot.uid


def test_an_approved_call_of_a_stored_conversation_is_saved_before_and_after_it_runs(tmp_path):
    from tests.tools.test_tools import OPENING, SUPPORT, make_hooks, tool_calls

    support, ran = llm_fsm.load(SUPPORT), []
    store, hooks = open_store(f"sqlite://{tmp_path}/c.db"), make_hooks(ran)
    llm = ScriptedLLM([OPENING, tool_calls(("refund", {"order_id": "A-5"})), reply("ask", "Refunded.")])
    advance(store, "c", support, llm, None, hooks=hooks)
    token = advance(store, "c", support, llm, "refund A-5", hooks=hooks).pending.token
    paused = store.load("c").version
    result = advance(store, "c", support, llm, None, hooks=hooks, action=lambda c: c.resume(token, {"approved": True}))
    assert ran == ["refund:A-5"] and result.message == "Refunded."
    assert store.load("c").version == paused + 3  # "running", then its result, then the turn
    store.close()


def test_a_fingerprint_takes_any_text_even_a_lone_surrogate():
    # what a client sends may hold a lone surrogate (JSON "\\ud800"): it is fingerprinted, not refused
    assert fingerprint("send", "a\ud800") == fingerprint("send", "a\ud800") != fingerprint("send", "a")
    assert fingerprint("send", "tea") == hashlib.sha256(b'["send","tea"]').hexdigest()


def test_replayed_says_whether_the_last_run_gave_a_kept_answer():
    chat, store = llm_fsm.load(CHAT), open_store("memory:")
    stored = StoredConversation(store, "c1", lambda snap: llm_fsm.Conversation(chat, chat_llm("hello", "noted")))
    assert stored.replayed is False  # nothing run yet
    stored.run(lambda c: c.start(), idempotency_key="a")
    assert stored.replayed is False
    stored.run(lambda c: c.start(), idempotency_key="a")
    assert stored.replayed is True
    stored.run(lambda c: c.send("tea"))
    assert stored.replayed is False


def test_two_requests_with_one_key_at_once_run_one_turn(store_url: str):
    async def both() -> tuple[list[TurnResult], Store]:
        chat, store = llm_fsm.load(CHAT), open_store(store_url)
        await aadvance(store, "c1", chat, chat_llm("hello"), None)
        llm = chat_llm("noted")  # one reply: a second turn would fail
        sent = [aadvance(store, "c1", chat, llm, "tea", idempotency_key="k", wait=60) for _ in range(2)]
        return list(await asyncio.gather(*sent)), store

    (first, second), store = asyncio.run(both())
    assert same(first, second) and store.load("c1").snapshot.turns == 1
    store.close()


def test_a_snapshot_saved_before_keys_existed_still_loads():
    conversation = llm_fsm.Conversation(llm_fsm.load(CHAT), chat_llm("hello"))
    conversation.send("hi")
    old = conversation.snapshot().model_dump(mode="json")
    del old["idempotency"]
    restored = llm_fsm.Conversation.restore(old, llm_fsm.load(CHAT), chat_llm())
    assert restored.snapshot().idempotency == () and restored.history == conversation.history


def test_a_turn_result_comes_back_from_its_dict():
    llm = ScriptedLLM([reply("ask_email", "Email?", name="Ann")])
    paused = llm_fsm.Conversation(signup(), llm, hooks=pausing_hooks()).send("Ann")
    assert paused.pending is not None
    refused = Rejection(kind="target", reason="no way", target_state="z")
    ran = ToolRun(id="t1", name="find", arguments={"q": 1}, result=[1], duration=0.5, approval="approved")
    full = TurnResult(
        message="m", state="b", previous_state="a", user="u", turn=3, context_updates={"x": 1}, rejected=(refused,),
        llm_calls=2, usage=Usage(1, 2, 3, 0.5), latency=0.0123456, ended=True, context={"x": 1}, status="ended",
        summary=SummaryRun(0, 4, Usage(5, 6, 11), "e", True, 40), frames=(("root", "a"), ("sub", "b")),
        ran_in=("sub", "b"), memory_updates={"notes": "n"}, tool_calls=(ran,),
    )  # fmt: skip
    for result in (paused, full):
        data = json.loads(json.dumps(result.to_dict()))
        assert json.loads(json.dumps(TurnResult.from_dict(data).to_dict())) == data


# -- llm-fsm serve, in process ---------------------------------------------------------------------------


def http(llm: Any, **options: Any) -> TestClient:
    options.setdefault("store", "memory:")
    return TestClient(create_app([signup()], llm, **options), raise_server_exceptions=False)


def test_a_message_sent_again_with_its_key_gets_the_first_answer():
    client = http(ScriptedLLM([reply("ask_name", "Name?"), reply("ask_email", "Email?", name="Ann")]))
    cid = create(client)["id"]
    key = {"Idempotency-Key": "0b6c4a1e-3c1f-4d59-9d5f-3f2ad1f0c001"}
    first = client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=key)
    again = client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=key)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    assert client.get(f"/conversations/{cid}").json()["turns"] == 1
    quoted = {"Idempotency-Key": '"0b6c4a1e-3c1f-4d59-9d5f-3f2ad1f0c001"'}  # the draft's structured-field string
    assert client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=quoted).json() == first.json()
    other = client.post(f"/conversations/{cid}/messages", json={"message": "Bob"}, headers=key)
    error = error_of(other, 422, "idempotency_key_reused")
    assert "Idempotency-Key" in error["message"] and "new key" in error["message"]


def test_a_stream_sent_again_gets_the_kept_result_as_one_delta():
    client = http(ScriptedLLM([reply("ask_name", "Name?"), reply("ask_email", "Thanks Ann! Email?", name="Ann")]))
    cid = create(client)["id"]
    key = {"Idempotency-Key": "stream-1"}
    with client.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}, headers=key) as response:
        first = list(sse(response.iter_lines()))
    with client.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}, headers=key) as response:
        assert response.headers["Idempotent-Replayed"] == "true"
        again = list(sse(response.iter_lines()))
    assert again == [("delta", {"text": "Thanks Ann! Email?"}), first[-1]]
    sent = client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=key)
    assert sent.json() == first[-1][1], "a message and its stream are the same turn"
    error_of(client.post(f"/conversations/{cid}/stream", json={"message": "Bo"}, headers=key), 422,
             "idempotency_key_reused")  # fmt: skip


def test_a_creation_sent_again_gets_the_same_conversation():
    client = http(ScriptedLLM([reply("ask_name", "Hello! Your name?")]))
    key = {"Idempotency-Key": "create-1"}
    first = client.post("/conversations", json={"definition": "signup"}, headers=key)
    again = client.post("/conversations", json={"definition": "signup"}, headers=key)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() and again.headers["Location"] == f"/conversations/{first.json()['id']}"
    assert again.headers["Idempotent-Replayed"] == "true" and first.json()["conversation"]["turns"] == 0
    other = client.post("/conversations", json={"definition": "signup", "context": {"x": 1}}, headers=key)
    error_of(other, 422, "idempotency_key_reused")
    unstarted = {"Idempotency-Key": "create-2"}
    made = client.post("/conversations", json={"start": False}, headers=unstarted).json()
    assert client.post("/conversations", json={"start": False}, headers=unstarted).json()["id"] == made["id"]
    assert made["id"] != first.json()["id"] and made["result"] is None


def test_a_creation_whose_answer_is_no_longer_kept_is_a_conflict():
    client = http(ScriptedLLM([reply("ask_name", f"Name? {n}") for n in range(KEPT + 1)]))
    key = {"Idempotency-Key": "create-old"}
    cid = client.post("/conversations", json={}, headers=key).json()["id"]
    for n in range(KEPT):  # the conversation's later keyed turns push the creation's answer out
        client.post(f"/conversations/{cid}/messages", json={"message": f"m{n}"}, headers={"Idempotency-Key": f"k{n}"})
    again = client.post("/conversations", json={}, headers=key)
    assert "made with this Idempotency-Key: use a new key" in error_of(again, 409, "conversation_conflict")["message"]
    assert client.get(f"/conversations/{cid}").json()["turns"] == KEPT


def test_a_resume_sent_again_gets_its_answer():
    llm = ScriptedLLM([reply("ask_name", "Name?"), reply("ask_email", "Email?", name="Ann"), reply("ask_email", "OK")])
    client = http(llm, hooks=pausing_hooks())
    cid = create(client)["id"]
    token = client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}).json()["pending"]["token"]
    key, body = {"Idempotency-Key": "resume-1"}, {"token": token, "result": {"approved": True}}
    first = client.post(f"/conversations/{cid}/resume", json=body, headers=key)
    again = client.post(f"/conversations/{cid}/resume", json=body, headers=key)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    error_of(client.post(f"/conversations/{cid}/resume", json=body), 409, "resume_refused")


@pytest.mark.parametrize("bad", [b"", b"x" * 256, "caf\u00e9".encode("latin-1"), b"a\tb"])
def test_a_key_that_cannot_be_one_is_a_bad_request(bad: bytes):
    client = http(ScriptedLLM([reply("ask_name", "Name?")]))
    headers = {"Idempotency-Key": bad}
    refused = client.post("/conversations", json={}, headers=headers)
    assert (
        "Idempotency-Key header must be 1-255 printable ASCII" in error_of(refused, 400, "invalid_request")["message"]
    )


def test_a_key_header_sent_twice_is_a_bad_request_not_a_guess():
    llm = ScriptedLLM([reply("ask_name", "Name?"), reply("ask_email", "Email?", name="Ann")])
    client = http(llm)
    cid = create(client)["id"]
    twice = [("Idempotency-Key", "k-1"), ("Idempotency-Key", "k-2")]
    refused = client.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=twice)
    assert "more than once" in error_of(refused, 400, "invalid_request")["message"]
    assert len(llm.requests) == 1 and client.get(f"/conversations/{cid}").json()["turns"] == 0


# -- a real llm-fsm serve process, killed after it saved a turn --------------------------------------------


@contextmanager
def serving(definition: Path, script: Path, store: str, log: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A real ``llm-fsm serve`` process on ``store``, answering with the replies in ``script``."""
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "llm-fsm"), "serve", str(definition), "--model", f"scripted:{script}",
        "--store", store, "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "LLM_FSM_HOME": str(log.parent)}
    env.pop("LLM_FSM_SERVER_TOKENS", None)
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(process, base, 60)
        yield process, base
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)


def script(tmp_path: Path, name: str, *messages: str) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps([reply("chat", message) for message in messages]), encoding="utf-8")
    return path


def send_unread(base: str, path: str, body: dict[str, Any], key: str) -> socket.socket:
    """POST a request and read nothing back: a client whose answer is lost."""
    host, port = base.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Idempotency-Key: {key}\r\nContent-Length: {len(data)}\r\n\r\n")  # fmt: skip
    connection = socket.create_connection((host, int(port)))
    connection.sendall(head.encode() + data)
    return connection


def wait_for_version(store_url: str, key: str, version: int) -> None:
    """Until the store holds ``version`` of the conversation (the server saved the turn), however long it takes."""
    store = open_store(store_url)
    try:
        while (record := store.load(key)) is None or record.version < version:
            time.sleep(0.02)
    finally:
        store.close()


@pytest.mark.slow
def test_a_turn_saved_by_a_killed_server_is_answered_once_by_the_next(tmp_path: Path):
    definition = tmp_path / "chat.json"
    definition.write_text(json.dumps(CHAT), encoding="utf-8")
    store_url = f"sqlite:{tmp_path / 'c.db'}"
    first_model = script(tmp_path, "first", "hello", "from the first server")
    with serving(definition, first_model, store_url, tmp_path / "first.log") as (process, base):
        cid = httpx.post(f"{base}/conversations", json={}).json()["id"]
        stored_as = f"{ANONYMOUS}@{cid}"
        lost = send_unread(base, f"/conversations/{cid}/messages", {"message": "tea"}, "turn-1")
        wait_for_version(store_url, stored_as, 2)  # the turn is saved; its answer is not read
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        lost.close()
    second_model = script(tmp_path, "second", "from the second server", "more")
    with serving(definition, second_model, store_url, tmp_path / "second.log") as (process, base):
        again = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "tea"},
                           headers={"Idempotency-Key": "turn-1"})  # fmt: skip
        assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true", again.text
        assert again.json()["message"] == "from the first server" and again.json()["turn"] == 1
        shown = httpx.get(f"{base}/conversations/{cid}").json()
        assert shown["turns"] == 1 and [e["user"] for e in shown["history"]] == [None, "tea"]
        refused = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "coffee"},
                             headers={"Idempotency-Key": "turn-1"})  # fmt: skip
        assert refused.status_code == 422 and refused.json()["error"]["type"] == "idempotency_key_reused"
        answered = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "milk"},
                              headers={"Idempotency-Key": "turn-2"})  # fmt: skip
        assert answered.json()["message"] == "from the second server", "the replay made no model call"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    third_model = script(tmp_path, "third", "from the third server")
    with serving(definition, third_model, store_url, tmp_path / "third.log") as (_, base):
        again = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "milk"},
                           headers={"Idempotency-Key": "turn-2"})  # fmt: skip
        assert again.json() == answered.json(), "the answer the client read, word for word"
        assert httpx.get(f"{base}/conversations/{cid}").json()["turns"] == 2


# -- a keyed request that creates its conversation: its first turn's tool keys survive a retry -----------

PAYDESK = {
    "name": "paydesk",
    "initial_state": "desk",
    "tools": {"charge": {"description": "Charge a card"}},
    "states": {
        "desk": {"purpose": "Take payments", "tools": ["charge"], "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Paid", "transitions": []},
    },
}


def charging_hooks(keys: list[str]) -> llm_fsm.Hooks:
    hooks = llm_fsm.Hooks()

    @hooks.tool()
    def charge(amount: float, idempotency_key: str) -> dict[str, bool]:
        """Charge a card."""
        keys.append(idempotency_key)
        return {"ok": True}

    return hooks


def charging_llm(then: Any) -> ScriptedLLM:
    """Asks for a charge, then answers with ``then`` (an exception: the turn fails after the charge ran)."""
    return ScriptedLLM([{"tool_calls": [{"name": "charge", "arguments": {"amount": 5}}]}, then])


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_keyed_first_turn_sent_again_gives_its_tool_calls_the_same_keys(form: str, tmp_path: Path):
    paydesk, keys = llm_fsm.load(PAYDESK), []
    hooks, store = charging_hooks(keys), open_store(f"sqlite:{tmp_path / 'c.db'}")

    def turn(llm: ScriptedLLM, key: str = "req-1", cid: str = "u1") -> TurnResult:
        if form == "sync":
            return advance(store, cid, paydesk, llm, "charge me 5", hooks=hooks, idempotency_key=key)
        return asyncio.run(aadvance(store, cid, paydesk, llm, "charge me 5", hooks=hooks, idempotency_key=key))

    with pytest.raises(llm_fsm.LLMError):  # the charge ran, the turn failed: nothing saved
        turn(charging_llm(llm_fsm.LLMError("provider down")))
    assert store.load("u1") is None
    result = turn(charging_llm(reply("desk", "Charged.")))  # the retry makes the conversation again
    assert keys[0] == keys[1] == result.tool_calls[0].idempotency_key
    turn(charging_llm(reply("desk", "Charged.")), key="req-2", cid="u2")  # another request: another key
    turn(charging_llm(reply("desk", "Charged.")), key="req-1", cid="u3")  # the same key on another conversation
    assert len(set(keys[1:])) == 3
    store.close()


def test_a_keyed_creation_sent_again_gives_its_opening_tool_calls_the_same_keys(tmp_path: Path):
    keys: list[str] = []
    hooks, url, key = charging_hooks(keys), f"sqlite:{tmp_path / 'c.db'}", {"Idempotency-Key": "create-paid"}
    for then, status in ((llm_fsm.LLMError("provider down"), 502), (reply("desk", "Charged."), 201)):
        app = create_app([llm_fsm.load(PAYDESK)], charging_llm(then), store=url, hooks=hooks)
        assert TestClient(app).post("/conversations", json={}, headers=key).status_code == status
    assert len(keys) == 2 and keys[0] == keys[1]
