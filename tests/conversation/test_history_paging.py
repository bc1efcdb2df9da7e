"""History out of the snapshot: a stored conversation's load carries the tail of its history a turn needs, saves
append rows, and the whole history is read page by page (the stores, StoredConversation, ``serve``'s
``GET /conversations/{id}/history`` and its web page, and chat's ``/history``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.definition.memory import RunningSummary
from llm_fsm.errors import StoreError
from llm_fsm.snapshot import Exchange
from llm_fsm.store import StoredConversation, open_store
from llm_fsm.store.history import TAIL, bounded
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.server.test_server import ALICE, BOB, TOKENS, auth, client, error_of
from tests.store.test_store import CHAT, snapshot_after, url_for, whole

LONG = 3 * TAIL  # exchanges: the tail a load carries is a third of them


@pytest.fixture(params=["memory", "file", "sqlite", "redis", "postgres"])
def store(request, tmp_path):
    opened = open_store(url_for(request.param, tmp_path, request))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def long_snapshot() -> llm_fsm.Snapshot:
    return snapshot_after(LONG)


def test_a_load_carries_the_tail_and_the_pages_hold_every_exchange(store, long_snapshot):
    store.save("c", long_snapshot)
    loaded = store.load("c").snapshot
    assert loaded.history_start == LONG - TAIL and loaded.history == long_snapshot.history[-TAIL:]
    assert loaded.history_len == LONG and loaded.turns == long_snapshot.turns
    page = store.history("c", limit=25)
    assert [i for i, _ in page.exchanges] == list(range(LONG - 25, LONG)) and page.before == LONG - 25
    assert page.total == LONG and [e for _, e in page.exchanges] == list(long_snapshot.history[-25:])
    assert whole(store, "c") == long_snapshot.history
    first = store.history("c", before=3, limit=50)
    assert [i for i, _ in first.exchanges] == [0, 1, 2] and first.before is None
    assert store.history("c", before=0).exchanges == () and store.history("c", before=10**6).total == LONG
    assert store.history("nobody") is None


def test_a_turn_on_the_tail_appends_and_going_back_rewrites_from_the_tail(store, long_snapshot):
    store.save("c", long_snapshot)
    loaded = store.load("c")
    extra = Exchange(user="one more", assistant="noted", state="chat")
    grown = loaded.snapshot.model_copy(update={"history": (*loaded.snapshot.history, extra)})
    store.save("c", grown, expected_version=loaded.version)
    assert whole(store, "c") == (*long_snapshot.history, extra)
    assert store.load("c").snapshot.history[-1] == extra and store.load("c").snapshot.history_start == LONG + 1 - TAIL
    other = Exchange(user="other", assistant="path", state="chat")
    # back two exchanges (an undo to an earlier tail), then another way: the rows from the tail on are rewritten
    back = loaded.snapshot.model_copy(update={"history": (*loaded.snapshot.history[:-1], other)})
    store.save("c", back)
    assert whole(store, "c") == (*long_snapshot.history[:-1], other)


def test_a_snapshot_whose_history_starts_past_what_is_stored_is_refused(store, long_snapshot):
    tail = bounded(long_snapshot, 5)
    with pytest.raises(StoreError, match="whole history"):
        store.save("fresh", tail)
    assert store.load("fresh") is None


def test_exchanges_waiting_for_a_summary_stay_in_the_tail(store, long_snapshot):
    waiting = long_snapshot.model_copy(update={"summary": RunningSummary(text="so far", through=7, due=30)})
    store.save("c", waiting)
    loaded = store.load("c").snapshot
    assert loaded.history_start == 7 and loaded.history == long_snapshot.history[7:]


@pytest.mark.parametrize(("before", "limit"), [(-1, 10), ("3", 10), (None, 0), (None, 1001), (True, 5), (None, 2.0)])
def test_a_page_out_of_bounds_is_a_value_error(store, before, limit):
    with pytest.raises(ValueError, match="before|limit"):
        store.history("c", before=before, limit=limit)


def test_async_pages_are_the_sync_ones(store, long_snapshot):
    store.save("c", long_snapshot)

    async def read() -> Any:
        return await store.ahistory("c", before=40, limit=7), await store.ahistory("nobody")

    page, missing = asyncio.run(read())
    assert page == store.history("c", before=40, limit=7) and missing is None


def test_a_stored_conversation_keeps_its_tail_and_reads_the_rest_from_the_store(tmp_path):
    sqlite = open_store(f"sqlite://{tmp_path / 'c.db'}")
    llm = ScriptedLLM([reply("chat", f"reply {i}") for i in range(LONG)])
    stored = StoredConversation(sqlite, "c", lambda s: llm_fsm.Conversation.restore(s, llm_fsm.load(CHAT), llm)
                                if s else llm_fsm.Conversation(llm_fsm.load(CHAT), llm))  # fmt: skip
    for i in range(LONG):
        stored.run(lambda c, i=i: c.send(f"message {i}"))
    carried = stored.conversation.snapshot()
    assert carried.history_start == LONG - TAIL and len(carried.history) == TAIL, "bounded in memory too"
    assert [e.user for e in stored.whole().history] == [f"message {i}" for i in range(LONG)]
    assert stored.history(before=2).exchanges[0][1].user == "message 0"
    assert asyncio.run(stored.ahistory(limit=1)).exchanges[0][1].user == f"message {LONG - 1}"
    again = StoredConversation(sqlite, "c", stored.make)
    assert again.load().snapshot() == carried


# -- serve ---------------------------------------------------------------------------------------


def served(turns: int) -> tuple[Any, str, list[str]]:
    """A server whose store carries a tail of 3, which its conversations raise to what their prompt shows (the
    default window: 6), and a conversation of ``turns`` messages after its opening."""
    kept = open_store("memory:")
    kept.tail = 3
    llm = ScriptedLLM([reply("chat", "hello"), *(reply("chat", f"reply {i}") for i in range(turns))])
    http = client(llm, [llm_fsm.load(CHAT)], store=kept, tokens=TOKENS)
    created = http.post("/conversations", json={}, headers=auth(ALICE)).json()
    for i in range(turns):
        assert http.post(f"/conversations/{created['id']}/messages", json={"message": f"m{i}"}, headers=auth(ALICE))
    return http, created["id"], ["hello", *(f"reply {i}" for i in range(turns))]


def test_serve_pages_the_history_with_a_cursor():
    http, cid, replies = served(9)
    shown = http.get(f"/conversations/{cid}", headers=auth(ALICE)).json()
    assert shown["history_start"] == 4 and shown["history_len"] == 10 and len(shown["history"]) == 6
    seen, before = [], shown["history_start"]
    while before is not None:
        page = http.get(f"/conversations/{cid}/history?before={before}&limit=3", headers=auth(ALICE))
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["total"] == 10 and all(e["index"] < before for e in body["exchanges"])
        seen[:0] = body["exchanges"]
        before = body["next_before"]
    assert [e["index"] for e in seen] == list(range(4)) and [e["assistant"] for e in seen] == replies[:4]
    last = http.get(f"/conversations/{cid}/history", headers=auth(ALICE)).json()
    assert [e["assistant"] for e in last["exchanges"]] == replies and last["next_before"] is None


@pytest.mark.parametrize("query", ["before=-1", "before=x", "limit=0", "limit=1001", "limit=", "before=1.5"])
def test_serve_refuses_a_bad_page_readably(query):
    http, cid, _ = served(1)
    error = error_of(http.get(f"/conversations/{cid}/history?{query}", headers=auth(ALICE)), 400, "invalid_request")
    assert query.split("=")[0] in error["message"]


def test_serve_shows_no_history_of_another_clients_conversation():
    http, cid, _ = served(1)
    error_of(http.get(f"/conversations/{cid}/history", headers=auth(BOB)), 404, "not_found")
    error_of(http.get(f"/conversations/{'0' * 32}/history", headers=auth(ALICE)), 404, "not_found")
    error_of(http.get(f"/conversations/{cid}/history"), 401, "unauthorized")


# -- chat ----------------------------------------------------------------------------------------


def chat_args(tmp_path):
    """A stored chat of 24 typed messages (m0..m23) after the opening: its command line, and what is typed."""
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT))
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("chat", "hello"), *(reply("chat", f"reply {i}") for i in range(24))]))
    args = ["chat", str(path), "--model", f"scripted:{script}", "--store", f"sqlite://{tmp_path / 'c.db'}"]
    return args, "".join(f"m{i}\n" for i in range(24))


def test_chat_history_pages_back_through_the_stored_history(tmp_path):
    args, typed = chat_args(tmp_path)
    typed += "/history\n/history older\n/history older\n"
    result = CliRunner().invoke(app, args, input=typed, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = result.stdout.split("(exchanges 6-25 of 25: /history older shows the ones before)")
    assert len(shown) == 2 and "you> m4\n" in shown[0] and "you> m3\n" not in shown[0].split("you> m23")[-1]
    assert shown[1].startswith("\nyou> bot> hello (chat)\nyou> m0\n")  # "you> ": the next prompt
    assert "you> m3\nbot> reply 3 (chat)\n" in shown[1]
    assert "No earlier exchanges: /history shows the last ones." in shown[1]


def test_a_window_wider_than_the_stores_tail_comes_back_whole_from_a_load(tmp_path):
    """A conversation whose prompt shows more exchanges than the store's default tail carries them all."""
    from llm_fsm.turn.prompt import PromptBuilder, PromptSettings

    wide = TAIL + 10
    turns = wide + 5
    builder = PromptBuilder(settings=PromptSettings(history_window=wide))
    llm = ScriptedLLM([reply("chat", f"reply {i}") for i in range(turns + 1)])

    def make(snapshot):
        if snapshot is None:
            return llm_fsm.Conversation(llm_fsm.load(CHAT), llm, prompt=builder)
        return llm_fsm.Conversation.restore(snapshot, llm_fsm.load(CHAT), llm, prompt=builder)

    url = f"sqlite://{tmp_path / 'c.db'}"
    stored = StoredConversation(open_store(url), "c", make)
    for i in range(turns):
        stored.run(lambda c, i=i: c.send(f"message {i}"))
    again = StoredConversation(open_store(url), "c", make)  # a new process: its store has the default tail
    loaded = again.load().snapshot()
    assert len(loaded.history) >= wide and loaded.history[-1].user == f"message {turns - 1}"
    again.run(lambda c: c.send("one more"))
    shown = llm.requests[-1].messages[0]["content"]
    # the last ``wide`` exchanges before "one more": message 5 to message 34
    assert f"message {turns - wide}<" in shown and f"message {turns - wide - 1}<" not in shown


