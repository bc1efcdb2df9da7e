"""Save and load latency per turn for each store, at turn 10 and at turn 1,000 of a conversation.

    python benchmarks/bench_store.py [--reps 30]

Each measurement appends one turn to a stored conversation (save, with the version check) and
loads it back. The ratio turn-1000 / turn-10 shows what a long conversation costs: a save should
not grow with the history (SQLite and Redis append one row), nor a load (it reads the tail a turn
needs; the file store reads its whole file). ``bench_history.py`` goes to 100,000 turns.
A local redis-server is started on a free port when one is installed.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_fsm.snapshot import Exchange, Snapshot
from llm_fsm.store import open_store  # noqa: E402


def snapshot_with(turns: int) -> Snapshot:
    history = tuple(
        Exchange(user=f"user message number {i} " + "x" * 100, assistant=f"reply {i} " + "y" * 200, state="chat")
        for i in range(turns)
    )
    return Snapshot(definition_name="bench", definition_hash="0" * 64, state="chat", history=history, turns=turns)


def measure(url: str, turns: int, reps: int) -> tuple[float, float]:
    store = open_store(url)
    cid = f"bench{turns}"
    base = snapshot_with(turns + reps)
    version = store.save(cid, base.model_copy(update={"history": base.history[:turns], "turns": turns}))
    saves, loads = [], []
    for i in range(reps):
        n = turns + i + 1
        snap = base.model_copy(update={"history": base.history[:n], "turns": n})
        start = time.perf_counter()
        version = store.save(cid, snap, expected_version=version)
        middle = time.perf_counter()
        record = store.load(cid)
        end = time.perf_counter()
        assert record is not None and record.snapshot.history_len == n
        saves.append(middle - start)
        loads.append(end - middle)
    store.close()
    return statistics.median(saves) * 1000, statistics.median(loads) * 1000


def start_redis() -> tuple[subprocess.Popen[bytes] | None, str | None]:
    server = shutil.which("redis-server")
    if server is None:
        return None, None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    process.kill()
    return None, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    redis_process, redis_url = start_redis()
    try:
        with tempfile.TemporaryDirectory() as folder:
            urls = {"memory": "memory:", "file": f"file://{folder}/files", "sqlite": f"sqlite://{folder}/c.db"}
            if redis_url:
                urls["redis"] = redis_url
            header = f"{'store':<8} {'save@10':>9} {'save@1000':>10} {'ratio':>6}   {'load@10':>8} {'load@1000':>10}"
            print(f"{header} {'ratio':>6}  (ms, medians)")
            for name, url in urls.items():
                save10, load10 = measure(url, 10, args.reps)
                save1000, load1000 = measure(url, 1000, args.reps)
                print(f"{name:<8} {save10:>9.3f} {save1000:>10.3f} {save1000 / save10:>6.2f}   "
                      f"{load10:>8.3f} {load1000:>10.3f} {load1000 / load10:>6.2f}")  # fmt: skip
    finally:
        if redis_process is not None:
            redis_process.terminate()


if __name__ == "__main__":
    main()
