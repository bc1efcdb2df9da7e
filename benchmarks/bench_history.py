"""A stored turn at 10, 1,000 and 100,000 turns: load, save and both, per store, before and after history paging.

    python benchmarks/bench_history.py [--quick] [--old /tmp/old-tree]

A turn of a stored conversation loads it, adds one exchange and saves it with the version check. Each
measurement runs in a worker process that imports ``llm_fsm`` from one tree: this one (after) or, with
``--old``, a checkout of 01ff7f5 (before: ``git worktree add /tmp/old-history 01ff7f5``), and the two
alternate in one run. The conversation is built in one save of all its exchanges (the store's own append
path), then ``reps`` turns are timed. Ratios are to the same store at 10 turns; the goal (issue 26) is
load + save at 100,000 turns within 1.5 x that at 10 for SQLite, Redis and Postgres. A local redis-server
and a throwaway PostgreSQL (``tests/postgres_server.py``) are started when installed. The file store keeps
one file per conversation (its cost grows with the history, by design): it is measured up to 1,000.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import bench_store  # noqa: E402

TURNS = (10, 1_000, 100_000)
GOAL = 1.5

# Runs in the worker, against whichever tree is first on sys.path; uses only what both trees have.
WORKER = """
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from llm_fsm.engine import Exchange, Snapshot
from llm_fsm.store import open_store

url, turns, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def exchange(i):
    return Exchange(user=f"user message number {i} " + "x" * 100, assistant=f"reply {i} " + "y" * 200, state="chat")
store = open_store(url)
history = tuple(exchange(i) for i in range(turns))
store.save("bench", Snapshot(definition_name="bench", definition_hash="0" * 64, state="chat", history=history,
                             turns=turns))
del history
loads, saves, sizes = [], [], []
for i in range(reps):
    start = time.perf_counter()
    record = store.load("bench")
    middle = time.perf_counter()
    snapshot = record.snapshot
    n = getattr(snapshot, "history_len", len(snapshot.history))
    grown = snapshot.model_copy(update={"history": (*snapshot.history, exchange(n)), "turns": n + 1})
    before_save = time.perf_counter()
    store.save("bench", grown, expected_version=record.version)
    end = time.perf_counter()
    loads.append(middle - start)
    saves.append(end - before_save)
    sizes.append(len(snapshot.model_dump_json()))
