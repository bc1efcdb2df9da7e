"""The same conformance suite against every store, plus concurrency and crash tests."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest

import llm_fsm
from llm_fsm.errors import ConflictError, StoreError
from llm_fsm.snapshot import Exchange
from llm_fsm.store import StoredConversation, advance, open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import ROOT, reply

CHAT = {
    "name": "chat",
    "initial_state": "chat",
    "states": {
        "chat": {"purpose": "Chat", "required_context_keys": ["topic"], "transitions": [{"target_state": "bye"}]},
        "bye": {"purpose": "Say goodbye"},
    },
}


def url_for(kind: str, tmp_path, request) -> str:
    """A fresh store of this kind (Redis: a key prefix of its own on the session's server)."""
    if kind == "memory":
        return "memory:"
    if kind == "file":
        return f"file://{tmp_path / 'conversations'}"
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'conversations.db'}"
    if kind == "postgres":  # a schema of its own in the session's database
        return f"{request.getfixturevalue('postgres_url')}?schema=test_{uuid.uuid4().hex}"
    return f"{request.getfixturevalue('redis_url')}?prefix=test-{uuid.uuid4().hex}"


# the stores every contract test runs on: each kind open_store knows (llm_fsm.store.KINDS), by one of its schemes
KINDS = ["memory", "file", "sqlite", "redis", "postgres"]


def test_every_kind_of_store_is_held_to_the_contract():
    from llm_fsm.store import KINDS as REGISTERED

    assert all(set(kind.schemes) & set(KINDS) for kind in REGISTERED), "a store no contract test runs on"
    assert len(KINDS) == len(REGISTERED)


@pytest.fixture(params=KINDS)
def store_url(request, tmp_path):
    return url_for(request.param, tmp_path, request)


@pytest.fixture
def store(store_url):
    opened = open_store(store_url)
    yield opened
    opened.close()


def snapshot_after(turns: int, **context):
    conversation = llm_fsm.Conversation(
        llm_fsm.load(CHAT), ScriptedLLM([reply("chat", f"reply {i}") for i in range(turns)])
    )
    for i in range(turns):
        conversation.send(f"message {i}")
    if context:
        conversation.update_context(context)
    return conversation.snapshot()


def test_save_load_and_versions(store):
    assert store.load("nobody") is None
    first = snapshot_after(2, topic="tea")
    assert store.save("c1", first, expected_version=0) == 1
    record = store.load("c1")
    assert record.snapshot == first and record.version == 1 and record.id == "c1"
    second = snapshot_after(3)
    assert store.save("c1", second, expected_version=1) == 2
    assert store.load("c1").snapshot == second


def test_a_history_rewritten_after_two_equal_turns_is_stored_as_it_is(store):
    # stores append the turns a save adds when the stored ones are its start: two equal turns in a row must
    # not make a rewritten history (an undo, then other turns) look like an extension of the stored one
    same = Exchange(user="hi", assistant="Hello!", state="chat")
    base = snapshot_after(0)
    store.save("c", base.model_copy(update={"history": (same, same)}), expected_version=0)
    other = (
        same,
        Exchange(user="no", assistant="Other.", state="chat"),
        Exchange(user="so", assistant="Ok.", state="chat"),
    )
    store.save("c", base.model_copy(update={"history": other}), expected_version=1)
    assert store.load("c").snapshot.history == other


def test_text_that_is_no_store_url_is_refused_with_the_forms_that_are():
    for text in ("conversations.db", ":memory"):
        with pytest.raises(StoreError) as caught:
            open_store(text)
        assert str(caught.value).startswith(f"{text!r} is not a store URL: use ") and "sqlite:" in str(caught.value)


def test_sqlite_keeps_the_history_in_its_turns_table_only(tmp_path):
    import sqlite3

    store = open_store(f"sqlite://{tmp_path}/c.db")
    snapshot = snapshot_after(3)
    store.save("c", snapshot)
    store.close()
    with sqlite3.connect(tmp_path / "c.db") as db:
        (head,) = db.execute("SELECT head FROM conversations WHERE id = 'c'").fetchone()
        turns = [json.loads(e) for (e,) in db.execute("SELECT exchange FROM turns ORDER BY idx")]
    assert json.loads(head)["history"] == [] and len(turns) == len(snapshot.history) == 3


