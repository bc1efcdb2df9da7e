"""The HTTP API (llm_fsm.server): every route through FastAPI's TestClient, and streaming, disconnects and
concurrency against a real uvicorn server on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

import llm_fsm
from llm_fsm import Break, Hooks
from llm_fsm.errors import DefinitionError, LLMAuthError, LLMUnavailableError, StoreError
from llm_fsm.llm import LLMRequest, LLMResponse
from llm_fsm.server import create_app
from llm_fsm.server.auth import TokenError, tokens_from_file, tokens_from_text
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM, tool_calls
from tests.conftest import SIGNUP, reply, start_redis

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef00"
TOKENS = {ALICE: "alice", BOB: "bob"}
HEX32 = re.compile(r"^[0-9a-f]{32}$")

TOOLS = {
    "name": "orders",
    "initial_state": "help",
    "tools": {
        "find_order": {
            "description": "Find an order by its id",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        }
    },
    "states": {
        "help": {
            "purpose": "Help with an order",
            "tools": ["find_order"],
            "transitions": [{"target_state": "done", "description": "The user is done"}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}


def signup() -> llm_fsm.FSMDefinition:
    return llm_fsm.load(json.loads(json.dumps(SIGNUP)))


def pausing_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.on("state_enter", states=["ask_email"])
    def hold(*, context: dict[str, Any], **_: Any) -> None:
        raise Break("staff must approve", {"name": context["name"]})

    return hooks


def client(llm: Any, definitions: Any = None, **options: Any) -> TestClient:
    options.setdefault("store", "memory:")
    app = create_app(definitions if definitions is not None else [signup()], llm, **options)
    return TestClient(app, raise_server_exceptions=False)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def error_of(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """The error body, checked: its status, its stable type, a message, and no traceback anywhere."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text and 'File "' not in response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == kind and error["status"] == status and error["message"]
    return error


