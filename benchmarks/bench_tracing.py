"""What OpenTelemetry tracing costs per turn: off, on with a no-op provider, on with the SDK.

    python benchmarks/bench_tracing.py [--rounds 200]

The model is scripted (pre-serialised replies), so a turn's time is the runtime's own. Two
workloads: the largest example's scripted conversation (a turn span and one model-call span per
turn, sometimes a correction), and a turn that calls a tool and runs a handler (five spans: the
turn, two model calls, the tool, the handler). Modes, interleaved round by round in one process so
that the machine's noise falls on all of them alike:

- ``off``: OpenTelemetry not in use (the library sees no ``opentelemetry.trace`` module: it is taken
  out of ``sys.modules`` for the round, as in a process that never imported it);
- ``no provider``: OpenTelemetry imported, no tracer provider set (the API's default proxy);
- ``no-op provider``: ``NoOpTracerProvider`` given to ``llm_fsm.telemetry.set_tracer_provider``;
- ``SDK``: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` and an ``InMemorySpanExporter``
  (spans are built, ended and exported on every turn);
- ``SDK + content``: the same with ``LLM_FSM_TRACE_CONTENT=1`` (messages and values recorded, secrets masked).

Figures: the median and p95 time per turn, and the median's ratio to ``off`` in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import llm_fsm
from llm_fsm import Hooks, telemetry
from llm_fsm.llm import LLMRequest, LLMResponse, ToolCallRequest, Usage

EXPORTER = InMemorySpanExporter()
SDK = TracerProvider()
SDK.add_span_processor(SimpleSpanProcessor(EXPORTER))
TOOLS = {
    "name": "orders",
    "initial_state": "help",
    "tools": {"lookup_order": {"description": "Find an order by its id", "result_key": "order"}},
    "states": {
        "help": {
            "purpose": "Answer questions about the user's orders",
            "tools": ["lookup_order"],
            "transitions": [{"target_state": "done", "description": "The user is done"}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}
STAY = json.dumps({"transition": {"target_state": "help", "context_update": {}}, "message": "Here you go."})


class Script:
    """Serves pre-serialised replies in a loop (a tool call first, when ``tool`` is set)."""

    def __init__(self, replies: list[str], tool: bool = False) -> None:
        self.replies, self.tool, self.index = replies, tool, 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.tool and request.messages[-1]["role"] == "user":  # the turn's first call: ask for the tool
            call = ToolCallRequest("call_1", "lookup_order", '{"order_id": "A-17"}')
            return LLMResponse("", Usage(1, 1, 2), "scripted", "tool_calls", (call,))
        text, self.index = self.replies[self.index % len(self.replies)], self.index + 1
        return LLMResponse(text, Usage(1, 1, 2), "scripted", "stop")

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)

    def tool_mode(self) -> str:
        return "native"


def example() -> Callable[[], list[float]]:
    path = max((ROOT / "fsm_definitions").glob("*.json"), key=lambda p: len(llm_fsm.load(p).states))
    definition = llm_fsm.load(path)
    replies = [
        json.dumps(r) for r in json.loads((path.parent / "scripts" / f"{path.stem}.json").read_text())["replies"]
    ]
    lines = [x for x in (path.parent / "scripts" / f"{path.stem}.txt").read_text().splitlines() if x.strip()]

    def conversation() -> list[float]:
        chat = llm_fsm.Conversation(definition, Script(replies))
        return [timed(lambda text=text: chat.start() if text is None else chat.send(text)) for text in [None, *lines]]

    return conversation


def with_tool() -> Callable[[], list[float]]:
    definition = llm_fsm.load(TOOLS)
    hooks = Hooks()

    @hooks.tool()
    def lookup_order(order_id: str) -> dict[str, Any]:
        return {"id": order_id, "status": "shipped"}

    @hooks.on("before_llm_call")
    def noted(**_: Any) -> None:
        return None

    def conversation() -> list[float]:
        chat = llm_fsm.Conversation(definition, Script([STAY], tool=True), hooks=hooks)
        chat.update_context({"customer": "Ann"})
        return [timed(lambda: chat.send("Where is my order A-17?")) for _ in range(10)]

    return conversation


def timed(turn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    turn()
    return time.perf_counter() - start


@contextmanager
def mode(name: str) -> Iterator[None]:
    hidden = None
    if name == "off":
        hidden = sys.modules.pop("opentelemetry.trace")
        telemetry.set_tracer_provider(None)
    elif name == "no provider":
        telemetry.set_tracer_provider(None)
    elif name == "no-op provider":
        telemetry.set_tracer_provider(trace.NoOpTracerProvider())
    else:
        telemetry.set_tracer_provider(SDK)
        if name == "SDK + content":
            os.environ[telemetry.CONTENT_VARIABLE] = "1"
    try:
        yield
    finally:
        if hidden is not None:
            sys.modules["opentelemetry.trace"] = hidden
        os.environ.pop(telemetry.CONTENT_VARIABLE, None)
        telemetry.set_tracer_provider(None)
        EXPORTER.clear()


MODES = ["off", "no provider", "no-op provider", "SDK", "SDK + content"]


def measure(workload: Callable[[], list[float]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in MODES}
    for name in MODES:  # warm up: imports, templates, the tool pool
        with mode(name):
            workload()
    spans: dict[str, float] = {}
    for _ in range(rounds):
        for name in random.sample(MODES, len(MODES)):
            with mode(name):
                per_turn = workload()
                times[name] += per_turn
                spans[name] = len(EXPORTER.get_finished_spans()) / len(per_turn)
    times["spans per turn"] = [spans["SDK"]]
    return times


def table(title: str, times: dict[str, list[float]]) -> str:
    off = statistics.median(times["off"])
    rows = [f"### {title} ({times['spans per turn'][0]:.1f} spans per traced turn)", ""]
    rows += ["| mode | median per turn | p95 | median / off |", "|---|---|---|---|"]
    for name in MODES:
        values = sorted(times[name])
        median, p95 = statistics.median(values), values[int(0.95 * (len(values) - 1))]
        rows.append(f"| {name} | {median * 1e6:.0f} µs | {p95 * 1e6:.0f} µs | {median / off:.2f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(table("the largest example's scripted conversation", measure(example(), args.rounds)))
    print()
    print(table("a turn with a tool call and a handler", measure(with_tool(), max(1, args.rounds // 2))))


if __name__ == "__main__":
    main()
