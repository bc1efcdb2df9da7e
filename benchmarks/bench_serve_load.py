"""Scale-out: ``llm-fsm serve --workers N`` on Redis and on PostgreSQL under many clients, against the library.

    python benchmarks/bench_serve_load.py [--workers 2] [--clients 32] [--turns 4] [--rounds 3] [--json out.json]

Each of ``--clients`` clients runs a conversation of ``--turns`` turns, all clients at once, against a
model that answers every call after 100 ms (``slow_server.py``, in its own process, reached through
litellm as in production). Two paths, each on each store:

- library: ``aadvance`` in this process, one event loop, the same model settings: the baseline;
- serve: ``llm-fsm serve --workers N`` (uvicorn processes on one port), the clients over HTTP (httpx).

The stores are a redis-server (no persistence) and a PostgreSQL server from the Debian package's
binaries with its default durability (fsync on), both started by this script on free ports; each run
gets a key prefix or schema of its own. Turns/s is the turns answered over the wall time of the run;
latency is each turn's, as its client saw it. Afterwards every conversation's history is read back:
a lost turn is an answered message missing from it, a duplicated turn a message found in it twice.
Each store gets one ``serve`` (its workers warmed up first: litellm is imported on each one's first
model call), then ``--rounds`` rounds of each path, interleaved; figures are medians over them. CPU
ms/turn is the CPU time of the processes running the turns (this one for the library, the serve
workers and their supervisor for serve) over the turns: on a shared machine, where turns/s follows
whatever CPU the other tenants leave, it is the steadier figure; the load average is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    os.environ.pop(name, None)

import httpx

import llm_fsm
from benchmarks.bench_async import CHAT, client, start_server
from benchmarks.bench_store import start_redis
from llm_fsm.store import aadvance, open_store
from tests import postgres_server

MODEL_DELAY = 0.1  # seconds the model takes to answer


@dataclass
class Run:
    path: str
    store: str
    workers: int
    rounds: int
    turns: int
    seconds: float
    turns_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    lost: int
    duplicated: int
    cpu_ms_per_turn: float  # CPU time of the process(es) running turns (this one, or the workers), per turn


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else float("nan")


def message(client_number: int, turn: int) -> str:
    return f"client {client_number} turn {turn}"


def tally(histories: list[list[str]], answered: list[set[str]]) -> tuple[int, int]:
    """Lost turns (answered, not in the history) and duplicated ones (in it more than once), over all conversations."""
    lost = sum(len(mine - set(history)) for history, mine in zip(histories, answered, strict=True))
    duplicated = sum(len(history) - len(set(history)) for history in histories)
    return lost, duplicated


async def drive(
    clients: int, turns: int, one_turn: Callable[[int, str], Awaitable[bool]]
) -> tuple[float, list[float], list[set[str]], int]:
    """Every client's conversation at once, each turn after the last: seconds, latencies, answered messages, errors."""
    latencies: list[float] = []
    answered: list[set[str]] = [set() for _ in range(clients)]
    errors = 0

    async def conversation(number: int) -> None:
        nonlocal errors
        for turn in range(turns):
            text = message(number, turn)
            start = time.perf_counter()
            if await one_turn(number, text):
                latencies.append(time.perf_counter() - start)
                answered[number].add(text)
            else:
                errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(conversation(n) for n in range(clients)))
    return time.perf_counter() - start, latencies, answered, errors


Outcome = tuple[float, list[float], list[set[str]], int]


def summary(
    path: str, store: str, workers: int, outcome: Outcome, histories: list[list[str]], cpu_seconds: float
) -> Run:
    seconds, latencies, answered, errors = outcome
    lost, duplicated = tally(histories, answered)
    turns = len(latencies)
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    cpu = cpu_seconds * 1000 / max(turns, 1)
    return Run(path, store, workers, 1, turns, seconds, turns / seconds, p50, p99, errors, lost, duplicated, cpu)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# -- the library in this process ----------------------------------------------------------------------