def create(http: TestClient, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
    response = http.post("/conversations", json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) for each Server-Sent Event of a stream's lines."""
    name = None
    for line in lines:
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: ") and name is not None:
            yield name, json.loads(line[len("data: ") :])
            name = None


# -- definitions -----------------------------------------------------------------------------------


def test_definitions_are_listed_with_their_states_and_mermaid_graphs():
    tools = llm_fsm.load(TOOLS)
    hooks = Hooks()

    @hooks.tool()
    def find_order(order_id: str) -> dict[str, str]:
        return {"status": "shipped"}

    http = client(ScriptedLLM(), [signup(), tools], hooks=hooks)
    listed = http.get("/definitions").json()["definitions"]
    assert [d["name"] for d in listed] == ["signup", "orders"]
    one = http.get("/definitions/signup").json()
    assert one["initial_state"] == "ask_name"
    assert one["states"]["done"] == {"purpose": "Thank the user", "terminal": True, "transitions": []}
    assert one["states"]["ask_email"]["transitions"] == ["done", "ask_name"]
    assert one["mermaid"].startswith("stateDiagram-v2") and "ask_email" in one["mermaid"]
    error_of(http.get("/definitions/nope"), 404, "not_found")


# -- conversations: the happy paths ------------------------------------------------------------------


def test_create_send_get_and_delete_a_conversation():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ann! Email?", name="Ann")])
    http = client(llm)
    created = http.post("/conversations", json={"definition": "signup"})
    assert created.status_code == 201
    body = created.json()
    cid = body["id"]
    assert HEX32.match(cid) and created.headers["location"] == f"/conversations/{cid}"
    assert body["result"]["message"] == "Hi! Your name?" and body["result"]["turn"] == 0
    assert body["conversation"]["state"] == "ask_name" and body["conversation"]["version"] == 1

    turn = http.post(f"/conversations/{cid}/messages", json={"message": "I'm Ann"})
    assert turn.status_code == 200
    result = turn.json()
    assert result["message"] == "Thanks Ann! Email?" and result["state"] == "ask_email"
    assert result["previous_state"] == "ask_name" and result["context_updates"] == {"name": "Ann"}
    assert result["llm_calls"] == 1 and result["user"] == "I'm Ann"

    got = http.get(f"/conversations/{cid}").json()
    assert got["id"] == cid and got["definition"] == "signup" and got["state"] == "ask_email"
    assert got["status"] == "active" and got["turns"] == 1 and got["version"] == 2
    assert got["context"] == {"name": "Ann"}
    assert got["provenance"] == {"name": {"by": "llm", "turn": 1}}
    assert got["history"] == [
        {"user": None, "assistant": "Hi! Your name?", "state": "ask_name"},
        {"user": "I'm Ann", "assistant": "Thanks Ann! Email?", "state": "ask_email"},
    ]
    assert llm.requests[1].messages[-1]["content"] == "I'm Ann"  # the message reached the model as the user turn

    assert http.delete(f"/conversations/{cid}").status_code == 204
    error_of(http.get(f"/conversations/{cid}"), 404, "not_found")
    error_of(http.delete(f"/conversations/{cid}"), 404, "not_found")


def test_a_conversation_shows_its_working_memory_and_running_summary():
    notes = {
        "name": "notes",
        "initial_state": "talk",
        "summaries": {"batch": 1},
        "memory": {"slots": {"facts": {"description": "Facts the user gave", "max_chars": 80}}},
        "states": {"talk": {"purpose": "Talk", "transitions": [{"target_state": "bye"}]}, "bye": {"purpose": "Bye"}},
    }
    remembered = reply("talk", "Noted: you fly on Friday.")
    remembered["transition"]["memory_update"] = {"facts": "flies Friday"}
    llm = ScriptedLLM([reply("talk", "Hi!"), remembered, reply("talk", "Sure.")], summaries=lambda _: {"summary": "S"})
    window = llm_fsm.PromptBuilder(settings=llm_fsm.PromptSettings(history_window=1))
    http = client(llm, [llm_fsm.load(notes)], conversation_options={"prompt": window})
    cid = create(http, definition="notes")["id"]
    assert http.get(f"/conversations/{cid}").json()["memory"] == {"facts": ""}
    for text in ("I fly on Friday", "Thanks"):
        assert http.post(f"/conversations/{cid}/messages", json={"message": text}).status_code == 200
    got = http.get(f"/conversations/{cid}").json()
    assert got["memory"] == {"facts": "flies Friday"}
    assert got["summary"]["text"] == "S" and got["summary"]["through"] >= 1 and got["summary"]["error"] is None


def test_a_conversation_starts_at_a_state_with_a_context_and_without_an_opening():
    llm = ScriptedLLM([reply("done", "All done, Ann.", email="ann@example.com")])
    http = client(llm)
    body = create(http, state="ask_email", context={"name": "Ann", "approved": True}, start=False)
    assert body["result"] is None and llm.calls == 0
    conversation = body["conversation"]
    assert conversation["state"] == "ask_email" and conversation["history"] == []
    assert conversation["provenance"]["approved"] == {"by": "user_code", "turn": 0}
    result = http.post(f"/conversations/{body['id']}/messages", json={"message": "ann@example.com"}).json()
    assert result["state"] == "done" and result["ended"] is True


def test_bad_starts_are_refused_and_store_nothing():
    store = open_store("memory:")
    http = client(ScriptedLLM(), [signup(), llm_fsm.load({**SIGNUP, "name": "other"})], store=store)
    error = error_of(
        http.post("/conversations", json={"definition": "signup", "state": "nowhere"}), 400, "invalid_request"
    )
    assert "nowhere" in error["message"] and "ask_name" in error["message"]
    error_of(http.post("/conversations", json={"definition": "nope"}), 404, "not_found")
    assert "signup" in error_of(http.post("/conversations", json={}), 400, "invalid_request")["message"]
    nan = b'{"definition": "signup", "context": {"score": NaN}}'  # parsed, but not JSON data: never stored
    error = error_of(
        http.post("/conversations", content=nan, headers={"Content-Type": "application/json"}), 400, "invalid_request"
    )
    assert "score" in error["message"]
    assert store.list() == []


def test_ids_are_128_random_bits_from_secrets(monkeypatch: pytest.MonkeyPatch):
    import llm_fsm.server.service as server_app

    asked = []
    real = server_app.secrets.token_hex

    def token_hex(nbytes: int) -> str:
        asked.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(server_app.secrets, "token_hex", token_hex)
    http = client(ScriptedLLM())
    ids = {create(http, start=False)["id"] for _ in range(20)}
    assert asked == [16] * 20 and len(ids) == 20 and all(HEX32.match(i) for i in ids)


def test_a_streamed_turn_sends_deltas_then_the_result():
    llm = ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann! What is your email?", name="Ann")])
    http = client(llm)
    cid = create(http)["id"]
    with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = list(sse(response.iter_lines()))
    names = [name for name, _ in events]
    assert names[-1] == "result" and set(names[:-1]) == {"delta"} and len(names) > 2
    text = "".join(data["text"] for name, data in events if name == "delta")
    assert text == events[-1][1]["message"] == "Thanks Ann! What is your email?"
    assert http.get(f"/conversations/{cid}").json()["turns"] == 1


def test_a_streamed_turn_is_framed_with_one_event_and_one_data_line_each_ending_in_lf():
    http = client(ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann! Email?", name="Ann")]))
    cid = create(http)["id"]
    body = http.post(f"/conversations/{cid}/stream", json={"message": "Ann"}).content
    blocks = re.findall(rb"event: (\w+)\ndata: (.*)\n\n", body)
    assert b"".join(b"event: %s\ndata: %s\n\n" % block for block in blocks) == body  # nothing else, no CR
    assert blocks[-1][0] == b"result" and json.loads(blocks[-1][1])["message"] == "Thanks Ann! Email?"


def test_the_opening_turn_may_stream_too():
    http = client(ScriptedLLM([reply("ask_name", "Hello there, who are you?")]))
    cid = create(http, start=False)["id"]
    with http.stream("POST", f"/conversations/{cid}/stream", json={}) as response:
        events = list(sse(response.iter_lines()))
    assert events[-1][0] == "result" and events[-1][1]["turn"] == 0
    error = error_of(http.post(f"/conversations/{cid}/stream", json={}), 409, "conversation_conflict")
    assert "opening" in error["message"]


def test_a_streamed_turn_with_tools_sends_tool_events():
    hooks = Hooks()

    @hooks.tool()
    def find_order(order_id: str) -> dict[str, str]:
        return {"order_id": order_id, "status": "shipped"}

    llm = ScriptedLLM([tool_calls(("find_order", {"order_id": "A-17"})), reply("help", "Order A-17 has shipped.")])
    http = client(llm, [llm_fsm.load(TOOLS)], hooks=hooks)
    cid = create(http, start=False)["id"]
    with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Where is A-17?"}) as response:
        events = list(sse(response.iter_lines()))
    names = [name for name, _ in events]
    assert names.index("tool_call") < names.index("tool_result") < names.index("result")
    call = dict(events)["tool_call"]
    assert call["name"] == "find_order" and call["arguments"] == {"order_id": "A-17"}
    assert dict(events)["tool_result"]["result"] == {"order_id": "A-17", "status": "shipped"}
    assert dict(events)["result"]["tool_calls"][0]["name"] == "find_order"


def test_a_paused_conversation_resumes_once_with_its_token_then_ends():
    llm = ScriptedLLM(
        [
            reply("ask_name", "Name?"),
            reply("ask_email", "Thanks, email?", name="Ann"),
            reply("ask_email", "Approved. Your email?"),
            reply("done", "All set.", email="ann@example.com"),
        ]
    )
    http = client(llm, hooks=pausing_hooks())
    cid = create(http)["id"]
    paused = http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}).json()
    assert paused["status"] == "paused" and paused["pending"]["reason"] == "staff must approve"
    token = paused["pending"]["token"]
    assert http.get(f"/conversations/{cid}").json()["pending"]["token"] == token

    error_of(http.post(f"/conversations/{cid}/messages", json={"message": "hello?"}), 409, "conversation_paused")
    error_of(http.post(f"/conversations/{cid}/resume", json={"token": "wrong"}), 409, "resume_refused")
    resumed = http.post(f"/conversations/{cid}/resume", json={"token": token, "result": {"approved": True}})
    assert resumed.status_code == 200 and resumed.json()["message"] == "Approved. Your email?"
    assert http.get(f"/conversations/{cid}").json()["provenance"]["approved"]["by"] == "resume"
    error_of(http.post(f"/conversations/{cid}/resume", json={"token": token}), 409, "resume_refused")

    ended = http.post(f"/conversations/{cid}/messages", json={"message": "ann@example.com"}).json()
    assert ended["ended"] is True and ended["state"] == "done"
    error = error_of(http.post(f"/conversations/{cid}/messages", json={"message": "more"}), 410, "conversation_ended")
    assert error["state"] == "done"
    error_of(http.post(f"/conversations/{cid}/stream", json={"message": "more"}), 410, "conversation_ended")
    assert llm.remaining == 0  # nothing more reached the model


