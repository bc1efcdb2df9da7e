"""Writes the pinned stored conversations of this folder with the code of 01ff7f5 (before history paging).

Run once from the repository root of that tree: ``PYTHONPATH=$PWD python tests/data/stored_before_paging/make_pinned.py
REDIS_URL POSTGRES_URL``. It plays a conversation on ``claim.json`` (summaries on overflow, a memory slot, the
``identity_check`` sub-conversation) until it pauses inside the sub-conversation, with a history longer than the
prompt's window and a running summary, and saves it in each store: ``file/`` (the file store's folder),
``store.db`` (SQLite), ``redis.json`` (every key, as the raw values to write back) and ``postgres.json`` (the rows of
each table). ``tests/store/test_stored_before_paging.py`` loads them with today's code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import llm_fsm
from llm_fsm import Break, Conversation, Hooks
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM

HERE = Path(__file__).resolve().parent
ID = "pinned-1"
STAYS = 14  # turns that stay in ask_policy: past the window (6) and the summary batch


def reply(target: str, message: str, **update: Any) -> dict[str, Any]:
    return {"transition": {"target_state": target, "context_update": update}, "message": message}


def play() -> Conversation:
    hooks = Hooks()

    @hooks.on("before_transition", states=["ask_dob"], targets=["check"])
    def hold(*, context: Any, **_: Any) -> None:
        raise Break("a person checks the date", {"dob": context["dob"]})

    replies = [reply("ask_policy", "Hi! Your policy number?")]
    replies += [reply("ask_policy", f"Noted ({i}). And your policy number?") for i in range(STAYS)]
    replies += [
        reply("identity", "Thanks, let's check who you are.", policy_number="P1", customer_name="Ann"),
        reply("check", "What was your first pet's name?", dob="1990-01-01"),
    ]
    summaries = ({"summary": f"The caller chatted {n} times before giving a policy number."} for n in range(1, 99))
    llm = ScriptedLLM(replies, summaries=summaries)
    conversation = Conversation(llm_fsm.load(HERE / "claim.json"), llm, hooks=hooks)
    conversation.start()
    for i in range(STAYS):
        conversation.send(f"small talk {i}")
    conversation.update_memory({"notes": "Ann, policy P1, chatty."})
    conversation.send("P1, I'm Ann")
    paused = conversation.send("1 Jan 1990")
    assert paused.paused and conversation.snapshot().stack, "the conversation must pause inside the sub-conversation"
    assert conversation.snapshot().summary.through > 0, "a summary must have been made"
    return conversation


def main(redis_url: str, postgres_url: str) -> None:
    snapshot = play().snapshot()
    (HERE / "snapshot.json").write_text(snapshot.model_dump_json(indent=2))
    for url in (f"file://{HERE / 'file'}", f"sqlite:///{HERE / 'store.db'}", redis_url, postgres_url):
        with open_store(url) as store:
            store.delete(ID)
            store.save(ID, snapshot)
    dump_redis(redis_url)
    dump_postgres(postgres_url)


def dump_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    keys: dict[str, Any] = {}
    for key in sorted(client.keys("llm_fsm:*")):
        kind = client.type(key).decode()
        if kind == "hash":
            value: Any = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
        elif kind == "list":
            value = [v.decode() for v in client.lrange(key, 0, -1)]
        elif kind == "zset":
            value = {m.decode(): s for m, s in client.zrange(key, 0, -1, withscores=True)}
        else:
            continue  # a lock: not part of the conversation
        keys[key.decode()] = {"type": kind, "value": value}
    (HERE / "redis.json").write_text(json.dumps(keys, indent=1))


def dump_postgres(url: str) -> None:
    import psycopg

    tables: dict[str, Any] = {}
    with psycopg.connect(url) as db:
        for table in ("conversations", "turns"):
            cursor = db.execute(f"SELECT * FROM llm_fsm.{table}")
            columns = [c.name for c in cursor.description or ()]
            tables[table] = {
                "columns": columns,
                "rows": [[str(v) if not isinstance(v, int) else v for v in row] for row in cursor.fetchall()],
            }
    (HERE / "postgres.json").write_text(json.dumps(tables, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
