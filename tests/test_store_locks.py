"""Turn locks: many async waiters, timeouts and cancellation."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm_fsm.engine import Exchange
from llm_fsm.errors import ConflictError
from llm_fsm.store import Record, open_store
from tests.test_store import snapshot_after, url_for


@pytest.fixture(params=["memory", "file", "sqlite", "redis"])
def url(request, tmp_path):
    return url_for(request.param, tmp_path, request)


def next_turn(record: Record | None, n: int):
    """What a turn saves: the stored snapshot (or a new one) with one more exchange."""
    snapshot = record.snapshot if record else snapshot_after(0)
    exchange = Exchange(user=f"turn {n}", assistant="ok", state="chat")
    return snapshot.model_copy(update={"history": (*snapshot.history, exchange), "turns": snapshot.turns + 1})


# -- many async waiters -------------------------------------------------------------------------


def test_fifty_async_turns_on_one_conversation_run_one_after_another(url):
    store = open_store(url)
    threads_seen: list[int] = []

    async def turn(n: int) -> None:
        async with store.alock("busy", timeout=60):
            threads_seen.append(threading.active_count())
            record = await store.aload("busy")
            await asyncio.sleep(0.01)  # the model call
            await store.asave("busy", next_turn(record, n), expected_version=record.version if record else 0)

    async def fifty_turns() -> None:
        # Room for a thread per waiter, so that waiters holding threads would show.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=100))
        await asyncio.gather(*(turn(n) for n in range(50)))

    before = threading.active_count()
    asyncio.run(fifty_turns())
    record = store.load("busy")
    assert [e.user for e in record.snapshot.history] == [f"turn {n}" for n in range(50)], "all saved, in order"
    assert record.version == 50
    assert max(threads_seen) - before <= 4, "waiters hold no thread: only the holder's I/O and one try use them"
    store.close()


def test_alock_times_out_with_the_stores_conflict_error(url):
    store = open_store(url)

    async def scenario() -> None:
        async with store.alock("c", timeout=1):  # held by a task of this process
            with pytest.raises(ConflictError, match=r"'c' is in use by another turn \(waited 0.2 s\)"):
                async with store.alock("c", timeout=0.2):
                    pass
            with pytest.raises(ConflictError, match=r"\(waited 0 s\)"):
                async with store.alock("c", timeout=0):
                    pass
        held_elsewhere = store.lock("c", timeout=1)  # by another thread or process
        with held_elsewhere, pytest.raises(ConflictError, match=r"'c' is in use by another turn \(waited 0.2 s\)"):
            async with store.alock("c", timeout=0.2):
                pass
        async with store.alock("c", timeout=0):  # both were given back
            pass

    asyncio.run(scenario())
    store.close()


def test_a_cancelled_waiter_leaves_no_lock_behind(url):
    store = open_store(url)

    async def wait_for_a_turn() -> None:
        async with store.alock("c", timeout=30):
            pass

    async def scenario() -> None:
        with store.lock("c", timeout=1):
            waiter = asyncio.ensure_future(wait_for_a_turn())
            await asyncio.sleep(0.2)  # it is waiting
            waiter.cancel()
            await asyncio.wait([waiter])
        await asyncio.sleep(0.5)  # room for a wait that outlived its task to take the lock
        async with store.alock("c", timeout=5):
            pass

    asyncio.run(scenario())
    store.close()