# -- auth ------------------------------------------------------------------------------------------


def test_a_missing_or_wrong_token_is_401():
    http = client(ScriptedLLM(), tokens=TOKENS)
    for headers in (None, auth("not-a-known-token-at-all"), {"Authorization": f"Basic {ALICE}"}):
        response = http.get("/definitions", headers=headers)
        error_of(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    error_of(http.post("/conversations", json={}), 401, "unauthorized")
    assert http.get("/definitions", headers=auth(ALICE)).status_code == 200
    assert http.get("/health").json() == {"status": "ok"}  # for load balancers: no token needed
    assert http.get("/ready").json() == {"status": "ready", "mcp_servers_down": []}  # no MCP server to be down


def test_per_client_tokens_keep_conversations_apart_and_do_not_reveal_them():
    llm = ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")])
    store = open_store("memory:")
    http = client(llm, tokens=TOKENS, store=store)
    cid = create(http, auth(ALICE))["id"]
    for method, path, body in [
        ("GET", f"/conversations/{cid}", None),
        ("POST", f"/conversations/{cid}/messages", {"message": "Ann"}),
        ("POST", f"/conversations/{cid}/stream", {"message": "Ann"}),
        ("POST", f"/conversations/{cid}/resume", {"token": "x"}),
        ("DELETE", f"/conversations/{cid}", None),
    ]:
        response = http.request(method, path, json=body, headers=auth(BOB))
        assert error_of(response, 404, "not_found") == error_of(
            http.request(method, path.replace(cid, uuid.uuid4().hex), json=body, headers=auth(BOB)), 404, "not_found"
        ) | {"message": f"no conversation {cid!r}"}  # the same answer as for an id that was never used
    assert http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}, headers=auth(ALICE)).status_code == 200
    assert [info.id for info in store.list()] == [f"alice@{cid}"]


def test_one_shared_token_shares_the_conversations():
    token = "shared-token-0123456789"
    http = client(ScriptedLLM([reply("ask_name", "Hi!")]), tokens=tokens_from_text(token))
    cid = create(http, auth(token))["id"]
    assert http.get(f"/conversations/{cid}", headers=auth(token)).status_code == 200


def test_tokens_come_from_a_file_or_a_variable_and_bad_entries_are_named(tmp_path: Path):
    path = tmp_path / "tokens"
    path.write_text(f"# clients\nalice:{ALICE}\n\n{BOB}\n", encoding="utf-8")
    tokens = tokens_from_file(path)
    assert tokens[ALICE] == "alice" and tokens[BOB].startswith("token-")
    assert tokens_from_text(f"alice:{ALICE}, bob:{BOB}") == TOKENS
    with pytest.raises(TokenError, match=r"tokens:2: the token of 'alice' is shorter than 16"):
        path.write_text("# x\nalice:short\n", encoding="utf-8")
        tokens_from_file(path)
    with pytest.raises(TokenError, match="given twice"):
        tokens_from_text(f"{ALICE} {ALICE}")
    with pytest.raises(TokenError, match="client name 'a b'"):
        tokens_from_file(_write(tmp_path / "t2", f"a b:{ALICE}\n"))
    with pytest.raises(TokenError, match="cannot read the tokens file"):
        tokens_from_file(tmp_path / "missing")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- errors ----------------------------------------------------------------------------------------


def test_unknown_conversations_and_routes_are_404():
    http = client(ScriptedLLM())
    for cid in (uuid.uuid4().hex, "not-an-id", "../../etc"):
        error_of(http.get(f"/conversations/{cid}"), 404, "not_found")
        error_of(http.post(f"/conversations/{cid}/messages", json={"message": "x"}), 404, "not_found")
    error_of(http.get("/nowhere"), 404, "not_found")
    error_of(http.put("/conversations"), 405, "method_not_allowed")


