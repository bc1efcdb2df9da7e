"""The id ``llm-fsm serve`` answers with is the id the terminal commands take.

``serve`` stores client CLIENT's conversation ID under ``CLIENT@ID`` (``local@ID`` without tokens): here a
conversation is made through the HTTP API (the native one and ``/v1``), then ``conversations show|delete|unlock``,
``run -c`` and ``chat -c`` name it by the id served, and the served API sees the turns they add.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.server import create_app
from llm_fsm.store import open_store
from llm_fsm.store.clients import AmbiguousIdError, client_key, client_of, resolve
from llm_fsm.testing import ScriptedLLM
from tests.conftest import SIGNUP, reply
from tests.server.test_server import ALICE, BOB, TOKENS, auth, create, signup
from tests.store.test_store import url_for

runner = CliRunner()
GREETING = reply("ask_name", "Hi! Your name?")
NAME = reply("ask_email", "Thanks Ann! Email?", name="Ann")
EMAIL = reply("ask_email", "Noted.", email="ann@example.com")
KINDS = ["sqlite", "file"]


@pytest.fixture(params=KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture
def definition(tmp_path: Path) -> Path:
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(SIGNUP))  # the definition serve serves: the terminal continues its conversations
    return path


def serving(store_url: str, replies: list[dict[str, Any]], tokens: dict[str, str] | None = None) -> TestClient:
    """``serve``'s app in this process, on the store at ``store_url``."""
    app_ = create_app([signup()], ScriptedLLM(replies), store=store_url, tokens=tokens)
    return TestClient(app_, raise_server_exceptions=False)


def cli(*args: str, text: str = "") -> Any:
    return runner.invoke(app, list(args), input=text, env={"COLUMNS": "200"})


def run(definition: Path, tmp_path: Path, store_url: str, name: str, replies: list[Any], text: str, *extra: str) -> Any:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    return cli("run", str(definition), "-m", f"scripted:{script}", "--store", store_url, "-c", name, *extra, text=text)


def lines(result: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("tokens", [None, TOKENS], ids=["no tokens", "tokens"])
def test_the_id_served_is_the_one_show_and_run_take(store_url, definition, tmp_path, tokens):
    client, headers = ("local", None) if tokens is None else ("alice", auth(ALICE))
    with serving(store_url, [GREETING, EMAIL], tokens) as http:
        cid = create(http, headers, definition="signup")["id"]

        shown = cli("conversations", "show", cid, "--store", store_url)
        assert shown.exit_code == 0, shown.output
        document = json.loads(shown.stdout)
        assert document["id"] == f"{client}@{cid}" and document["state"] == "ask_name"
        assert [e["assistant"] for e in document["history"]] == ["Hi! Your name?"]
        assert f"is the conversation of client '{client}' of llm-fsm serve: {client}@{cid}" in shown.stderr

        # run continues the served conversation (not a new, empty one under the bare id)...
        ran = run(definition, tmp_path, store_url, cid, [NAME], "I'm Ann\n")
        assert ran.exit_code == 0, ran.output
        (turn,) = lines(ran)
        assert turn["turn"] == 1 and turn["previous_state"] == "ask_name" and turn["context"] == {"name": "Ann"}
        assert f"{client}@{cid}" in ran.stderr
        assert [info.id for info in open_store(store_url).list()] == [f"{client}@{cid}"]

        # ...under the key serve reads: the served API sees the run's turn and goes on from it
        got = http.get(f"/conversations/{cid}", headers=headers).json()
        assert got["state"] == "ask_email" and got["version"] == 2
        assert [e["user"] for e in got["history"]] == [None, "I'm Ann"]
        sent = http.post(f"/conversations/{cid}/messages", json={"message": "ann@example.com"}, headers=headers)
        assert sent.status_code == 200, sent.text
        assert sent.json()["context"] == {"name": "Ann", "email": "ann@example.com"}


def test_chat_continues_the_conversation_served(store_url, definition, tmp_path):
    with serving(store_url, [GREETING]) as http:
        cid = create(http, definition="signup")["id"]
        script = tmp_path / "chat.json"
        script.write_text(json.dumps([NAME]))
        args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store_url, "-c", cid]
        chatted = cli(*args, text="I'm Ann\n/quit\n")
        assert chatted.exit_code == 0, chatted.output
        assert f"Continuing conversation local@{cid}: state ask_name, 1 exchange." in chatted.stdout
        assert "Thanks Ann! Email?" in chatted.stdout
        assert http.get(f"/conversations/{cid}").json()["context"] == {"name": "Ann"}


