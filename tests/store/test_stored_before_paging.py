"""Conversations stored before history paging (by 01ff7f5, see ``tests/data/stored_before_paging/make_pinned.py``)
still load in every store: paused inside a sub-conversation, with a running summary, working memory and a history
longer than the prompt's window. Each is loaded, resumed (a turn), taken one turn further, and its whole history
is paged; the SQL stores are migrated on open (idempotently, and by several openers at once)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.store import StoredConversation, open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.store.test_store import whole

PINNED = Path(__file__).parents[1] / "data" / "stored_before_paging"
ID = "pinned-1"
# the tables as 01ff7f5 made them (no history_start column)
OLD_POSTGRES = """
CREATE SCHEMA {s};
CREATE TABLE {s}.conversations (id text PRIMARY KEY, version bigint NOT NULL, definition_name text NOT NULL,
    state text NOT NULL, status text NOT NULL, turns integer NOT NULL, head text NOT NULL, history_len integer NOT NULL,
    last_exchange text, updated_at timestamptz NOT NULL);
CREATE INDEX conversations_updated ON {s}.conversations (updated_at);
CREATE TABLE {s}.turns (conversation_id text NOT NULL, idx integer NOT NULL, exchange text NOT NULL,
    PRIMARY KEY (conversation_id, idx));
CREATE UNLOGGED TABLE {s}.locks (id text PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL);
"""


def old_history() -> list[dict[str, Any]]:
    return list(json.loads((PINNED / "snapshot.json").read_text())["history"])


def file_url(tmp_path: Path, request: Any) -> str:
    shutil.copytree(PINNED / "file", tmp_path / "file")
    return f"file://{tmp_path / 'file'}"


def sqlite_url(tmp_path: Path, request: Any) -> str:
    shutil.copy(PINNED / "store.db", tmp_path / "store.db")
    return f"sqlite://{tmp_path / 'store.db'}"


def redis_url(tmp_path: Path, request: Any) -> str:
    import redis

    server = request.getfixturevalue("redis_url")
    prefix = f"pinned-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(server)
    for key, item in json.loads((PINNED / "redis.json").read_text()).items():  # written back with raw commands
        name = prefix + key.removeprefix("llm_fsm")
        if item["type"] == "hash":
            client.hset(name, mapping=item["value"])
        elif item["type"] == "list":
            client.rpush(name, *item["value"])
        else:
            client.zadd(name, item["value"])
    return f"{server}?prefix={prefix}"


def postgres_url(tmp_path: Path, request: Any) -> str:
    import psycopg

    server = request.getfixturevalue("postgres_url")
    schema = f"pinned_{uuid.uuid4().hex}"
    tables = json.loads((PINNED / "postgres.json").read_text())
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(OLD_POSTGRES.format(s=schema))
        for table, dump in tables.items():
            columns = ", ".join(dump["columns"])
            marks = ", ".join(["%s"] * len(dump["columns"]))
            for row in dump["rows"]:
                db.execute(f"INSERT INTO {schema}.{table} ({columns}) VALUES ({marks})", row)
    return f"{server}?schema={schema}"


KINDS = {"file": file_url, "sqlite": sqlite_url, "redis": redis_url, "postgres": postgres_url}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_conversation_stored_before_paging_loads_takes_turns_and_pages(kind, tmp_path, request):
    url = KINDS[kind](tmp_path, request)
    definition = llm_fsm.load(PINNED / "claim.json")
    llm = ScriptedLLM(
        [reply("check", "Checked. Your first pet?"), reply("ok", "Confirmed.", verified=True)],
        summaries=lambda _: {"summary": "Ann, policy P1."},
    )

    def make(snapshot: llm_fsm.Snapshot | None) -> llm_fsm.Conversation:
        assert snapshot is not None
        return llm_fsm.Conversation.restore(snapshot, definition, llm)

    store = open_store(url)
    loaded = store.load(ID).snapshot
    assert loaded.status == "paused" and loaded.stack and loaded.memory == {"notes": "Ann, policy P1, chatty."}
    assert loaded.summary.through == 10 and loaded.history_len == len(old_history()) == 17
    stored = StoredConversation(store, ID, make)
    token = stored.conversation.pending.token
    resumed = stored.run(lambda c: c.resume(token, {"dob_ok": True}))
    assert resumed.message == "Checked. Your first pet?" and stored.conversation.status == "active"
    stored.run(lambda c: c.send("Rex"))
    history = [e.model_dump() for e in whole(store, ID)]
    assert history[:17] == old_history(), "the old history, whole, in order"
    assert [e["user"] for e in history[17:]] == [None, "Rex"], "the resumed turn, then the one sent"
    again = open_store(url).load(ID).snapshot  # opened again: any migration is not made twice
    assert again.history_len == 19 and again.history == tuple(whole(store, ID)[again.history_start :])


def test_sqlite_is_migrated_once_by_openers_at_once(tmp_path):
    url = sqlite_url(tmp_path, None)
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            open_store(url).close()
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    with sqlite3.connect(tmp_path / "store.db") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(conversations)")]
        start = db.execute("SELECT history_start FROM conversations").fetchone()[0]
    assert columns.count("history_start") == 1 and start == 0, "old rows read their whole history until saved"