def test_bad_bodies_are_400_and_oversized_ones_413():
    http = client(ScriptedLLM(), max_body=1024)
    cid = create(http, start=False)["id"]
    url = f"/conversations/{cid}/messages"
    headers = {"Content-Type": "application/json"}
    error = error_of(http.post(url, content=b'{"message": ', headers=headers), 400, "invalid_request")
    assert "the body is not valid JSON at character" in error["message"]
    error = error_of(http.post(url, json={"text": "hi"}), 400, "invalid_request")
    assert {e["where"] for e in error["errors"]} == {"body.message", "body.text"}
    error_of(http.post(url, json={"message": 7}), 400, "invalid_request")
    error_of(http.post(url, json=["message"]), 400, "invalid_request")
    error = error_of(http.post(url, json={"message": "x" * 2000}), 413, "request_too_large")
    assert "is 2014 bytes, more than the server's limit of 1024 bytes (--max-body of llm-fsm serve" in error["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"message": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}'

    error = error_of(http.post(url, content=chunks(), headers=headers), 413, "request_too_large")
    assert "is longer than the server's limit of 1024 bytes (--max-body" in error["message"]
    assert http.get(f"/conversations/{cid}").json()["turns"] == 0


@pytest.mark.parametrize("route", ["messages", "stream"])
@pytest.mark.parametrize("message", ["", "  \n\t", "\u200b\ufeff"], ids=["empty", "whitespace", "invisible"])
def test_an_empty_message_is_422_and_runs_no_turn(route: str, message: str):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?")])
    http = client(llm)
    cid = create(http)["id"]
    error = error_of(http.post(f"/conversations/{cid}/{route}", json={"message": message}), 422, "empty_message")
    assert "nothing to answer" in error["message"] and "start()" not in error["message"]
    assert len(llm.requests) == 1 and http.get(f"/conversations/{cid}").json()["version"] == 1


def test_a_body_that_is_not_utf8_is_400_saying_so():
    http = client(ScriptedLLM())
    cid = create(http, start=False)["id"]
    latin1 = '{"message": "caf\u00e9"}'.encode("latin-1")
    response = http.post(f"/conversations/{cid}/messages", content=latin1, headers={"Content-Type": "application/json"})
    error = error_of(response, 400, "invalid_request")
    assert "the body is not UTF-8 text at byte 16" in error["message"], error
    assert http.get(f"/conversations/{cid}").json()["turns"] == 0


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize(
    ("failure", "status", "kind"),
    [
        (
            LLMUnavailableError("openai/x at the provider: 503 overloaded", model="x", status_code=503),
            502,
            "provider_error",
        ),
        (LLMAuthError("openai/x: invalid api key ***", model="x", status_code=401), 502, "provider_error"),
        (
            LLMUnavailableError("openai/x: timed out", model="x", cause=TimeoutError("read timed out")),
            504,
            "provider_timeout",
        ),
        (LLMUnavailableError("openai/x: request timed out", model="x", status_code=408), 504, "provider_timeout"),
        (Boom("secret internals at /srv/app.py line 3"), 500, "internal_error"),
    ],
)
def test_a_failing_model_call_maps_to_its_status_and_changes_nothing(failure: Exception, status: int, kind: str):
    store = open_store("memory:")
    llm = ScriptedLLM([reply("ask_name", "Hi!"), failure, failure])
    http = client(llm, store=store)
    cid = create(http)["id"]
    error = error_of(http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}), status, kind)
    if kind == "internal_error":
        assert error["message"] == "internal error" and "secret" not in json.dumps(error)
    else:  # the provider's own words (hosts, models) stay in the server's log
        assert "openai/x" not in error["message"] and "provider" in error["message"]
    conversation = http.get(f"/conversations/{cid}").json()
    assert conversation["turns"] == 0 and conversation["version"] == 1  # the failed turn saved nothing
    with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
        events = list(sse(response.iter_lines()))
    assert events == [("error", {"error": error})]
    assert http.get(f"/conversations/{cid}").json()["version"] == 1


def test_an_opening_that_fails_creates_nothing():
    store = open_store("memory:")
    http = client(ScriptedLLM([LLMUnavailableError("down", model="x")]), store=store)
    error_of(http.post("/conversations", json={}), 502, "provider_error")
    assert store.list() == []


def test_a_failing_handler_is_500_naming_it_without_a_traceback():
    hooks = Hooks()

    @hooks.on("context_update", keys=["name"])
    def explode(**_: Any) -> None:
        raise Boom("database password is hunter2")

    http = client(ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")]), hooks=hooks)
    cid = create(http)["id"]
    error = error_of(http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}), 500, "internal_error")
    assert "explode" in error["message"] and "hunter2" not in error["message"]


def test_a_definition_that_cannot_run_is_refused_at_once_and_a_changed_one_is_422():
    unbound = {**SIGNUP, "states": {**SIGNUP["states"], "done": {"purpose": "Bye", "handlers": ["notify"]}}}
    with pytest.raises(DefinitionError, match="handler 'notify'"):
        create_app([llm_fsm.load(unbound)], ScriptedLLM(), store="memory:")

    store = open_store("memory:")
    first = client(ScriptedLLM([reply("ask_name", "Hi!")]), store=store)
    cid = create(first)["id"]
    changed = {
        **SIGNUP,
        "states": {**SIGNUP["states"], "ask_name": {**SIGNUP["states"]["ask_name"], "transitions": []}},
    }
    second = client(ScriptedLLM(), [llm_fsm.load(changed)], store=store)
    error = error_of(second.get(f"/conversations/{cid}"), 422, "definition_error")
    assert "changed" in error["message"] and "ask_name" in error["message"]
    # advice a client of the API can follow, not the Python API's keyword argument
    assert "allow_changed_definition" not in error["message"] and "serve the version" in error["message"]
    error_of(second.post(f"/conversations/{cid}/messages", json={"message": "x"}), 422, "definition_error")
    other = client(ScriptedLLM(), [llm_fsm.load({**SIGNUP, "name": "other"})], store=store)
    assert "does not serve" in error_of(other.get(f"/conversations/{cid}"), 422, "definition_error")["message"]


def test_secret_looking_values_are_masked_unless_asked():
    context = {"name": "Ann", "password": "hunter2hunter2"}
    masked = client(ScriptedLLM())
    body = create(masked, state="ask_email", context=context, start=False)
    assert body["conversation"]["context"]["password"] != "hunter2hunter2"
    assert "hunter2" not in masked.get(f"/conversations/{body['id']}").text
    shown = client(ScriptedLLM(), show_secrets=True)
    assert create(shown, context=context, start=False)["conversation"]["context"]["password"] == "hunter2hunter2"


