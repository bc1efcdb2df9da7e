"""Async throughput against bare litellm, and streaming latency.

    python benchmarks/bench_async.py [--sizes 100,500,1000]

Throughput: N conversations each make one turn at once (``asend``), against N bare
``litellm.acompletion`` calls with the same messages, both to a local server that answers after
100 ms (``slow_server.py``, in its own process). The ratio runtime / bare is the figure that matters.
Streaming: time to the first message character and to the end of a streamed turn.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    os.environ.pop(name, None)

import llm_fsm  # noqa: E402
from llm_fsm.streaming import MessageDelta  # noqa: E402
from llm_fsm.testing import ScriptedLLM  # noqa: E402

CHAT = {
    "name": "chat",
    "initial_state": "chat",
    "persona": "A friendly assistant.",
    "states": {
        "chat": {"purpose": "Chat about anything", "transitions": [{"target_state": "bye"}]},
        "bye": {"purpose": "Say goodbye"},
    },
}


def start_server(delay: float) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [sys.executable, str(ROOT / "benchmarks" / "slow_server.py"), "--port", str(port), "--delay", str(delay)]
    process = subprocess.Popen(args)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the benchmark server did not start")


def client(url: str, **options: object) -> llm_fsm.LiteLLMClient:
    return llm_fsm.LiteLLMClient("openai/bench", api_base=url, api_key="k", timeout=120, max_retries=0,
                                 response_format="none", **options)  # fmt: skip


async def runtime_round(url: str, n: int) -> float:
    definition = llm_fsm.load(CHAT)
    llm = client(url)
    conversations = [llm_fsm.Conversation(definition, llm) for _ in range(n)]
    start = time.perf_counter()
    results = await asyncio.gather(*(c.asend(f"hello from user {i}") for i, c in enumerate(conversations)))
    elapsed = time.perf_counter() - start
    assert all(r.llm_calls == 1 for r in results)
    return n / elapsed


async def bare_round(url: str, n: int, messages: list[dict[str, str]]) -> float:
    import litellm

    async def one(i: int) -> None:
        turn = [*messages[:-1], {"role": "user", "content": f"hello from user {i}"}]
        await litellm.acompletion(
            model="openai/bench", api_base=url, api_key="k", timeout=120, max_retries=0, messages=turn
        )

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - start)


def prompt_messages() -> list[dict[str, str]]:
    definition = llm_fsm.load(CHAT)
    conversation = llm_fsm.Conversation(definition, ScriptedLLM())
    return conversation.prompt.messages(definition, conversation.snapshot(), "hello")


async def throughput(url: str, sizes: list[int], rounds: int) -> list[tuple[int, float, float]]:
    messages = prompt_messages()
    await bare_round(url, 10, messages)  # warm up litellm's lazy imports and connection pools
    await runtime_round(url, 10)
    rows = []
    for n in sizes:
        runtime, bare = [], []
        for _ in range(rounds):  # interleaved, so both see the same machine
            bare.append(await bare_round(url, n, messages))
            runtime.append(await runtime_round(url, n))
        rows.append((n, statistics.median(runtime), statistics.median(bare)))
    return rows


async def streaming(url: str, runs: int) -> tuple[float, float]:
    definition = llm_fsm.load(CHAT)
    llm = client(url, stream=True)
    firsts, totals = [], []
    for i in range(runs):
        conversation = llm_fsm.Conversation(definition, llm)
        start = time.perf_counter()
        first = None
        async for event in conversation.astream(f"hi {i}"):
            if first is None and isinstance(event, MessageDelta):
                first = time.perf_counter() - start
        totals.append(time.perf_counter() - start)
        firsts.append(first if first is not None else float("nan"))
    return statistics.median(firsts) * 1000, statistics.median(totals) * 1000


def measure(sizes: list[int], rounds: int = 3, delay: float = 0.1) -> dict[str, object]:
    process, url = start_server(delay)
    try:
        rows = asyncio.run(throughput(url, sizes, rounds))
        first, total = asyncio.run(streaming(url, 10))
    finally:
        process.terminate()
        process.wait()
    return {"throughput": rows, "stream_first_ms": first, "stream_total_ms": total, "delay_ms": delay * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures = measure([int(s) for s in args.sizes.split(",")], args.rounds)
    print("N      runtime turns/s   bare calls/s   ratio")
    for n, runtime, bare in figures["throughput"]:  # type: ignore[union-attr]
        print(f"{n:<6} {runtime:>15.1f} {bare:>14.1f} {runtime / bare:>7.2f}")
    print(f"streaming (server waits {figures['delay_ms']:.0f} ms): first message character "
          f"{figures['stream_first_ms']:.1f} ms, end of turn {figures['stream_total_ms']:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