def other_conversation(turns: int) -> llm_fsm.Snapshot:
    """A conversation other than ``snapshot_after``'s: its exchanges differ from theirs."""
    conversation = llm_fsm.Conversation(
        llm_fsm.load(CHAT), ScriptedLLM([reply("chat", f"other reply {i}") for i in range(turns)])
    )
    for i in range(turns):
        conversation.send(f"other message {i}")
    return conversation.snapshot()


def test_the_tail_of_another_conversation_is_refused_not_spliced(store, long_snapshot):
    version = store.save("long1", long_snapshot)
    other = other_conversation(LONG - 10)
    store.save("b", other)
    tail = store.load("b").snapshot  # carries its history from exchange LONG - 10 - TAIL on
    assert tail.history_start > 0
    with pytest.raises(StoreError, match="whole snapshot") as refused:
        store.save("long1", tail, expected_version=version)
    assert long_snapshot.uid in str(refused.value) and other.uid in str(refused.value)
    # nothing changed: A's history, head and version are as they were
    assert whole(store, "long1") == long_snapshot.history
    loaded = store.load("long1")
    assert loaded.version == version and loaded.snapshot.uid == long_snapshot.uid
    # the whole snapshot replaces it, as before
    store.save("long1", other, expected_version=version)
    assert whole(store, "long1") == other.history and store.load("long1").snapshot.uid == other.uid