def test_a_local_store_url_with_a_host_is_refused_naming_it(tmp_path):
    for url in ("sqlite://data/c.db", "file://data/conversations"):
        with pytest.raises(StoreError, match=r"names a host, 'data'"):
            open_store(url)
    store = open_store(f"sqlite://{tmp_path}/c.db")  # no host: an absolute path
    store.save("c", snapshot_after(1))
    store.close()
    assert (tmp_path / "c.db").exists()


def test_compare_and_set_refuses_a_stale_writer(store):
    store.save("c1", snapshot_after(1))
    with pytest.raises(ConflictError) as info:
        store.save("c1", snapshot_after(2), expected_version=0)
    assert info.value.conversation_id == "c1" and "expected version 0, found 1" in str(info.value)
    assert store.load("c1").snapshot.turns == 1, "the refused save changed nothing"


def test_history_is_appended_rewound_and_replaced(store):
    long = snapshot_after(12)
    for n in range(0, 13, 3):
        store.save("c1", long.model_copy(update={"history": long.history[:n]}))
        assert store.load("c1").snapshot.history == long.history[:n]
    store.save("c1", long.model_copy(update={"history": long.history[:4]}))  # /back
    assert store.load("c1").snapshot.history == long.history[:4]
    replaced = (*long.history[:3], Exchange(user="other", assistant="path", state="chat"))
    store.save("c1", long.model_copy(update={"history": replaced}))
    assert store.load("c1").snapshot.history == replaced


def test_pending_events_and_provenance_survive(store):
    hooks = llm_fsm.Hooks()

    @hooks.on("context_update")
    def pause(**_):
        raise llm_fsm.Break("check this", {"n": 1})

    conversation = llm_fsm.Conversation(
        llm_fsm.load(CHAT), ScriptedLLM([reply("chat", "ok", topic="tea")]), hooks=hooks
    )
    conversation.send("tea")
    store.save("p", conversation.snapshot())
    loaded = store.load("p").snapshot
    assert loaded == conversation.snapshot() and loaded.pending.reason == "check this"
    assert loaded.provenance["topic"].by == "llm"


def test_delete_list_and_prune(store):
    store.save("old", snapshot_after(1))
    time.sleep(0.3)
    store.save("new", snapshot_after(2))
    listed = store.list()
    assert [i.id for i in listed] == ["new", "old"]
    assert (listed[0].state, listed[0].turns, listed[0].version, listed[0].definition_name) == ("chat", 2, 1, "chat")
    assert store.prune(timedelta(seconds=0.15)) == 1
    assert [i.id for i in store.list()] == ["new"]
    assert store.delete("new") is True and store.delete("new") is False
    assert store.list() == []


def test_list_tells_an_ended_conversation_from_an_active_one(store):
    ended = llm_fsm.Conversation(llm_fsm.load(CHAT), ScriptedLLM([reply("bye", "Bye!", topic="tea")]))
    ended.send("tea, then bye")
    store.save("ended", ended.snapshot())
    time.sleep(0.05)
    store.save("active", snapshot_after(1))
    assert [(i.id, i.state, i.status) for i in store.list()] == [
        ("active", "chat", "active"),
        ("ended", "bye", "ended"),
    ]


@pytest.mark.parametrize("bad", ["", "../etc/passwd", "a/b", ".hidden", "x" * 200, "a..b", "sp ace"])
def test_ids_are_validated(store, bad):
    with pytest.raises(StoreError, match="invalid conversation id"):
        store.save(bad, snapshot_after(0))


def test_lock_excludes_waits_and_releases(store):
    with store.lock("c1", timeout=1):
        with pytest.raises(ConflictError, match="in use by another turn"), store.lock("c1", timeout=0):
            pass
        with store.lock("c2", timeout=0):  # other conversations are independent
            pass
    holder_released = threading.Event()

    def hold():
        with store.lock("c1", timeout=1):
            time.sleep(0.3)
        holder_released.set()

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.1)
    with store.lock("c1", timeout=10):
        assert holder_released.is_set(), "the second turn waited for the first"
    thread.join()


def test_async_api(store):
    async def scenario():
        snap = snapshot_after(2)
        assert await store.asave("a1", snap, expected_version=0) == 1
        async with store.alock("a1", timeout=1):
            record = await store.aload("a1")
        assert record.snapshot == snap
        assert [i.id for i in await store.alist()] == ["a1"]
        assert await store.aprune(3600) == 0
        assert await store.aunlock("a1") is False
        assert await store.adelete("a1") is True

    asyncio.run(scenario())


