"""Tool calls: LLM calls and prompt size per turn with 0, 1 and 3 tool calls, and the runtime's
overhead per tool call (excluding the tool and the model).

    python benchmarks/bench_tools.py [--rounds 300]

A turn with tools makes one more model call per round of calls (the model reads the results, then
replies): calls per turn are counted, and the prompt of each call is measured in characters (the
tool specs included; tokens are roughly characters / 4). The overhead is the turn's time minus the
time inside the fake model and inside the tools (both no-ops that record their own time), for a
turn without tools (the baseline, same run) and with 1 and 3 calls in one round, and 3 calls in
three rounds; the figure per tool call is (turn - baseline) / calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llm_fsm  # noqa: E402
from llm_fsm import Hooks  # noqa: E402
from llm_fsm.llm import LLMRequest, LLMResponse, ToolCallRequest, Usage  # noqa: E402

DEFINITION = {
    "name": "orders",
    "description": "Answer questions about orders.",
    "initial_state": "help",
    "tools": {
        "lookup_order": {
            "description": "Find an order by its id",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
            "result_key": "order",
        }
    },
    "states": {
        "help": {
            "purpose": "Answer questions about the user's orders",
            "tools": ["lookup_order"],
            "transitions": [{"target_state": "done", "description": "The user is done"}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}
REPLY = json.dumps({"transition": {"target_state": "help", "context_update": {}}, "message": "Here you go."})
SHAPES = {"0 calls": [], "1 call": [1], "3 calls, one round": [3], "3 calls, three rounds": [1, 1, 1]}


class Timed:
    """Answers each turn with its rounds of tool calls, then the reply; records the time spent inside."""

    def __init__(self, rounds: list[int]) -> None:
        self.rounds = rounds
        self.step = 0
        self.inside = 0.0
        self.prompt_chars: list[int] = []

    def tool_mode(self) -> str:
        return "native"

    def complete(self, request: LLMRequest) -> LLMResponse:
        start = time.perf_counter()
        self.prompt_chars.append(_chars(request))
        plan = [*self.rounds, 0]
        count = plan[self.step % len(plan)]
        self.step += 1
        if count:
            calls = tuple(
                ToolCallRequest(f"c{self.step}_{n}", "lookup_order", '{"order_id": "A-1"}') for n in range(count)
            )
            response = LLMResponse("", Usage(1, 1, 2), finish_reason="tool_calls", tool_calls=calls)
        else:
            response = LLMResponse(REPLY, Usage(1, 1, 2))
        self.inside += time.perf_counter() - start
        return response

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def _chars(request: LLMRequest) -> int:
    text = sum(len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls", ""))) for m in request.messages)
    return text + (len(json.dumps(request.tools)) if request.tools else 0)


def measure(rounds: list[int], turns: int) -> dict[str, float]:
    spent = [0.0]
    hooks = Hooks()

    @hooks.tool()
    def lookup_order(order_id: str) -> dict[str, Any]:
        start = time.perf_counter()
        result = {"id": order_id, "status": "shipped"}
        spent[0] += time.perf_counter() - start
        return result

    definition = llm_fsm.load(DEFINITION)
    llm = Timed(rounds)
    conversation = llm_fsm.Conversation(definition, llm, hooks=hooks)
    llm.rounds, llm.step = [], 0
    conversation.start()
    llm.rounds, llm.step, llm.prompt_chars = rounds, 0, []
    times, calls = [], []
    for n in range(turns):
        inside, tools = llm.inside, spent[0]
        start = time.perf_counter()
        result = conversation.send(f"where is my order? ({n})")
        elapsed = time.perf_counter() - start - (llm.inside - inside) - (spent[0] - tools)
        times.append(elapsed)
        calls.append(result.llm_calls)
    per_turn_chars = sum(llm.prompt_chars) / turns
    return {
        "median_ms": statistics.median(times) * 1000,
        "calls": statistics.mean(calls),
        "prompt_chars": per_turn_chars,
        "tool_calls": sum(rounds),
    }


def section(turns: int) -> list[str]:
    figures = {name: measure(rounds, turns) for name, rounds in SHAPES.items()}
    base = figures["0 calls"]
    lines = [
        "## 11. Tool calls",
        "",
        f"A state with one tool, {turns} turns per shape, a no-op tool and a fake model (both timed and "
        "subtracted). Prompt characters are summed over the turn's model calls (tool specs included; "
        "tokens are roughly characters / 4). Overhead per call = (turn - turn without tools) / calls.",
        "",
        "| turn | LLM calls | prompt chars / turn | vs no tools | median overhead / turn | per tool call |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        per_call = (f["median_ms"] - base["median_ms"]) / f["tool_calls"] if f["tool_calls"] else 0.0
        lines.append(
            f"| {name} | {f['calls']:.0f} | {f['prompt_chars']:.0f} | {f['prompt_chars'] / base['prompt_chars']:.2f}x "
            f"| {f['median_ms']:.3f} ms | {'-' if not f['tool_calls'] else f'{per_call:.3f} ms'} |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="turns per shape")
    print("\n".join(section(parser.parse_args().rounds)))


if __name__ == "__main__":
    main()