def test_a_whole_snapshot_of_another_conversation_is_rewritten_even_when_it_extends_the_stored_rows(store):
    a = snapshot_after(5)
    store.save("c", a)
    # another conversation whose history ends, at the stored length, with the stored last exchange: without its
    # uid compared, the save would only append its two new exchanges to a's rows
    first = Exchange(user="a different start", assistant="indeed", state="chat")
    extra = (Exchange(user="six", assistant="6", state="chat"), Exchange(user="seven", assistant="7", state="chat"))
    b = a.model_copy(update={"uid": "another-conversation", "history": (first, *a.history[1:], *extra)})
    store.save("c", b)
    assert whole(store, "c") == b.history


def test_chat_history_older_before_any_history_shows_the_page_before_the_last(tmp_path):
    args, typed = chat_args(tmp_path)
    args, typed = [*args, "-c", "c1"], typed + "/history older\n/history older\n"
    result = CliRunner().invoke(app, args, input=typed, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # /history would show exchanges 6-25; /history older, typed first, the 5 before them
    shown = result.stdout.split("you> m23")[-1]
    assert "bot> hello (chat)\nyou> m0\n" in shown and "you> m3\nbot> reply 3 (chat)\n" in shown
    assert "you> m4\n" not in shown and "No earlier exchanges" in shown.split("reply 3 (chat)")[1]
    # a chat continuing it says how many exchanges (not messages) the history holds
    again = CliRunner().invoke(app, args, input="", env={"COLUMNS": "200"})
    assert "Continuing conversation c1: state chat, 25 exchanges." in again.stdout