def test_advance_creates_continues_and_saves_nothing_on_failure(store):
    definition = llm_fsm.load(CHAT)
    first = advance(store, "u1", definition, ScriptedLLM([reply("chat", "Hello!")]), None)
    second = advance(store, "u1", definition, ScriptedLLM([reply("chat", "Tea it is.", topic="tea")]), "tea?")
    assert (first.turn, second.turn, second.context) == (0, 1, {"topic": "tea"})
    before = store.load("u1")
    with pytest.raises(llm_fsm.LLMError):
        advance(store, "u1", definition, ScriptedLLM([llm_fsm.LLMUnavailableError("down")]), "again")
    assert store.load("u1") == before


def test_a_stored_conversation_takes_up_turns_another_writer_saved():
    definition = llm_fsm.load(CHAT)
    llm = ScriptedLLM([reply("chat", f"reply {i}") for i in range(3)])

    def make(snapshot):
        return (
            llm_fsm.Conversation(definition, llm)
            if snapshot is None
            else llm_fsm.Conversation.restore(snapshot, definition, llm)
        )

    store = open_store("memory:")
    mine, theirs = StoredConversation(store, "c", make), StoredConversation(store, "c", make)
    assert not mine.load().history and mine.is_new
    mine.run(lambda c: c.start())
    theirs.run(lambda c: c.send("from the other terminal"))
    result = mine.run(lambda c: c.send("mine"))
    assert (result.turn, store.load("c").version, mine.is_new) == (2, 3, False)
    mine.replace(make(None))
    assert (store.load("c").snapshot.turns, store.load("c").version) == (0, 4)


def test_restore_names_what_changed_in_the_definition():
    conversation = llm_fsm.Conversation(llm_fsm.load(CHAT), ScriptedLLM())
    changed = json.loads(json.dumps(CHAT))
    changed["states"]["chat"]["purpose"] = "Chat about tea"
    changed["states"]["chat"]["transitions"] = [{"target_state": "end"}]
    changed["states"]["end"] = changed["states"].pop("bye")
    with pytest.raises(llm_fsm.ConversationError) as info:
        llm_fsm.Conversation.restore(conversation.snapshot(), llm_fsm.load(changed), ScriptedLLM())
    message = str(info.value)
    for words in ("state 'bye' removed", "state 'end' added", "transitions of state 'chat' changed"):
        assert words in message
    assert "descriptions" not in message, "a prose edit does not block: only what does is named"
    with pytest.raises(llm_fsm.ConversationError, match="descriptions or instructions of state 'chat' changed"):
        llm_fsm.Conversation.restore(
            conversation.snapshot(), llm_fsm.load(changed), ScriptedLLM(), strict_definition=True
        )


def test_open_store_errors(tmp_path):
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("mysql://x")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot"):
        open_store(f"sqlite://{blocker / 'db.sqlite'}")
    with pytest.raises(StoreError, match="cannot reach Redis"):
        open_store("redis://127.0.0.1:9/0")


def test_redis_urls_refused_in_words_and_the_forms_accepted(redis_url, monkeypatch):
    with pytest.raises(StoreError) as caught:
        open_store("unix://")
    assert str(caught.value) == "store URL 'unix://' names no socket: write unix:///PATH/TO/redis.sock"
    root = redis_url.rpartition("/")[0]  # redis://127.0.0.1:PORT
    store = open_store(f"{root}/?prefix=test-{uuid.uuid4().hex}")  # "/" names no database: the first
    store.save("c", snapshot_after(1))
    assert store.load("c").version == 1
    store.close()
    # the URL's other options reach redis-py: here the database
    prefix = f"test-{uuid.uuid4().hex}"
    store = open_store(f"{root}/?prefix={prefix}&db=3")
    store.save("c", snapshot_after(1))
    assert store.client.connection_pool.connection_kwargs["db"] == 3
    import redis

    assert redis.Redis.from_url(f"{root}/3").keys(f"{prefix}:*") != []
    store.close()
    monkeypatch.setitem(sys.modules, "llm_fsm.store.redis", None)  # as without redis-py installed
    with pytest.raises(StoreError) as caught:
        open_store(redis_url)
    assert str(caught.value) == "the Redis store needs redis-py: pip install 'llm-fsm-runtime[redis]'"


def test_a_local_store_url_is_a_path_with_no_query_nor_fragment(tmp_path, monkeypatch):
    for url in (f"sqlite://{tmp_path}/c.db#main", f"file://{tmp_path}/c?mode=ro"):
        scheme = url.partition(":")[0]
        with pytest.raises(StoreError) as caught:
            open_store(url)
        assert str(caught.value) == (
            f"store URL {url!r} has a query or a fragment: a {scheme}: URL is a path (write ? as %3F, # as %23)"
        )
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:a:b.db")  # relative, and the path may hold a colon
    store.save("c", snapshot_after(1))
    store.close()
    assert (tmp_path / "a:b.db").exists()