def test_cors_is_off_unless_origins_are_given():
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    off = client(ScriptedLLM())
    assert "access-control-allow-origin" not in off.options("/conversations", headers=preflight).headers
    assert "access-control-allow-origin" not in off.get("/health", headers={"Origin": "https://app.example"}).headers
    on = client(ScriptedLLM(), cors_origins=["https://app.example"])
    allowed = on.options("/conversations", headers=preflight)
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"


def test_the_openapi_document_lists_every_route():
    schema = client(ScriptedLLM()).get("/openapi.json").json()
    assert set(schema["paths"]) == {
        "/health",
        "/ready",
        "/definitions",
        "/definitions/{name}",
        "/conversations",
        "/conversations/{conversation_id}",
        "/conversations/{conversation_id}/messages",
        "/conversations/{conversation_id}/stream",
        "/conversations/{conversation_id}/resume",
        "/conversations/{conversation_id}/run",
        "/conversations/{conversation_id}/assistant",
        "/conversations/{conversation_id}/history",
        "/v1/models",
        "/v1/models/{name}",
        "/v1/chat/completions",
    }
    assert set(schema["paths"]["/conversations/{conversation_id}"]) == {"get", "delete"}
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


def test_sync_handlers_run_off_the_event_loop():
    hooks = Hooks()
    seen: list[str] = []

    @hooks.on("context_update", keys=["name"])
    def normalise(*, update: dict[str, Any]) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return {"name": update["name"].title()}

    @hooks.check("polite")
    def polite(*, message: str) -> bool:
        seen.append(threading.current_thread().name)
        return True

    definition = {**SIGNUP, "states": {**SIGNUP["states"]}}
    definition["states"]["ask_name"] = {
        **SIGNUP["states"]["ask_name"],
        "checks": [{"kind": "python", "name": "polite"}],
    }
    llm = ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="ann")])
    http = client(llm, [llm_fsm.load(definition)], hooks=hooks)
    cid = create(http)["id"]
    result = http.post(f"/conversations/{cid}/messages", json={"message": "ann"}).json()
    assert result["context"]["name"] == "Ann"
    assert len(seen) == 3 and all(name != "MainThread" and "asyncio" in name for name in seen)
    assert hooks.handlers[0].function is normalise  # the hooks given are left as they were


def test_conversations_live_in_redis(request: pytest.FixtureRequest):
    url = f"{request.getfixturevalue('redis_url')}?prefix=test-{uuid.uuid4().hex}"
    llm = ScriptedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")])
    with client(llm, store=url) as http:  # one event loop for the app's requests, as in a server
        cid = create(http)["id"]
        assert http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}).json()["state"] == "ask_email"
    with client(ScriptedLLM(), store=url) as again:  # another worker, the same store
        assert again.get(f"/conversations/{cid}").json()["context"] == {"name": "Ann"}
        assert again.delete(f"/conversations/{cid}").status_code == 204
        error_of(again.get(f"/conversations/{cid}"), 404, "not_found")


# -- a real server: streaming, disconnects, concurrency -----------------------------------------------


class GatedLLM:
    """Scripted replies that stream in two parts (up to six characters of the message, then the rest), the
    second held until ``gate`` is set; it notes
    when a call is under way (``entered``) and when its stream was closed before its end (``closed``)."""

    def __init__(self, replies: list[Any], *, hold_first: bool = True) -> None:
        self.script = ScriptedLLM(replies)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.closed = threading.Event()
        self.hold_first = hold_first  # hold before the first half: the model says nothing yet

    def complete(self, request: LLMRequest) -> LLMResponse:
        return self.script.complete(request)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        self.entered.set()
        await self._wait()
        return self.script.complete(request)

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        return self.script.stream_complete(request)

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        response = self.script.complete(request)
        half = response.text.index('"message"') + len('"message": "') + 6  # six characters of the message
        finished = False
        try:
            self.entered.set()
            if self.hold_first:
                await self._wait()
            yield response.text[:half]
            await self._wait()
            yield response.text[half:]
            yield response
            finished = True
        finally:
            if not finished:
                self.closed.set()

    async def _wait(self) -> None:
        while not self.gate.is_set():
            await asyncio.sleep(0.005)


@contextmanager
def live(app: Any) -> Iterator[str]:
    """``app`` on a real uvicorn server on a free loopback port, in a thread: its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvicorn's own sockets: no 40 ms delayed ACKs
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'conversations.db'}"


def settled(url: str, key: str) -> Any:
    """The stored conversation once no turn holds it (the server's turn has ended, one way or the other)."""
    store = open_store(url)
    with store.lock(key, timeout=10):
        record = store.load(key)
    store.close()
    return record


def test_a_real_server_streams_a_turn(sqlite_url: str):
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann, and your email?", name="Ann")])
    llm.gate.set()
    with live(create_app([signup()], llm, store=sqlite_url)) as base, httpx.Client(base_url=base) as http:
        cid = http.post("/conversations", json={}).json()["id"]
        with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
            events = list(sse(response.iter_lines()))
    assert [name for name, _ in events] == ["delta", "delta", "result"]
    assert "".join(d["text"] for n, d in events if n == "delta") == "Thanks Ann, and your email?"
    assert settled(sqlite_url, f"local@{cid}").snapshot.turns == 1


def test_a_client_that_disconnects_mid_stream_leaves_the_conversation_as_it_was(sqlite_url: str):
    llm = GatedLLM(
        [reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann, and your email?", name="Ann")], hold_first=False
    )
    llm.gate.set()
    with live(create_app([signup()], llm, store=sqlite_url)) as base, httpx.Client(base_url=base) as http:
        cid = http.post("/conversations", json={}).json()["id"]
        before = settled(sqlite_url, f"local@{cid}")
        llm.gate.clear()
        with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
            lines = response.iter_lines()
            assert next(sse(lines))[0] == "delta"  # half the message shown, then the client goes away
        wait_for(llm.closed.is_set, "the model's stream to be closed")
        after = settled(sqlite_url, f"local@{cid}")
        assert after.version == before.version and after.snapshot == before.snapshot
        # the conversation goes on as if the turn had never started
        llm.script.add(reply("ask_email", "Email?", name="Ann"))
        llm.gate.set()
        assert http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}).json()["turn"] == 1
    assert settled(sqlite_url, f"local@{cid}").snapshot.turns == 1