store.close()
print(json.dumps({"load": loads, "save": saves, "size": statistics.median(sizes)}))
"""


def run(tree: Path, url: str, turns: int, reps: int) -> dict[str, list[float] | float]:
    """One worker's samples (seconds) and the loaded snapshot's size (bytes)."""
    argv = [sys.executable, "-c", WORKER, str(tree), url, str(turns), str(reps)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        raise RuntimeError(f"the worker failed ({tree}, {url}, {turns}): {done.stderr.strip()[-800:]}")
    return dict(json.loads(done.stdout))


def fresh(kind: str, base: str, folder: str) -> str:
    """A store of its own: measurements of the two trees never share tables (the new one adds a column)."""
    name = uuid.uuid4().hex[:12]
    if kind == "sqlite":
        return f"sqlite://{folder}/{name}.db"
    if kind == "file":
        return f"file://{folder}/{name}"
    if kind == "redis":
        return f"{base}?prefix=bench-{name}"
    return f"{base}?schema=bench_{name}"


def measure(
    trees: dict[str, Path], bases: dict[str, str], reps: int, old_turns: int, rounds: int
) -> list[dict[str, object]]:
    """Every (store, turns, tree), the trees alternating size by size, in ``rounds`` rounds whose samples are
    pooled (a save waits for fsync on a shared disk: one round alone can meet a slow moment)."""
    pooled: dict[tuple[str, int, str], dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for kind, base in bases.items():
                for turns in TURNS:
                    if kind == "file" and turns > 1_000:
                        continue
                    for label, tree in trees.items():
                        if label == "before" and turns > old_turns:
                            continue
                        # fewer turns timed where each costs a whole history (the file store, the old tree at 100k)
                        slow = kind == "file" or (label == "before" and turns >= 100_000)
                        samples = run(tree, fresh(kind, base, folder), turns, max(3, reps // 4) if slow else reps)
                        row = pooled.setdefault((kind, turns, label), {"load": [], "save": [], "size": 0.0})
                        row["load"] += samples["load"]  # type: ignore[operator]  # lists of seconds
                        row["save"] += samples["save"]  # type: ignore[operator]
                        row["size"] = samples["size"]
    return [{"store": k, "turns": t, "tree": label, **row} for (k, t, label), row in pooled.items()]


def servers() -> tuple[dict[str, str], list[object]]:
    """The stores to measure, and what to stop afterwards."""
    bases = {"sqlite": "", "file": ""}
    stop: list[object] = []
    process, redis_url = bench_store.start_redis()
    if redis_url:
        bases["redis"], stop = redis_url, [process]
    from tests import postgres_server

    if postgres_server.missing() is None:
        try:
            import psycopg  # noqa: F401

            server = postgres_server.start()
            bases["postgres"] = server.url
            stop.append(server)
        except ImportError:
            pass
    return bases, stop


def stop_all(stop: list[object]) -> None:
    for thing in stop:
        if isinstance(thing, subprocess.Popen):
            thing.terminate()
            thing.wait()
        else:
            thing.stop()  # type: ignore[attr-defined]  # a postgres_server.Server


def ms(values: object) -> float:
    return statistics.median(values) * 1000  # type: ignore[arg-type]  # a list of seconds


def table(rows: list[dict[str, object]]) -> list[str]:
    lines = [
        "| store | turns | tree | load | save | load + save | / same at 10 turns | loaded snapshot |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base: dict[tuple[object, object], float] = {}
    for row in rows:
        load, save = ms(row["load"]), ms(row["save"])
        both = load + save
        key = (row["store"], row["tree"])
        if row["turns"] == 10:
            base[key] = both
        ratio = both / base[key] if key in base else float("nan")
        size = float(row["size"])  # type: ignore[arg-type]  # bytes
        lines.append(
            f"| {row['store']} | {row['turns']:,} | {row['tree']} | {load:.3f} ms | {save:.3f} ms | {both:.3f} ms "
            f"| {ratio:.2f} | {size / 1024:,.1f} KiB |"
        )
    return lines


def verdict(rows: list[dict[str, object]]) -> list[str]:
    after = {(r["store"], r["turns"]): ms(r["load"]) + ms(r["save"]) for r in rows if r["tree"] == "after"}
    lines = []
    for kind in ("sqlite", "redis", "postgres"):
        if (kind, 100_000) in after:
            ratio = after[(kind, 100_000)] / after[(kind, 10)]
            lines.append(f"- {kind}: load + save at 100,000 turns is {ratio:.2f} x that at 10 "
                         f"({'meets' if ratio <= GOAL else 'misses'} the goal of {GOAL} x)")  # fmt: skip
    return lines


def section(quick: bool, old: Path | None = None) -> list[str]:
    """RESULTS.md's section: after, and before too when ``old`` (a checkout of 01ff7f5) is given."""
    reps = 8 if quick else 30
    trees = {"after": ROOT, **({"before": old} if old else {})}
    bases, stop = servers()
    try:
        rows = measure(trees, bases, reps, old_turns=10_000 if quick else 100_000, rounds=1 if quick else 2)
    finally:
        stop_all(stop)
    command = f"python benchmarks/bench_history.py{' --quick' if quick else ''}{f' --old {old}' if old else ''}"
    return [
        "## 15. History out of the snapshot (issue 26 §3): a stored turn at 10 / 1,000 / 100,000 turns",
        "",
        f"`{command}`: medians of {reps} turns per row and round, {1 if quick else 2} round(s) pooled (fewer turns "
        "for the file store and the old tree at 100,000, where each turn reads the whole history); each row is a "
        "worker process importing one tree; the trees alternate row by row in one run. A turn loads the "
        "conversation, adds one exchange and saves it (SQLite: synchronous=FULL, so a save waits for fsync).",
        "",
        *table(rows),
        "",
        *verdict(rows),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--old", type=Path, help="a checkout of the tree before (01ff7f5), for the before rows")
    args = parser.parse_args()
    print("\n".join(section(args.quick, args.old)))


if __name__ == "__main__":
    main()