def test_default_store_lives_under_llm_fsm_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_FSM_HOME", str(tmp_path / "home"))
    store = open_store()
    store.save("x", snapshot_after(1))
    assert (tmp_path / "home" / "conversations.db").exists()
    store.close()


# -- many processes, one conversation ---------------------------------------------------------

WORKER = """
import sys
sys.path.insert(0, {root!r})
import llm_fsm
from llm_fsm.store import advance, open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.store.test_store import CHAT
store = open_store({url!r})
definition = llm_fsm.load(CHAT)
for n in range({turns}):
    llm = ScriptedLLM([reply("chat", "ok")])
    advance(store, "shared", definition, llm, "p{worker}-" + str(n), wait=60)
"""


@pytest.mark.parametrize("kind", ["file", "sqlite", "redis", "postgres"])
def test_four_processes_advance_one_conversation_without_losing_a_turn(kind, tmp_path, request):
    url = url_for(kind, tmp_path, request)
    workers, turns = 4, 25
    processes = [
        subprocess.Popen([sys.executable, "-c", WORKER.format(root=str(ROOT), url=url, turns=turns, worker=w)])
        for w in range(workers)
    ]
    assert [p.wait(timeout=300) for p in processes] == [0] * workers
    store = open_store(url)
    record = store.load("shared")
    users = [e.user for e in whole(store, "shared")]
    assert len(users) == workers * turns == record.snapshot.turns == record.version
    for w in range(workers):
        mine = [u for u in users if u.startswith(f"p{w}-")]
        assert mine == [f"p{w}-{n}" for n in range(turns)], "each worker's turns are all there, in order"


# -- crashes ----------------------------------------------------------------------------------

CRASHER = """
import sys
sys.path.insert(0, {root!r})
from llm_fsm.snapshot import Exchange
from llm_fsm.store import open_store
store = open_store({url!r})
record = store.load({cid!r})
snapshot, version = record.snapshot, record.version
while True:
    n = snapshot.history_len
    exchange = Exchange(user="u" * (n % 50) + str(n), assistant="a" * 2000 + str(n), state="chat")
    snapshot = snapshot.model_copy(update={{"history": (*snapshot.history, exchange), "turns": n + 1}})
    version = store.save({cid!r}, snapshot, expected_version=version)
    print(version, flush=True)
"""
ROUNDS_PER_CONVERSATION = 20  # a fresh conversation now and then keeps each reload small


def whole(store, cid):
    """The whole stored history of ``cid``, read page by page (a load carries its tail only)."""
    exchanges, before = [], None
    while True:
        page = store.history(cid, before=before, limit=7)  # a small page: several pages are read
        exchanges[:0] = [e for _, e in page.exchanges]
        before = page.before
        if before is None:
            return tuple(exchanges)


def crash_rounds(url: str, kills: int, seed: int = 0) -> int:
    """Kill a saving process ``kills`` times at random moments; check the store after each kill.

    Returns the number of turns committed in all.
    """
    rng = random.Random(seed)
    store = open_store(url)
    committed = 0
    for kill in range(kills):
        cid = f"crash{kill // ROUNDS_PER_CONVERSATION}"
        if kill % ROUNDS_PER_CONVERSATION == 0:
            store.save(cid, snapshot_after(0))
            last_version = 1
        child = subprocess.Popen(
            [sys.executable, "-c", CRASHER.format(root=str(ROOT), url=url, cid=cid)], stdout=subprocess.PIPE
        )
        assert child.stdout is not None
        child.stdout.readline()  # it is saving
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        record = store.load(cid)
        history = whole(store, cid)
        assert record.version >= last_version and len(history) == record.snapshot.turns == record.version - 1
        assert all(e.assistant == "a" * 2000 + str(i) for i, e in enumerate(history)), "every turn intact"
        committed += record.version - last_version
        last_version = record.version
    return committed


@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres"])
def test_a_killed_writer_leaves_the_last_committed_turn_intact(kind, tmp_path, request):
    url = url_for(kind, tmp_path, request)
    assert crash_rounds(url, kills=8) > 8, "the child did save turns between kills"