def test_a_disconnect_while_the_model_is_silent_cancels_the_turn(sqlite_url: str):
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann!", name="Ann")])
    llm.gate.set()
    with live(create_app([signup()], llm, store=sqlite_url)) as base, httpx.Client(base_url=base) as http:
        cid = http.post("/conversations", json={}).json()["id"]
        llm.gate.clear()
        llm.entered.clear()
        with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
            assert response.status_code == 200
            wait_for(llm.entered.is_set, "the model call")
        wait_for(llm.closed.is_set, "the turn to be cancelled")  # noticed with nothing to write
        record = settled(sqlite_url, f"local@{cid}")
    assert record.snapshot.turns == 0 and record.version == 1


def test_a_client_that_disconnects_after_the_result_keeps_the_whole_turn(sqlite_url: str):
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Thanks Ann!", name="Ann")])
    llm.gate.set()
    with live(create_app([signup()], llm, store=sqlite_url)) as base, httpx.Client(base_url=base) as http:
        cid = http.post("/conversations", json={}).json()["id"]
        with http.stream("POST", f"/conversations/{cid}/stream", json={"message": "Ann"}) as response:
            for name, _ in sse(response.iter_lines()):
                if name == "result":
                    break  # gone before the stream's end
    record = settled(sqlite_url, f"local@{cid}")
    assert record.snapshot.turns == 1 and record.snapshot.context == {"name": "Ann"} and record.version == 2
    assert [e.user for e in record.snapshot.history] == [None, "Ann"]


class Arrivals:
    """The app, counting the messages that reached the server."""

    def __init__(self, app: Any) -> None:
        self.app, self.count = app, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/messages"):
            self.count += 1
        await self.app(scope, receive, send)


def send_message(base: str, cid: str, text: str) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as http:
        return http.post(f"/conversations/{cid}/messages", json={"message": text})


def test_under_the_reject_policy_a_second_request_on_a_busy_conversation_is_409(sqlite_url: str):
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")])
    llm.gate.set()
    app = create_app([signup()], llm, store=sqlite_url, busy="reject")
    with live(app) as base, httpx.Client(base_url=base) as http, ThreadPoolExecutor(2) as pool:
        cid = http.post("/conversations", json={}).json()["id"]
        llm.gate.clear()
        llm.entered.clear()
        first = pool.submit(send_message, base, cid, "Ann")
        wait_for(llm.entered.is_set, "the first turn's model call")  # the first turn holds the conversation
        error_of(send_message(base, cid, "Bob"), 409, "busy")  # refused at once, while the first runs
        error_of(http.post(f"/conversations/{cid}/stream", json={"message": "Bob"}), 409, "busy")
        error_of(http.delete(f"/conversations/{cid}"), 409, "busy")
        assert http.get(f"/conversations/{cid}").json()["turns"] == 0  # reading takes no lock
        llm.gate.set()
        assert first.result().status_code == 200 and first.result().json()["context"] == {"name": "Ann"}
    record = settled(sqlite_url, f"local@{cid}")
    assert record.snapshot.turns == 1 and [e.user for e in record.snapshot.history] == [None, "Ann"]


def test_under_the_queue_policy_requests_on_one_conversation_take_turns(sqlite_url: str):
    replies = [reply("ask_name", "Hi!"), reply("ask_name", "Still your name?"), reply("ask_name", "And?")]
    llm = GatedLLM(replies)
    llm.gate.set()
    app = Arrivals(create_app([signup()], llm, store=sqlite_url, busy="queue", wait=20))
    with live(app) as base, httpx.Client(base_url=base) as http, ThreadPoolExecutor(2) as pool:
        cid = http.post("/conversations", json={}).json()["id"]
        llm.gate.clear()
        llm.entered.clear()
        first = pool.submit(send_message, base, cid, "one")
        wait_for(llm.entered.is_set, "the first turn's model call")  # the first turn holds the conversation
        second = pool.submit(send_message, base, cid, "two")
        wait_for(lambda: app.count == 2, "the second message to reach the server")
        time.sleep(0.1)  # it waits for the lock (a shorter pause only makes the test prove less, never fail)
        assert not second.done()
        llm.gate.set()
        responses = [first.result(), second.result()]
    assert [r.status_code for r in responses] == [200, 200]
    assert sorted(r.json()["turn"] for r in responses) == [1, 2]
    record = settled(sqlite_url, f"local@{cid}")
    assert record.snapshot.turns == 2 and record.version == 3
    assert [e.user for e in record.snapshot.history] == [None, "one", "two"]
    # the second turn ran on the first one's result: its prompt holds the first exchange
    assert "one" in json.dumps(llm.script.requests[2].messages)


def test_two_servers_on_one_redis_store_share_conversations_and_their_locks(request: pytest.FixtureRequest):
    url = f"{request.getfixturevalue('redis_url')}?prefix=test-{uuid.uuid4().hex}"
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")])
    llm.gate.set()
    one = create_app([signup()], llm, store=url, busy="reject")
    two = create_app([signup()], ScriptedLLM([reply("ask_email", "Email, please?")]), store=url, busy="reject")
    with live(one) as first_base, live(two) as second_base, ThreadPoolExecutor(1) as pool:
        cid = httpx.post(f"{first_base}/conversations", json={}).json()["id"]
        llm.gate.clear()
        llm.entered.clear()
        first = pool.submit(send_message, first_base, cid, "Ann")
        wait_for(llm.entered.is_set, "the first server's turn")
        error_of(send_message(second_base, cid, "Bob"), 409, "busy")  # the lock lives in Redis
        llm.gate.set()
        assert first.result().status_code == 200
        second = send_message(second_base, cid, "ann@example.com")
        assert second.status_code == 200 and second.json()["turn"] == 2  # on the first server's turn
        got = httpx.get(f"{first_base}/conversations/{cid}").json()
    assert [e["user"] for e in got["history"]] == [None, "Ann", "ann@example.com"]


