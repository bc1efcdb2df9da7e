"""Turn locks: many async waiters, timeouts and cancellation, and recovery when a holder dies."""

from __future__ import annotations

import asyncio
import importlib
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from llm_fsm.errors import ConflictError
from llm_fsm.snapshot import Exchange
from llm_fsm.store import DEFAULT_WAIT, Record, open_store
from llm_fsm.store.redis import RedisStore
from llm_fsm.store.sqlite import SQLiteStore
from tests.conftest import ROOT
from tests.store.test_store import snapshot_after, url_for, whole

SHORT_LEASE = 0.6  # seconds: heartbeat tests use short leases so that a lapse would show quickly


@pytest.fixture(params=["memory", "file", "sqlite", "redis", "postgres"])
def url(request, tmp_path):
    return url_for(request.param, tmp_path, request)


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def leased(request, tmp_path):
    """Opens stores on one shared place whose locks are leases of ``SHORT_LEASE`` seconds (closed after the test)."""
    opened = []
    if request.param == "sqlite":
        kind, where = SQLiteStore, tmp_path / "c.db"
    else:
        where = url_for(request.param, tmp_path, request)
        kind = (
            RedisStore if request.param == "redis" else importlib.import_module("llm_fsm.store.postgres").PostgresStore
        )

    def open_one():
        opened.append(kind(where, lease=SHORT_LEASE))
        return opened[-1]

    yield open_one
    for store in opened:
        store.close()


def next_turn(record: Record | None, n: int):
    """What a turn saves: the stored snapshot (or a new one) with one more exchange."""
    snapshot = record.snapshot if record else snapshot_after(0)
    exchange = Exchange(user=f"turn {n}", assistant="ok", state="chat")
    return snapshot.model_copy(update={"history": (*snapshot.history, exchange), "turns": snapshot.turns + 1})


async def empty_turn(store, conversation_id: str, timeout: float) -> None:
    async with store.alock(conversation_id, timeout=timeout):
        pass


def heartbeats(conversation_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"llm-fsm lease {conversation_id}"]


def heartbeat_tasks(conversation_id: str) -> list[asyncio.Task[None]]:
    """The unfinished heartbeat tasks of this event loop (a store may keep other tasks: a connection pool's)."""
    return [t for t in asyncio.all_tasks() if t.get_name() == f"llm-fsm lease {conversation_id}" and not t.done()]


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
    assert [e.user for e in whole(store, "busy")] == [f"turn {n}" for n in range(50)], "all saved, in order"
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


def test_alock_timeouts_hold_however_many_tasks_wait(url):
    store = open_store(url)

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        async with store.alock("c", timeout=1):
            waiters = [asyncio.ensure_future(empty_turn(store, "c", DEFAULT_WAIT)) for _ in range(20)]
            await asyncio.sleep(0.2)  # they are waiting
            for timeout in (0, 0.2):
                with pytest.raises(ConflictError, match=rf"\(waited {timeout:g} s\)"):
                    # A generous bound: a wait that took a worker thread queued behind the others' waits.
                    await asyncio.wait_for(empty_turn(store, "c", timeout), 30)
        await asyncio.gather(*waiters)

    asyncio.run(scenario())
    store.close()


def test_a_cancelled_waiter_leaves_no_lock_behind(url):
    store = open_store(url)

    async def scenario() -> None:
        with store.lock("c", timeout=1):
            waiter = asyncio.ensure_future(empty_turn(store, "c", 30))
            await asyncio.sleep(0.2)  # it is waiting
            waiter.cancel()
            await asyncio.wait([waiter])
        await asyncio.sleep(0.5)  # room for a wait that outlived its task to take the lock
        async with store.alock("c", timeout=5):
            pass

    asyncio.run(scenario())
    store.close()


# -- holders that die, hang or lose their lock ----------------------------------------------------

HOLDER = """
import asyncio, sys, time
sys.path.insert(0, {root!r})
from llm_fsm.store import open_store

store = open_store({url!r})


def hold():
    with store.lock("held", timeout=10):
        print("holding", flush=True)
        time.sleep(600)


async def ahold():
    async with store.alock("held", timeout=10):
        print("holding", flush=True)
        await asyncio.sleep(600)


hold() if {sync!r} else asyncio.run(ahold())
"""


@pytest.mark.parametrize(
    "kind, sync, signal_number",
    [
        ("file", True, signal.SIGKILL),
        ("file", False, signal.SIGKILL),
        ("sqlite", True, signal.SIGKILL),
        ("sqlite", False, signal.SIGKILL),
        ("sqlite", True, signal.SIGTERM),
        ("redis", True, signal.SIGKILL),
        ("redis", False, signal.SIGKILL),
        ("postgres", True, signal.SIGKILL),
        ("postgres", False, signal.SIGKILL),
    ],
)
def test_the_lock_of_a_killed_holder_is_free_within_seconds(kind, sync, signal_number, tmp_path, request):
    url = url_for(kind, tmp_path, request)
    script = HOLDER.format(root=str(ROOT), url=url, sync=sync)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"holding\n"
    child.send_signal(signal_number)
    child.wait()
    store = open_store(url)
    with store.lock("held", timeout=30):  # the old SQLite and Redis leases (300 s) would time out here
        pass
    store.close()


