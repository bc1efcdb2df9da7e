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

# Runs in the worker, against whichever tree is first on sys.path; uses only what both trees have. It keeps one
# conversation per size in one store and takes its turns round-robin across the sizes, so that a slow moment of
# the shared disk (a save waits for fsync) falls on every size alike.
WORKER = """
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from llm_fsm.snapshot import Exchange, Snapshot
from llm_fsm.store import open_store

url, sizes, reps = sys.argv[2], [int(n) for n in sys.argv[3].split(",")], [int(r) for r in sys.argv[4].split(",")]
def exchange(i):
    return Exchange(user=f"user message number {i} " + "x" * 100, assistant=f"reply {i} " + "y" * 200, state="chat")
store = open_store(url)
for turns in sizes:
    history = tuple(exchange(i) for i in range(turns))
    store.save(f"bench{turns}", Snapshot(definition_name="bench", definition_hash="0" * 64, state="chat",
                                         history=history, turns=turns))
    del history
samples = {n: {"load": [], "save": [], "size": []} for n in sizes}
for i in range(max(reps)):
    for turns, count in zip(sizes, reps):
        if i >= count:
            continue
        start = time.perf_counter()
        record = store.load(f"bench{turns}")
        middle = time.perf_counter()
        snapshot = record.snapshot
        n = getattr(snapshot, "history_len", len(snapshot.history))
        grown = snapshot.model_copy(update={"history": (*snapshot.history, exchange(n)), "turns": n + 1})
        before_save = time.perf_counter()
        store.save(f"bench{turns}", grown, expected_version=record.version)
        end = time.perf_counter()
        samples[turns]["load"].append(middle - start)
        samples[turns]["save"].append(end - before_save)
        samples[turns]["size"].append(len(snapshot.model_dump_json()))
store.close()
print(json.dumps({n: {**s, "size": statistics.median(s["size"])} for n, s in samples.items()}))
"""


def run(tree: Path, url: str, sizes: list[int], reps: list[int]) -> dict[int, dict[str, list[float] | float]]:
    """One worker's samples (seconds) per size, and the loaded snapshot's size (bytes)."""
    argv = [sys.executable, "-c", WORKER, str(tree), url, ",".join(map(str, sizes)), ",".join(map(str, reps))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise RuntimeError(f"the worker failed ({tree}, {url}): {done.stderr.strip()[-800:]}")
    return {int(n): samples for n, samples in json.loads(done.stdout).items()}


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
    """Every (store, turns, tree): per round and store, one worker per tree (their order alternating from round
    to round), each taking turns round-robin across the sizes; the rounds' samples are pooled."""
    pooled: dict[tuple[str, int, str], dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(rounds):
            for kind, base in bases.items():
                order = list(trees.items())
                for label, tree in order if round_ % 2 == 0 else order[::-1]:
                    # the file store reads and writes its whole file (by design): measured up to 1,000
                    sizes = [n for n in TURNS if not (kind == "file" and n > 1_000)]
                    sizes = [n for n in sizes if label == "after" or n <= old_turns]
                    # fewer turns where each reads the whole history (the file store, the old tree at 100,000)
                    counts = [max(3, reps // 6) if kind == "file" or n >= 100_000 and label == "before" else reps
                              for n in sizes]  # fmt: skip
                    for turns, samples in run(tree, fresh(kind, base, folder), sizes, counts).items():
                        row = pooled.setdefault((kind, turns, label), {"load": [], "save": [], "size": 0.0})
                        row["load"] += samples["load"]  # type: ignore[operator]  # lists of seconds
                        row["save"] += samples["save"]  # type: ignore[operator]
                        row["size"] = samples["size"]
    ordered = sorted(pooled.items(), key=lambda item: (list(bases).index(item[0][0]), item[0][1], item[0][2]))
    return [{"store": k, "turns": t, "tree": label, **row} for (k, t, label), row in ordered]


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
    reps = 10 if quick else 40
    trees = {"after": ROOT, **({"before": old} if old else {})}
    bases, stop = servers()
    try:
        rows = measure(trees, bases, reps, old_turns=10_000 if quick else 100_000, rounds=1 if quick else 2)
    finally:
        stop_all(stop)
    command = f"python benchmarks/bench_history.py{' --quick' if quick else ''}{f' --old {old}' if old else ''}"
    return [
        "## 17. History out of the snapshot (issue 26 §3): a stored turn at 10 / 1,000 / 100,000 turns",
        "",
        f"`{command}`: medians of {reps} turns per row and round, {1 if quick else 2} round(s) pooled (fewer "
        "turns for the file store and the old tree at 100,000, where each turn reads the whole history). A turn "
        "loads the conversation, adds one exchange and saves it (SQLite: synchronous=FULL, so a save waits for "
        "fsync). Per round and store, one worker process per tree (before: 01ff7f5, after: this tree), their "
        "order alternating from round to round, each keeping a conversation of every size and taking turns "
        "round-robin across the sizes, so that the shared disk's slow moments fall on every size alike.",
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