def test_create_app_checks_the_tokens_it_is_given():
    with pytest.raises(TokenError, match="the token of 'alice' is shorter than 16"):
        create_app([signup()], ScriptedLLM(), store="memory:", tokens={"short": "alice"})
    with pytest.raises(TokenError, match="client name 'alice smith'"):
        create_app([signup()], ScriptedLLM(), store="memory:", tokens={ALICE: "alice smith"})
    with pytest.raises(ValueError, match="busy must be 'queue' or 'reject'"):
        create_app([signup()], ScriptedLLM(), store="memory:", busy="wait")  # type: ignore[arg-type]


def test_a_stream_whose_client_is_gone_when_written_to_ends_quietly_after_its_turn():
    from llm_fsm.server.sse import EventStream

    async def scenario() -> tuple[int, bool, bool]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        turn = asyncio.create_task(asyncio.sleep(10))  # a turn still running when the client goes
        for _ in range(3):
            queue.put_nowait(object())
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)
            if len(sent) > 1:
                raise ConnectionResetError("the client is gone")  # what a server raises, an OSError

        async def receive() -> Any:
            await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        await EventStream(queue, turn, lambda event: b"data: {}\n\n")({"type": "http", "method": "POST"}, receive, send)
        return len(sent), turn.done(), turn.cancelled()

    sent, done, cancelled = asyncio.run(scenario())
    assert sent == 2 and done and cancelled  # no error escaped; the turn was cancelled and awaited


async def call_stream(stream: Any, receive: Any) -> list[Any]:
    """What ``stream`` (an ASGI response) sends to a client whose messages ``receive`` gives."""
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await stream({"type": "http", "method": "POST"}, receive, send)
    return sent


async def never_disconnects() -> Any:
    await asyncio.sleep(60)
    return {"type": "http.disconnect"}  # pragma: no cover


def bodies(sent: list[Any]) -> list[bytes]:
    return [message["body"] for message in sent if message["type"] == "http.response.body"]


def test_a_quiet_stream_carries_ping_comments_until_its_turn_ends():
    from llm_fsm.server.sse import DONE, EventStream

    async def scenario() -> list[bytes]:
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def turn() -> None:
            await asyncio.sleep(0.25)  # the model says nothing for a while
            queue.put_nowait(b"data: {}\n\n")

        task = asyncio.create_task(turn())
        task.add_done_callback(lambda _: queue.put_nowait(DONE))
        return bodies(await call_stream(EventStream(queue, task, lambda e: e, ping=0.05), never_disconnects))

    sent = asyncio.run(scenario())
    assert sent[-2:] == [b"data: {}\n\n", b""] and len(sent) >= 4  # the event, then the end of the body
    assert set(sent[:-2]) == {b": ping\n\n"}  # before it: only comments, which EventSource ignores


def test_a_disconnect_cancels_the_turn_and_the_response_ends_only_after_it():
    from llm_fsm.server.sse import DONE, EventStream

    async def scenario() -> tuple[list[str], list[bytes]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        steps: list[str] = []

        async def turn() -> None:
            try:
                await asyncio.sleep(60)  # the model is silent
            except asyncio.CancelledError:
                steps.append("cancelled")
                await asyncio.sleep(0.1)  # undoing takes a while (a store's rollback, a lock's release)
                steps.append("undone")
                raise

        async def receive() -> Any:
            await asyncio.sleep(0.05)
            return {"type": "http.disconnect"}

        task = asyncio.create_task(turn())
        task.add_done_callback(lambda _: queue.put_nowait(DONE))
        sent = await call_stream(EventStream(queue, task, lambda e: e), receive)
        steps.append("response ended")
        assert task.cancelled()
        return steps, bodies(sent)

    steps, sent = asyncio.run(scenario())
    assert steps == ["cancelled", "undone", "response ended"] and sent == []


def test_a_server_shutting_down_lets_a_stream_run_to_its_turn_s_end(monkeypatch: pytest.MonkeyPatch):
    from sse_starlette.sse import AppStatus

    from llm_fsm.server.sse import DONE, EventStream

    monkeypatch.setattr(AppStatus, "should_exit", True)  # what uvicorn's SIGTERM sets: in-flight requests finish

    async def scenario() -> tuple[list[bytes], bool]:
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def turn() -> None:
            await asyncio.sleep(0.2)
            queue.put_nowait(b"data: {}\n\n")

        task = asyncio.create_task(turn())
        task.add_done_callback(lambda _: queue.put_nowait(DONE))
        sent = await call_stream(EventStream(queue, task, lambda e: e), never_disconnects)
        return bodies(sent), task.cancelled()

    sent, cancelled = asyncio.run(scenario())
    assert sent == [b"data: {}\n\n", b""] and not cancelled


def orders_needing_approval() -> tuple[llm_fsm.FSMDefinition, Hooks, list[str]]:
    """TOOLS with ``find_order`` waiting for a person's approval, its hooks, and the order ids it ran for."""
    hooks, ran = Hooks(), []

    @hooks.tool()
    def find_order(order_id: str) -> dict[str, str]:
        ran.append(order_id)
        return {"status": "shipped"}

    definition = {**TOOLS, "tools": {"find_order": {**TOOLS["tools"]["find_order"], "approval": "always"}}}
    return llm_fsm.load(definition), hooks, ran


def test_a_tool_call_waiting_for_approval_runs_once_resumed():
    definition, hooks, ran = orders_needing_approval()
    llm = ScriptedLLM([tool_calls(("find_order", {"order_id": "A-17"})), reply("help", "A-17 has shipped.")])
    http = client(llm, [definition], hooks=hooks)
    cid = create(http, start=False)["id"]
    paused = http.post(f"/conversations/{cid}/messages", json={"message": "Where is A-17?"}).json()
    assert paused["status"] == "paused" and paused["pending"]["kind"] == "tool_approval" and ran == []
    assert paused["pending"]["tool_call"]["arguments"] == {"order_id": "A-17"}
    token = paused["pending"]["token"]
    resumed = http.post(f"/conversations/{cid}/resume", json={"token": token, "result": {"approved": True}}).json()
    assert resumed["message"] == "A-17 has shipped." and ran == ["A-17"]
    assert resumed["tool_calls"][0]["result"] == {"status": "shipped"}
    error_of(
        http.post(f"/conversations/{cid}/resume", json={"token": token, "result": {"approved": True}}),
        409,
        "resume_refused",
    )
    assert ran == ["A-17"]  # exactly once


# -- what the audit of issue 16 found ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (  # nested too deeply: before, "the body is not valid JSON at character 0" (/v1) or a guess (native)
            b'{"definition": "signup", "context": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
            "nests objects and lists more than 64 levels deep: the server reads 64 at most",
        ),
        (  # an integer too long for Python
            b'{"definition": "signup", "context": {"x": ' + b"9" * 5000 + b"}}",
            f"a number in the body's JSON has more than {sys.get_int_max_str_digits()} digits",
        ),
    ],
    ids=["deep", "long-number"],
)
@pytest.mark.parametrize("path", ["/conversations", "/v1/chat/completions"])
def test_a_body_that_cannot_be_parsed_says_why_and_the_limit(body: bytes, says: str, path: str):
    http = client(ScriptedLLM([reply("ask_name", "Hi!")]), max_body=64 * 1024)
    response = http.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"] and "JSON" in error["message"]
    assert error.get("param") == "body" if path.startswith("/v1") else error["errors"][0]["where"] == "body"