def test_a_conversation_made_through_v1_is_named_by_its_conversation_id(store_url, definition, tmp_path):
    with serving(store_url, [GREETING, NAME]) as http:
        body = {"model": "signup", "messages": [{"role": "user", "content": "I'm Ann"}]}
        answered = http.post("/v1/chat/completions", json=body)
        assert answered.status_code == 200, answered.text
        cid = answered.json()["llm_fsm"]["conversation_id"]
    shown = cli("conversations", "show", cid, "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["id"] == f"local@{cid}"
    assert json.loads(shown.stdout)["context"] == {"name": "Ann"}


def test_delete_and_unlock_take_the_id_served(store_url):
    with serving(store_url, [GREETING]) as http:
        cid = create(http, definition="signup")["id"]
        store = open_store(store_url)
        with store.lock(client_key("local", cid), timeout=1):
            unlocked = cli("conversations", "unlock", cid, "--store", store_url)
        assert unlocked.exit_code == 0 and unlocked.stdout == f"unlocked local@{cid}\n", unlocked.output
        deleted = cli("conversations", "delete", cid, "--store", store_url)
        assert deleted.exit_code == 0 and deleted.stdout == f"deleted local@{cid}\n", deleted.output
        assert http.get(f"/conversations/{cid}").status_code == 404
        store.close()


def test_run_on_the_id_served_takes_the_lock_serve_takes(store_url, definition, tmp_path):
    with serving(store_url, [GREETING]) as http:
        cid = create(http, definition="signup")["id"]
    store = open_store(store_url)
    with store.lock(client_key("local", cid), timeout=1):  # the lock a served turn of it holds
        busy = run(definition, tmp_path, store_url, cid, [NAME], "I'm Ann\n", "--wait", "0.2")
    assert busy.exit_code == 1 and f"conversation 'local@{cid}' is in use by another turn" in busy.stderr, busy.output
    assert store.load(client_key("local", cid)).version == 1  # the turn waited, ran nothing
    store.close()


def two_clients_with_one_id(store_url: str) -> str:
    """alice and bob each made a conversation with the same Idempotency-Key: two conversations, one bare id."""
    with serving(store_url, [GREETING, GREETING], TOKENS) as http:
        key = {"Idempotency-Key": "signup-form-42"}
        ids = {create(http, auth(token) | key, definition="signup")["id"] for token in (ALICE, BOB)}
    (cid,) = ids
    return cid


def test_an_id_two_clients_have_is_refused_with_the_ids_that_name_each(store_url, definition, tmp_path):
    cid = two_clients_with_one_id(store_url)
    listed = f"alice@{cid}, bob@{cid}"
    for result in [
        cli("conversations", "show", cid, "--store", store_url),
        cli("conversations", "delete", cid, "--store", store_url),
        cli("conversations", "unlock", cid, "--store", store_url),
        run(definition, tmp_path, store_url, cid, [NAME], "I'm Ann\n"),
    ]:
        assert result.exit_code == 2, result.output
        assert f"conversation '{cid}' is ambiguous" in result.stderr and listed in result.stderr
        assert "name the one you mean as CLIENT@ID" in result.stderr and "Traceback" not in result.output
    assert sorted(info.id for info in open_store(store_url).list()) == [f"alice@{cid}", f"bob@{cid}"]

    # the ids list shows are the ones the commands take
    listing = cli("conversations", "list", "--store", store_url, "--json").stdout.splitlines()
    assert sorted(json.loads(line)["id"] for line in listing) == [f"alice@{cid}", f"bob@{cid}"]
    narrow = runner.invoke(app, ["conversations", "list", "--store", store_url], env={"COLUMNS": "60"}).stdout
    assert f"alice@{cid}" in narrow and f"bob@{cid}" in narrow  # whole, to copy, in a narrow terminal or a pipe
    ran = run(definition, tmp_path, store_url, f"bob@{cid}", [NAME], "I'm Ann\n")
    assert ran.exit_code == 0 and lines(ran)[0]["turn"] == 1, ran.output
    assert open_store(store_url).load(f"bob@{cid}").snapshot.context == {"name": "Ann"}
    assert open_store(store_url).load(f"alice@{cid}").snapshot.context == {}


def test_an_id_nobody_has_still_starts_a_new_conversation(store_url, definition, tmp_path):
    with serving(store_url, [GREETING]) as http:
        served = create(http, definition="signup")["id"]
    ran = run(definition, tmp_path, store_url, "mine", [GREETING], "")
    assert ran.exit_code == 0 and lines(ran)[0]["turn"] == 0, ran.output
    # said: a mistyped id would otherwise start an empty conversation without a word
    assert "note: no conversation mine in " in ran.stderr and "a new one starts" in ran.stderr
    assert sorted(info.id for info in open_store(store_url).list()) == sorted(["mine", f"local@{served}"])
    shown = cli("conversations", "show", "nope", "--store", store_url)
    assert shown.exit_code == 1 and "no conversation 'nope'" in shown.stderr


# -- the store's side: resolve and ids_ending, on every backend --------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite", "redis", "postgres"])
def test_resolve_finds_the_one_client_that_has_an_id(kind, tmp_path, request):
    from llm_fsm import Conversation

    store = open_store(url_for(kind, tmp_path, request))
    snapshot = Conversation(signup(), ScriptedLLM()).snapshot()
    for stored in ["alice@abc", "alice@x_bc", "alice@ABC", "bob@zz@abc", "abc2", "mine", "carol@both", "dan@both"]:
        store.save(stored, snapshot)
    assert sorted(store.ids_ending("@abc")) == ["alice@abc", "bob@zz@abc"]  # exact: not x_bc, not ABC
    assert resolve(store, "abc") == "alice@abc"  # bob@zz@abc is bob's "zz@abc", not his "abc"
    assert resolve(store, "mine") == "mine" and resolve(store, "new") == "new"  # stored as named; nobody's
    assert resolve(store, "eve@abc") == "eve@abc"  # a client named: exactly that one, stored or not
    with pytest.raises(AmbiguousIdError) as raised:
        resolve(store, "both")
    assert raised.value.stored_ids == ["carol@both", "dan@both"]
    assert (client_of("alice@abc"), client_of("abc")) == ("alice", None)
    store.close()


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
@pytest.mark.parametrize("command", [["list"], ["show", "abc"], ["delete", "abc"], ["unlock", "abc"],
                                     ["prune", "--older-than", "1d"]])  # fmt: skip
def test_a_store_named_that_does_not_exist_is_said_and_not_made(tmp_path, scheme, command):
    missing = tmp_path / "typo" / ("s.db" if scheme == "sqlite" else "conversations")
    result = cli("conversations", *command, "--store", f"{scheme}:{missing}")
    assert result.exit_code == 2 and f"no store at {scheme}:{missing}" in result.stderr, result.output
    assert not (tmp_path / "typo").exists()