async def library_run(store_url: str, store_name: str, model_url: str, clients: int, turns: int) -> Run:
    store, definition, llm = open_store(store_url), llm_fsm.load(CHAT), client(model_url)
    ids = [f"lib-{uuid.uuid4().hex[:8]}-{n}" for n in range(clients)]

    async def one_turn(number: int, text: str) -> bool:
        try:
            await aadvance(store, ids[number], definition, llm, text, wait=60)
        except llm_fsm.FSMError as exc:
            print(f"  library turn failed: {exc}", file=sys.stderr)
            return False
        return True

    await aadvance(store, "warm-up", definition, llm, "hello", wait=60)  # litellm's lazy imports
    cpu = time.process_time()
    outcome = await drive(clients, turns, one_turn)
    cpu = time.process_time() - cpu
    histories = []
    for cid in ids:
        record = await store.aload(cid)
        histories.append([e.user or "" for e in record.snapshot.history] if record else [])
    if hasattr(store, "aclose"):
        await store.aclose()
    store.close()
    return summary("library", store_name, 1, outcome, histories, cpu)


# -- llm-fsm serve --workers N ------------------------------------------------------------------------


@contextmanager
def serving(
    definition: Path, model_url: str, store_url: str, workers: int
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``llm-fsm serve --workers N`` on a free port, once it answers; stopped (its workers too) afterwards."""
    port = postgres_server.free_port()
    command = [
        str(Path(sys.executable).parent / "llm-fsm"), "serve", str(definition), "--model", "openai/bench",
        "--api-base", model_url, "--api-key", "k", "--response-format", "none", "--max-retries", "0",
        "--timeout", "120", "--store", store_url, "--port", str(port), "--workers", str(workers), "--wait", "60",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = started(process, port, f"llm-fsm serve --workers {workers} --store {store_url}")
        yield process, base
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # the supervisor and its workers
            process.wait(timeout=30)


def started(process: subprocess.Popen[bytes], port: int, what: str) -> str:
    """The base URL of the server ``process`` starts on ``port``, once it answers (two minutes at most)."""
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not answers(base):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)
    return base


def answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health").status_code == 200
    except httpx.TransportError:
        return False


async def serve_run(base: str, pids: list[int], store_name: str, workers: int, clients: int, turns: int) -> Run:
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        created = await asyncio.gather(*(http.post("/conversations", json={"start": False}) for _ in range(clients)))
        ids = [response.json()["id"] for response in created]

        async def one_turn(number: int, text: str) -> bool:
            try:
                response = await http.post(f"/conversations/{ids[number]}/messages", json={"message": text})
            except httpx.HTTPError as exc:
                print(f"  request failed: {exc!r}", file=sys.stderr)
                return False
            if response.status_code != 200:
                print(f"  turn answered {response.status_code}: {response.text[:200]}", file=sys.stderr)
            return response.status_code == 200

        cpu = cpu_seconds(pids)
        outcome = await drive(clients, turns, one_turn)
        cpu = cpu_seconds(pids) - cpu
        shown = await asyncio.gather(*(http.get(f"/conversations/{cid}") for cid in ids))
    histories = [[e["user"] or "" for e in response.json()["history"]] for response in shown]
    return summary("serve", store_name, workers, outcome, histories, cpu)


async def warm_up(base: str, workers: int) -> None:
    """Turns on every worker until none is slow (each imports litellm on its first model call)."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for _ in range(10):
            start = time.perf_counter()
            ids = [(await http.post("/conversations", json={"start": False})).json()["id"] for _ in range(4 * workers)]
            await asyncio.gather(*(http.post(f"/conversations/{c}/messages", json={"message": "hi"}) for c in ids))
            if time.perf_counter() - start < 1.0:
                return


# -- the whole run --------------------------------------------------------------------------------------


def measure(workers: int, clients: int, turns: int, rounds: int) -> list[Run]:
    runs: list[Run] = []
    with ExitStack() as servers:  # each server is stopped, whatever happens after it started
        redis_process, redis_url = start_redis()
        if redis_process is None or redis_url is None:
            raise SystemExit("redis-server is not installed (.ci/run installs it)")
        servers.callback(ended, redis_process)
        postgres = postgres_server.start(durable=True)
        servers.callback(postgres.stop)
        model, model_url = start_server(MODEL_DELAY)
        servers.callback(ended, model)
        folder = Path(servers.enter_context(tempfile.TemporaryDirectory()))
        definition = folder / "chat.json"
        definition.write_text(json.dumps(CHAT), encoding="utf-8")
        stores = {
            "redis": lambda: f"{redis_url}?prefix=bench-{uuid.uuid4().hex[:8]}",
            "postgres": lambda: f"{postgres.url}?schema=bench_{uuid.uuid4().hex[:8]}",
        }
        for name, fresh in stores.items():
            library, serve = [], []
            with serving(definition, model_url, fresh(), workers) as (process, base):
                pids = [process.pid, *children(process.pid)]
                asyncio.run(warm_up(base, workers))
                for _ in range(rounds):  # interleaved, so that both paths see the same machine
                    library.append(asyncio.run(library_run(fresh(), name, model_url, clients, turns)))
                    serve.append(asyncio.run(serve_run(base, pids, name, workers, clients, turns)))
            runs += [median(library), median(serve)]
            print(row(runs[-2]), row(runs[-1]), sep="\n", flush=True)
    return runs


def median(runs: list[Run]) -> Run:
    """The median of each figure over the rounds; turns, errors, lost and duplicated turns added up."""
    first = runs[0]
    middle = {f: statistics.median(getattr(r, f) for r in runs) for f in ("seconds", "turns_per_s", "p50_ms", "p99_ms",
                                                                          "cpu_ms_per_turn")}  # fmt: skip
    total = {f: sum(getattr(r, f) for r in runs) for f in ("turns", "errors", "lost", "duplicated")}
    return Run(first.path, first.store, first.workers, rounds=len(runs), **middle, **total)


def ended(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=30)


HEADER = f"{'path':<8} {'store':<9} {'workers':>7} {'turns':>6} {'turns/s':>8} {'p50 ms':>7} {'p99 ms':>7} " \
         f"{'CPU ms/turn':>11} {'errors':>6} {'lost':>5} {'dup':>4}"  # fmt: skip


def row(run: Run) -> str:
    return (f"{run.path:<8} {run.store:<9} {run.workers:>7} {run.turns:>6} {run.turns_per_s:>8.1f} "
            f"{run.p50_ms:>7.0f} {run.p99_ms:>7.0f} {run.cpu_ms_per_turn:>11.1f} {run.errors:>6} {run.lost:>5} "
            f"{run.duplicated:>4}")  # fmt: skip


def too_long(signum: int, frame: object) -> None:
    faulthandler.dump_traceback()
    raise TimeoutError("the benchmark ran past its --time-limit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4, help="turns per client's conversation")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each path (figures: medians)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--time-limit", type=float, default=600, help="seconds, then print every stack and stop")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, too_long)  # a hang shows where it is, then the servers are stopped
    signal.alarm(round(args.time_limit))
    load = os.getloadavg()[0]
    print(f"{args.clients} clients x {args.turns} turns, model latency {MODEL_DELAY * 1000:.0f} ms, "
          f"{os.cpu_count()} CPUs, load average {load:.1f}")  # fmt: skip
    print(HEADER)
    started = time.perf_counter()
    runs = measure(args.workers, args.clients, args.turns, args.rounds)
    elapsed, load_after = time.perf_counter() - started, os.getloadavg()[0]
    print(f"medians of {args.rounds} rounds; {elapsed:.0f} s in all; load average now {load_after:.1f}")
    for store in ("redis", "postgres"):
        library, serve = (next(r for r in runs if r.store == store and r.path == p) for p in ("library", "serve"))
        print(f"{store}: serve x{serve.workers} / library = {serve.turns_per_s / library.turns_per_s:.2f} (turns/s)")
    bad = sum(r.lost + r.duplicated for r in runs)
    print("no turn lost or duplicated" if not bad else f"{bad} turns lost or duplicated")
    if args.json:
        figures = {
            "clients": args.clients, "turns_per_client": args.turns, "model_delay_ms": MODEL_DELAY * 1000,
            "cpus": os.cpu_count(), "load_average_before": load, "load_average_after": load_after,
            "runs": [asdict(r) for r in runs],
        }  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