def test_a_body_nested_as_deep_as_the_limit_is_read():
    from llm_fsm.server.limits import MAX_JSON_DEPTH, too_deep

    http = client(ScriptedLLM([reply("ask_name", "Hi!")]))

    def nested(levels: int) -> bytes:  # the body and its context are two levels
        inner = "[" * (levels - 2) + "]" * (levels - 2)
        return f'{{"start": false, "context": {{"x": {inner}}}}}'.encode()

    made = http.post("/conversations", content=nested(MAX_JSON_DEPTH), headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    refused = http.post("/conversations", content=nested(MAX_JSON_DEPTH + 1))
    error_of(refused, 400, "invalid_request")
    assert not too_deep(b'{"message": "' + b"[" * 100 + b'\\"[[["}')  # brackets in strings are text


@pytest.mark.parametrize("start", ["yes", 1, "true", "false"])
def test_fields_are_not_coerced_from_other_types(start: Any):
    http = client(ScriptedLLM([reply("ask_name", "Hi!")]))
    error = error_of(http.post("/conversations", json={"start": start}), 400, "invalid_request")
    assert error["errors"][0]["where"] == "body.start"


def test_a_store_that_fails_while_serving_answers_503_and_names_it_without_its_password(
    caplog: pytest.LogCaptureFixture,
):
    process, port = start_redis("--requirepass", "REDIS-PASSWORD-42")
    url = f"redis://:REDIS-PASSWORD-42@127.0.0.1:{port}/0"
    store = open_store(url)
    app = create_app([signup()], ScriptedLLM([reply("ask_name", "Hi!")] * 3), store=store)
    with TestClient(app, raise_server_exceptions=False) as http:  # one event loop: Redis' async client is bound to it
        try:
            cid = create(http)["id"]
        finally:
            process.kill()
            process.wait(timeout=10)
        with caplog.at_level("ERROR", logger="llm_fsm.server"):
            for response in (
                http.get(f"/conversations/{cid}"),
                http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}),
                http.post(f"/conversations/{cid}/stream", json={"message": "Ann"}),
                http.post(f"/conversations/{cid}/resume", json={"token": "x"}),
                http.delete(f"/conversations/{cid}"),
                http.post("/conversations", json={}),
            ):
                error_of(response, 503, "store_unavailable")
    logged = [r.getMessage() for r in caplog.records if r.name == "llm_fsm.server"]
    assert logged and all(f"redis://:***@127.0.0.1:{port}/0" in line for line in logged)
    assert "REDIS-PASSWORD-42" not in caplog.text
    for call in (lambda: store.load(cid), store.list, lambda: store.delete(cid), lambda: store.unlock(cid)):
        with pytest.raises(StoreError, match=r"redis://:\*\*\*@"):
            call()


def _drop_the_table(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as other:  # another process drops the table under the server's feet
        other.execute("DROP TABLE conversations")


def _put_a_file_in_its_place(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
    path.write_text("not a folder")


@pytest.mark.parametrize(
    ("scheme", "name", "breaking"),
    [("sqlite", "c.db", _drop_the_table), ("file", "conversations", _put_a_file_in_its_place)],
)
def test_a_local_store_that_breaks_after_opening_answers_503(tmp_path: Path, scheme: str, name: str, breaking: Any):
    path = tmp_path / name
    http = client(ScriptedLLM([reply("ask_name", "Hi!")] * 2), store=f"{scheme}:{path}")
    cid = create(http)["id"]
    breaking(path)
    error_of(http.get(f"/conversations/{cid}"), 503, "store_unavailable")
    error_of(http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}), 503, "store_unavailable")
    error_of(http.delete(f"/conversations/{cid}"), 503, "store_unavailable")
    error_of(http.post("/conversations", json={}), 503, "store_unavailable")