def test_redis_deletes_a_conversation_in_one_transaction(redis_url):
    # its record, its turns, its place in the index and its lock go together: no reader sees half of it
    store = open_store(f"{redis_url}?prefix=test-{uuid.uuid4().hex}")
    store.save("c", snapshot_after(1))

    def transactions() -> int:
        return store.client.info("commandstats").get("cmdstat_multi", {}).get("calls", 0)

    before = transactions()
    assert store.delete("c") is True
    assert transactions() == before + 1 and store.load("c") is None
    store.close()


def test_the_methods_of_every_store_keep_their_names_and_documentation():
    # a backend's methods are wrapped to turn its driver's errors into StoreError: help() and
    # inspect.signature must still show the method
    import inspect

    from llm_fsm.store.base import STORE_METHODS
    from llm_fsm.store.files import FileStore
    from llm_fsm.store.redis import RedisStore
    from llm_fsm.store.sqlite import SQLiteStore

    wrapped = 0
    for cls in (FileStore, SQLiteStore, RedisStore):
        for name in STORE_METHODS:
            if name in cls.__dict__:
                method = cls.__dict__[name]
                assert method.__name__ == name and method.__qualname__ == f"{cls.__name__}.{name}"
                assert inspect.signature(method) == inspect.signature(method.__wrapped__)
                assert method.__doc__ == method.__wrapped__.__doc__
                wrapped += 1
    assert wrapped > 20


def test_a_damaged_sqlite_file_is_a_store_error_naming_the_store(tmp_path):
    import sqlite3

    path = tmp_path / "c.db"
    store = open_store(f"sqlite://{path}")
    store.save("c", snapshot_after(1))
    with sqlite3.connect(path) as other:  # someone breaks the file under the open store
        other.execute("DROP TABLE conversations")
    with pytest.raises(StoreError) as caught:
        store.load("c")
    assert str(caught.value) == f"the store sqlite://{path.resolve()} failed: no such table: conversations"

    async def aload() -> None:
        with pytest.raises(StoreError, match=r"^the store sqlite://.* failed: no such table: conversations$"):
            await store.aload("c")

    asyncio.run(aload())
    store.close()


def test_a_redis_server_gone_is_a_store_error_naming_the_store_without_its_password():
    from tests.conftest import start_redis

    process, port = start_redis()
    url = f"redis://:s3cret@127.0.0.1:{port}/0?prefix=gone"
    try:
        store = open_store(url.replace(":s3cret@", ""))  # the server wants no password: check the masking below
        store.save("c", snapshot_after(1))
        store.url = url  # the URL the messages name
    finally:
        process.kill()
        process.wait(timeout=10)
    where = rf"^the store redis://:\*\*\*@127\.0\.0\.1:{port}/0\?prefix=gone failed: \S"
    with pytest.raises(StoreError, match=where):
        store.load("c")

    async def aload() -> None:
        with pytest.raises(StoreError, match=where):
            await store.aload("c")

    asyncio.run(aload())


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_closing_a_sqlite_store_releases_its_file_and_it_can_be_used_again(tmp_path):
    path = tmp_path / "c.db"

    def open_handles() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()) for fd in os.listdir("/proc/self/fd"))

    store = open_store(f"sqlite://{path}")
    store.save("c", snapshot_after(1))
    assert open_handles() == 1
    store.close()
    assert open_handles() == 0
    assert store.load("c").version == 1  # opened again on use
    store.close()


def test_a_sqlite_store_keeps_one_connection_per_thread(tmp_path, monkeypatch):
    import sqlite3

    opened = []
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    store = open_store(f"sqlite://{tmp_path / 'c.db'}")
    store.save("c", snapshot_after(1))
    store.save("c", snapshot_after(2), expected_version=1)
    assert store.load("c").version == 2 and [i.id for i in store.list()] == ["c"]
    assert len(opened) == 1
    thread = threading.Thread(target=store.load, args=("c",))
    thread.start()
    thread.join()
    assert len(opened) == 2  # sqlite3 connections must not be shared between threads
    store.close()


def test_a_make_that_cannot_take_the_snapshot_is_refused_saying_what_make_is():
    store = open_store("memory:")
    for make, named in ((lambda: None, "<lambda>() cannot take it"), ("make", "got str")):
        with pytest.raises(TypeError) as raised:
            StoredConversation(store, "c", make)  # type: ignore[arg-type]
        assert "make must be a function of one argument" in str(raised.value) and named in str(raised.value)
        assert "None for a new conversation" in str(raised.value)
    StoredConversation(store, "c", lambda snapshot: None)  # type: ignore[arg-type,return-value]
