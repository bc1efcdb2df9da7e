"""``llm-fsm serve``'s OpenAI endpoint under N concurrent clients, against its native endpoint, in one run.

    python benchmarks/bench_openai_load.py [--clients 1 8 32] [--turns 4] [--rounds 3] [--old PATH]

One ``llm-fsm serve`` (one worker, SQLite store) of a one-state chat, its model a local server answering every
call after 100 ms (``slow_server.py``, reached through litellm as in production). Each of N clients holds a
conversation of ``--turns`` turns, all clients at once, over HTTP (httpx):

- native: ``POST /conversations`` once, then ``POST /conversations/{id}/messages`` per turn;
- openai: ``POST /v1/chat/completions`` with the whole message list each turn, as an unmodified OpenAI client
  sends it: the server finds the conversation from the list (a store read, then a mark written per turn);
- native (old): the native path on the tree before this change (``--old``, a ``git worktree`` of fdb6308),
  served by a second process: the native path is not slower for the OpenAI routes beside it.

Turns/s is the turns answered over the wall time of the round. Afterwards each client's conversation is read
back (``GET /conversations/{id}``): a lost turn is an answered message missing from it (for openai, also a turn
answered in another conversation than the client's first: a branch where none was asked for). The rounds
alternate the paths; the figures are medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    os.environ.pop(name, None)

import httpx

from benchmarks.bench_async import CHAT, start_server
from benchmarks.bench_serve_load import drive, ended, started, tally
from tests import postgres_server

MODEL_DELAY = 0.1
OLD = "fdb6308"  # the commit before the OpenAI endpoint


@contextmanager
def serving(tree: Path, definition: Path, model_url: str, store_url: str) -> Iterator[str]:
    """``llm-fsm serve`` of the code in ``tree`` on a free port, once it answers; stopped afterwards."""
    port = postgres_server.free_port()
    command = [
        sys.executable, "-c", "from llm_fsm.cli import app; app()", "serve", str(definition), "--model", "openai/bench",
        "--api-base", model_url, "--api-key", "k", "--response-format", "none", "--max-retries", "0",
        "--timeout", "120", "--store", store_url, "--port", str(port), "--wait", "60",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("LLM_FSM_SERVER_TOKENS", None)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield started(process, port, f"llm-fsm serve from {tree}")
    finally:
        ended(process)


Turn = Callable[[int, str], Awaitable[bool]]


async def native_round(http: httpx.AsyncClient, clients: int, turns: int) -> tuple[float, int, int]:
    ids: list[str] = ["" for _ in range(clients)]

    async def one_turn(number: int, text: str) -> bool:
        if not ids[number]:  # the first turn creates the conversation, with its opening (as the openai path's does)
            created = await http.post("/conversations", json={"start": True})
            if created.status_code != 201:
                return False
            ids[number] = created.json()["id"]
        response = await http.post(f"/conversations/{ids[number]}/messages", json={"message": text})
        return response.status_code == 200

    return await _round(http, clients, turns, one_turn, lambda number: ids[number])


async def openai_round(http: httpx.AsyncClient, clients: int, turns: int) -> tuple[float, int, int]:
    lists: list[list[dict[str, str]]] = [[] for _ in range(clients)]
    seen: list[set[str]] = [set() for _ in range(clients)]  # the conversations each client's turns landed in

    async def one_turn(number: int, text: str) -> bool:
        messages = [*lists[number], {"role": "user", "content": text}]
        response = await http.post("/v1/chat/completions", json={"model": "chat", "messages": messages})
        if response.status_code != 200:
            return False
        body = response.json()
        lists[number] = [*messages, {"role": "assistant", "content": body["choices"][0]["message"]["content"]}]
        seen[number].add(body["llm_fsm"]["conversation_id"])
        return True

    seconds, answered, lost = await _round(http, clients, turns, one_turn, lambda number: sorted(seen[number])[0])
    split = sum(len(ids) - 1 for ids in seen)  # turns that went to a branch: lost to the client's conversation
    return seconds, answered, lost + split


async def _round(
    http: httpx.AsyncClient, clients: int, turns: int, one_turn: Turn, conversation_of: Callable[[int], str]
) -> tuple[float, int, int]:
    """Seconds, turns answered and turns lost of one round of every client's conversation."""
    seconds, latencies, answered, errors = await drive(clients, turns, one_turn)
    shown = await asyncio.gather(*(http.get(f"/conversations/{conversation_of(n)}") for n in range(clients)))
    histories = [[e["user"] or "" for e in response.json()["history"]] for response in shown]
    lost, duplicated = tally(histories, answered)
    return seconds, len(latencies), lost + duplicated + errors


