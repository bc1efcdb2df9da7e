"""Turn locks under contention, and how soon a killed holder's lock is free again.

    python benchmarks/bench_contention.py [--rounds 3] [--runs 3] [--sizes 10,50,200]

Contention: N asyncio tasks each take one turn of the same conversation at once (``alock``,
``aload``, a 10 ms model call, ``asave`` with the version check), against a baseline of one task
taking the same N turns in a row. Turns/s is N over the time until the last turn is saved; a lost
turn is one that raised ``ConflictError``. Recovery: a child process holds a conversation's lock
and is SIGKILLed; the figure is the time from the kill until this process holds the lock.
A local redis-server is started on a free port when one is installed. Figures are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_store import snapshot_with, start_redis  # noqa: E402
from llm_fsm.errors import ConflictError  # noqa: E402
from llm_fsm.snapshot import Exchange
from llm_fsm.store import Store, open_store  # noqa: E402

MODEL_CALL = 0.01  # seconds each turn spends "calling the model", holding the lock

HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from llm_fsm.store import open_store
with open_store({url!r}).lock("held", timeout=10):
    print("holding", flush=True)
    time.sleep(600)
"""


async def turn(store: Store, n: int) -> bool:
    """One turn on the shared conversation; False if it was lost to a ConflictError."""
    try:
        async with store.alock("shared"):
            record = await store.aload("shared")
            snapshot = record.snapshot if record else snapshot_with(0)
            exchange = Exchange(user=f"turn {n}", assistant="ok", state="chat")
            snapshot = snapshot.model_copy(update={"history": (*snapshot.history, exchange), "turns": n + 1})
            await asyncio.sleep(MODEL_CALL)
            await store.asave("shared", snapshot, expected_version=record.version if record else 0)
    except ConflictError:
        return False
    return True


async def timed_turns(url: str, n: int, *, at_once: bool) -> tuple[float, int]:
    """Seconds for ``n`` turns (all at once, or one after another) and how many were lost."""
    store = open_store(url)
    store.delete("shared")
    start = time.perf_counter()
    if at_once:
        saved = await asyncio.gather(*(turn(store, i) for i in range(n)))
    else:
        saved = [await turn(store, i) for i in range(n)]
    elapsed = time.perf_counter() - start
    if hasattr(store, "aclose"):  # redis.asyncio connections belong to this event loop
        await store.aclose()
    store.close()
    return elapsed, saved.count(False)


def contention(url: str, n: int, rounds: int) -> tuple[float, float, float]:
    """Median turns/s with ``n`` tasks at once, median lost turns, and the in-a-row baseline's turns/s."""
    at_once = [asyncio.run(timed_turns(url, n, at_once=True)) for _ in range(rounds)]
    in_a_row = [asyncio.run(timed_turns(url, n, at_once=False))[0] for _ in range(rounds)]
    return (
        n / statistics.median(seconds for seconds, _ in at_once),
        statistics.median(lost for _, lost in at_once),
        n / statistics.median(in_a_row),
    )


def recovery(url: str, runs: int) -> float:
    """Median seconds from SIGKILL of a lock's holder until another process holds that lock."""
    store = open_store(url)
    times = []
    for _ in range(runs):
        child = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(ROOT), url=url)], stdout=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"holding\n"
        killed = time.perf_counter()
        os.kill(child.pid, signal.SIGKILL)
        with store.lock("held", timeout=120):
            times.append(time.perf_counter() - killed)
        child.wait()
    store.close()
    return statistics.median(times)


def section(rounds: int, runs: int, sizes: list[int]) -> list[str]:
    """The markdown section: a contention table and a recovery table."""
    with every_store() as urls:
        return [*contention_rows(urls, rounds, sizes), *recovery_rows(urls, runs)]


@contextmanager
def every_store() -> Iterator[dict[str, str]]:
    """A fresh store of each kind, by name (Redis if a redis-server is installed), removed afterwards."""
    process, redis_url = start_redis()
    try:
        with tempfile.TemporaryDirectory() as folder:
            urls = {"memory": "memory:", "file": f"file://{folder}/f", "sqlite": f"sqlite://{folder}/c.db"}
            yield urls | ({"redis": redis_url} if redis_url else {})
    finally:
        if process is not None:
            process.terminate()


def contention_rows(urls: dict[str, str], rounds: int, sizes: list[int]) -> list[str]:
    rows = ["## 8. Turn locks: N async tasks on one conversation", "",
            f"Each turn: `alock`, `aload`, a {MODEL_CALL * 1000:.0f} ms model call, `asave` with the version check. "
            "Baseline: one task taking the same N turns in a row.", "",
            "| store | N | turns/s | lost turns | one task, N turns in a row: turns/s | ratio |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, url in urls.items():
        for n in sizes:
            rate, lost, baseline = contention(url, n, rounds)
            rows.append(f"| {name} | {n} | {rate:.1f} | {lost:g} | {baseline:.1f} | {rate / baseline:.2f} |")
    return [*rows, ""]


def recovery_rows(urls: dict[str, str], runs: int) -> list[str]:
    rows = ["## 9. Turn locks: recovery after SIGKILL of the holder", "",
            "Killed just after taking the lock: the worst case, a whole lease (5 s for SQLite and Redis).", "",
            "| store | from the kill to the next lock held |", "|---|---|"]  # fmt: skip
    for name, url in urls.items():
        if name != "memory":  # a memory store lives and dies with its one process
            rows.append(f"| {name} | {recovery(url, runs):.3f} s |")
    return [*rows, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="10,50,200")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    print("\n".join(section(args.rounds, args.runs, sizes)))


if __name__ == "__main__":
    main()