def test_a_heartbeat_keeps_a_long_turn_locked_and_stops_with_it(leased):
    holder, other = leased(), leased()
    with holder.lock("c", timeout=1):
        time.sleep(SHORT_LEASE * 4)  # a turn longer than the lease
        with pytest.raises(ConflictError), other.lock("c", timeout=0):
            pass
        assert len(heartbeats("c")) == 1
    assert heartbeats("c") == [], "the heartbeat stopped with the turn"
    with other.lock("c", timeout=0):  # and nothing kept the lock alive
        pass


def test_an_async_heartbeat_keeps_a_long_turn_locked_and_stops_with_it(leased):
    holder, other = leased(), leased()

    async def scenario() -> None:
        async with holder.alock("c", timeout=1):
            await asyncio.sleep(SHORT_LEASE * 4)
            with pytest.raises(ConflictError), other.lock("c", timeout=0):
                pass
            assert len(heartbeat_tasks("c")) == 1
        assert heartbeat_tasks("c") == [], "the heartbeat task ended with the turn"
        with other.lock("c", timeout=0):
            pass

    asyncio.run(scenario())


def test_a_renewal_never_takes_back_a_lock_someone_else_holds(leased):
    holder, operator = leased(), leased()
    with ExitStack() as hung_turn:
        hung_turn.enter_context(holder.lock("c", timeout=1))
        [heartbeat] = heartbeats("c")
        assert operator.unlock("c") is True
        with operator.lock("c", timeout=0):  # the next turn
            heartbeat.join(timeout=30)
            assert not heartbeat.is_alive(), "the old holder's heartbeat found the lock taken and stopped"
            hung_turn.close()
            with pytest.raises(ConflictError), holder.lock("c", timeout=0):
                pass  # the next turn still holds it: neither the renewal nor the release took it away


def test_deleting_a_conversation_drops_its_lock(url):
    store, snapshot = open_store(url), snapshot_after(1)
    with store.lock("c", timeout=1):  # a turn whose holder is gone for good
        store.save("c", snapshot)
        assert store.delete("c") is True
        with store.lock("c", timeout=0):  # starting again with the same id is not blocked
            assert store.save("c", snapshot, expected_version=0) == 1
    store.close()


def test_unlock_force_releases_and_the_old_holder_cannot_release_the_new_one(url):
    store = open_store(url)
    assert store.unlock("c") is False
    with ExitStack() as hung_turn:
        hung_turn.enter_context(store.lock("c", timeout=1))
        assert store.unlock("c") is True
        with store.lock("c", timeout=0):  # the next turn goes ahead
            hung_turn.close()  # the hung turn ends: its release must not free the next turn's lock
            with pytest.raises(ConflictError), store.lock("c", timeout=0):
                pass
    with store.lock("c", timeout=0):
        pass
    assert store.unlock("c") is False
    store.close()


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_turn_whose_lock_was_taken_away_says_so_in_the_log(leased, form, caplog):
    # An operator's unlock while the turn runs: its next renewal finds another token and gives up, with a
    # warning that tells the operator what the turn's save will do.
    holder, operator = leased(), leased()
    said = (
        "the lock of conversation 'c' was taken from its turn (its lease ran out, or unlock): "
        "the turn's save fails if another turn saved first"
    )

    async def async_turn() -> None:
        async with holder.alock("c", timeout=1):
            assert operator.unlock("c") is True
            with operator.lock("c", timeout=0):
                for _ in range(200):  # the next renewal, a third of a lease later
                    if not heartbeat_tasks("c"):
                        break
                    await asyncio.sleep(0.05)

    with caplog.at_level("WARNING", logger="llm_fsm"):
        if form == "async":
            asyncio.run(async_turn())
        else:
            with holder.lock("c", timeout=1):
                [beat] = heartbeats("c")
                assert operator.unlock("c") is True
                with operator.lock("c", timeout=0):
                    beat.join(timeout=30)
    assert [r.getMessage() for r in caplog.records] == [said]


def test_a_turn_waits_its_whole_timeout_for_the_lock_and_the_conflict_names_the_conversation(url):
    store = open_store(url)
    taken, done = threading.Event(), threading.Event()

    def other_turn() -> None:
        with store.lock("c", timeout=1):
            taken.set()
            time.sleep(1.0)
        done.set()

    thread = threading.Thread(target=other_turn)
    thread.start()
    taken.wait(10)
    start = time.monotonic()
    with store.lock("c", timeout=1.8):  # tried until the other turn gives it back, up to the last second too
        assert done.is_set() and time.monotonic() - start >= 0.8
        with pytest.raises(ConflictError) as caught, store.lock("c", timeout=0):
            pass
    thread.join()
    assert caught.value.conversation_id == "c"
    store.close()