Rounds = dict[tuple[str, int], list[tuple[float, int, int]]]  # (path, clients): each round's figures


def measure(clients: list[int], turns: int, rounds: int, old: Path | None) -> Rounds:
    """Every path at every N, ``rounds`` times, the paths alternating within each round."""
    figures: Rounds = {}
    with ExitStack() as stack:
        model, model_url = start_server(MODEL_DELAY)
        stack.callback(ended, model)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        definition = folder / "chat.json"
        definition.write_text(json.dumps(CHAT), encoding="utf-8")
        new = stack.enter_context(serving(ROOT, definition, model_url, f"sqlite:{folder / 'new.db'}"))
        bases = {"native": new, "openai": new}
        if old is not None:
            bases["native (old)"] = stack.enter_context(
                serving(old, definition, model_url, f"sqlite:{folder / 'o.db'}")
            )
        runs: dict[str, Callable[..., Awaitable[tuple[float, int, int]]]] = {
            "native": native_round, "openai": openai_round, "native (old)": native_round,
        }  # fmt: skip
        for base in bases.values():
            asyncio.run(_warm_up(base))
        for _ in range(rounds):
            for n in clients:
                for path, base in bases.items():
                    figures.setdefault((path, n), []).append(asyncio.run(_one(runs[path], base, n, turns)))
    return figures


async def _one(run: Callable[..., Awaitable[tuple[float, int, int]]], base: str, n: int, turns: int) -> Any:
    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        return await run(http, n, turns)


async def _warm_up(base: str) -> None:
    """A few turns first: the server imports litellm on its first model call."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for _ in range(3):
            await native_round(http, 2, 1)
            await openai_round(http, 2, 1) if (await http.get("/v1/models")).status_code == 200 else None


def table(figures: Rounds, clients: list[int], turns: int) -> list[str]:
    rows = ["| clients N | path | turns/s | ratio | lost turns |", "|---|---|---|---|---|"]
    ratios: dict[str, Callable[[dict[str, float]], str]] = {
        "native": lambda speed: "1.00",
        "openai": lambda speed: f"openai / native {speed['openai'] / speed['native']:.2f}",
        "native (old)": lambda speed: f"native / old {speed['native'] / speed['native (old)']:.2f}",
    }
    for n in clients:
        speed = {path: statistics.median(turns_answered / seconds for seconds, turns_answered, _ in runs)
                 for (path, count), runs in figures.items() if count == n}  # fmt: skip
        for (path, count), runs in figures.items():
            if count != n:
                continue
            ratio = ratios[path](speed)
            lost = sum(lost for _, _, lost in runs)
            rows.append(f"| {n} | {path} | {speed[path]:.1f} | {ratio} | {lost} of {n * turns * len(runs)} |")
    return rows


def section(quick: bool) -> list[str]:
    """The RESULTS.md section (quick: N = 1 and 8, one round; else 1, 8, 32 and three rounds)."""
    clients, rounds, turns = ([1, 8], 1, 3) if quick else ([1, 8, 32], 3, 4)
    old = Path(os.environ["LLM_FSM_OLD_TREE"]) if os.environ.get("LLM_FSM_OLD_TREE") else None
    figures = measure(clients, turns, rounds, old)
    return [
        "## 19. OpenAI's chat completions on `serve` (issue 27 §1): turns/s and lost turns, N clients",
        "",
        f"One `llm-fsm serve` (one worker, SQLite), a model answering after {MODEL_DELAY * 1000:.0f} ms; N clients "
        f"at once, each a conversation of {turns} turns. openai: `POST /v1/chat/completions` with the whole list "
        "each turn (the conversation found from it: a mark read, a mark written per turn); native: "
        "`POST /conversations` (with the opening) on the first turn, then `POST /conversations/{id}/messages`; "
        "both make the same model calls. A lost turn: answered, and not in the client's conversation "
        f"(or in a branch). Medians of {rounds} round(s), the paths alternating.",
        "",
        *table(figures, clients, turns),
        "",
    ]


def too_long(signum: int, frame: object) -> None:
    raise TimeoutError("the benchmark ran past its --time-limit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", type=Path, help=f"a worktree of {OLD}: its native endpoint measured too")
    parser.add_argument("--time-limit", type=float, default=1200)
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(round(args.time_limit))
    load = os.getloadavg()[0]
    started = time.perf_counter()
    figures = measure(args.clients, args.turns, args.rounds, args.old)
    print(f"{os.cpu_count()} CPUs, load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"{time.perf_counter() - started:.0f} s; medians of {args.rounds} rounds")  # fmt: skip
    print("\n".join(table(figures, args.clients, args.turns)))
    if any(lost for runs in figures.values() for _, _, lost in runs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
