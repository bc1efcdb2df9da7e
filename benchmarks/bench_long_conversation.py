"""Prompt size per turn over a long conversation, with running summaries off and on, and what summaries cost.

    python benchmarks/bench_long_conversation.py [--turns 1000] [--json FILE]

One conversation of ``--turns`` turns on ``order_flow.json`` (the largest example that runs alone),
staying in its initial state, with user
messages and replies of 200 characters each (a constant length, so that any growth shows: random
lengths make the window's sum wander by hundreds of characters). Variants, in the same run:

- ``off``: the definition as it is (the history window alone bounds the prompt);
- ``summaries``: ``"summaries": {}`` (on overflow, batch 4, max_chars 1500), and with batch 1 and 8
  (the trade: a smaller batch makes more summary calls and shorter prompts);
- ``summaries + memory``: the same, plus three working-memory slots of 400 characters that the model
  rewrites every turn (the worst case: every slot full).

The summarizer is scripted and always answers with a full summary (``max_chars`` characters once the
conversation is long enough): the prompt's worst case. For each variant: the characters of the reply
call's messages per turn (median, p99, max, and the slope of a least-squares line over turns 100 to the
end, in characters per turn: 0 means flat), the summary calls per turn (the extra calls), and the
largest summary call (its input, in characters: bounded by the previous summary and ``max_exchanges``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llm_fsm  # noqa: E402
from benchmarks.bench_turn import characters, percentile  # noqa: E402
from llm_fsm.llm import LLMRequest, LLMResponse, Usage  # noqa: E402

# order_flow: the largest example that runs alone (insurance_claim is larger, but talks through a sub-definition
# and has summaries and memory of its own)
EXAMPLE = ROOT / "fsm_definitions" / "order_flow.json"
MEMORY = {"slots": {name: {"description": f"Notes about {name}", "max_chars": 400} for name in ("who", "what", "todo")}}


class Script:
    """Replies that stay in ``state`` (rewriting every memory slot when asked), and full-size summaries."""

    def __init__(self, state: str, slots: list[str], summary_chars: int) -> None:
        self.state = state
        self.slots = slots
        self.summary_chars = summary_chars
        self.replies: list[list[dict[str, Any]]] = []  # the messages of each reply call
        self.summaries: list[int] = []  # the input characters of each summary call

    def complete(self, request: LLMRequest) -> LLMResponse:
        if request.kind == "summary":
            self.summaries.append(characters(request.messages))
            return LLMResponse(json.dumps({"summary": "s" * self.summary_chars}), Usage(1, 1, 2))
        self.replies.append(request.messages)
        transition: dict[str, Any] = {"target_state": self.state, "context_update": {}}
        if self.slots:
            transition["memory_update"] = {slot: "m" * 400 for slot in self.slots}
        message = "r" * 200
        return LLMResponse(json.dumps({"transition": transition, "message": message}), Usage(1, 1, 2))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def slope(values: list[int]) -> float:
    """Characters per turn of the least-squares line through ``values``."""
    xs = range(len(values))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(values)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values, strict=True)) / spread


def run(turns: int, *, summaries: dict[str, Any] | None, memory: bool) -> dict[str, float]:
    data = json.loads(EXAMPLE.read_text())
    if summaries is not None:
        data["summaries"] = summaries
    if memory:
        data["memory"] = MEMORY
    definition = llm_fsm.load(data)
    slots = list(MEMORY["slots"]) if memory else []
    llm = Script(definition.initial_state, slots, definition.summaries.max_chars if definition.summaries else 0)
    conversation = llm_fsm.Conversation(definition, llm)
    conversation.start()
    opened = len(llm.replies)  # the opening's call, if the model writes it (order_flow writes its own)
    for _ in range(turns):
        conversation.send("u" * 200)
    sizes = [characters(messages) for messages in llm.replies[opened:]]
    return {
        "turns": turns,
        "median": statistics.median(sizes),
        "p99": percentile(sizes, 0.99),
        "max": max(sizes),
        "slope": slope(sizes[100:]),
        "extra_calls_per_turn": len(llm.summaries) / turns,
        "largest_summary_input": max(llm.summaries, default=0),
    }


def measure(turns: int) -> dict[str, dict[str, float]]:
    return {
        "off": run(turns, summaries=None, memory=False),
        "summaries (batch 4)": run(turns, summaries={}, memory=False),
        "summaries, batch 1": run(turns, summaries={"batch": 1}, memory=False),
        "summaries, batch 8": run(turns, summaries={"batch": 8}, memory=False),
        "summaries (batch 4) + memory": run(turns, summaries={}, memory=True),
    }


def table(figures: dict[str, dict[str, float]]) -> str:
    rows = [
        "| variant | turns | median chars | p99 | max | slope (chars/turn, turns 100+) | extra calls/turn "
        "| largest summary call input |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        rows.append(
            f"| {name} | {f['turns']} | {f['median']:.0f} | {f['p99']:.0f} | {f['max']:.0f} | {f['slope']:+.3f} "
            f"| {f['extra_calls_per_turn']:.3f} | {f['largest_summary_input']:.0f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    figures = measure(args.turns)
    print(f"On `{EXAMPLE.name}`, the default history window (6):\n")
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
