"""Runtime overhead per turn, prompt size over a long conversation, and LLM calls per turn.

    python benchmarks/bench_turn.py [--rounds 300]

Overhead is everything a turn does except the model call: the fake model below answers with
pre-serialised text, and the time spent inside it is measured and subtracted. The baseline,
measured in the same run, is one `litellm.completion(mock_response=...)` call: the cheapest call
litellm can make, with no network.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llm_fsm  # noqa: E402
from llm_fsm.llm import LLMRequest, LLMResponse, Usage  # noqa: E402
from llm_fsm.turn.prompt import PromptBuilder, PromptSettings  # noqa: E402


class TimedScript:
    """Serves pre-serialised replies in a loop and records the time spent inside the 'model'."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.index = 0
        self.inside = 0.0
        self.calls = 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        start = time.perf_counter()
        text = self.replies[self.index % len(self.replies)]
        self.index += 1
        self.calls += 1
        response = LLMResponse(text, Usage(1, 1, 2))
        self.inside += time.perf_counter() - start
        return response

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def largest_example() -> Path:
    """The example with the most states among those that run alone (no sub-definition): order_flow, so that
    figures stay comparable with earlier runs now that insurance_claim (larger, with a subflow) exists."""
    loaded = {path: llm_fsm.load(path) for path in (ROOT / "fsm_definitions").glob("*.json")}
    alone = [path for path, definition in loaded.items() if not definition.subflow_definitions]
    return max(alone, key=lambda path: len(loaded[path].states))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overhead(path: Path, rounds: int) -> dict[str, float]:
    definition = llm_fsm.load(path)
    script = json.loads((path.parent / "scripts" / f"{path.stem}.json").read_text())
    lines = [x for x in (path.parent / "scripts" / f"{path.stem}.txt").read_text().splitlines() if x.strip()]
    replies = [json.dumps(r) for r in script["replies"]]
    per_turn: list[float] = []
    calls = turns = 0
    for _ in range(rounds):
        llm = TimedScript(replies)
        conversation = llm_fsm.Conversation(definition, llm)
        for text in [None, *lines]:
            before_inside = llm.inside
            start = time.perf_counter()
            result = conversation.start() if text is None else conversation.send(text)
            elapsed = time.perf_counter() - start - (llm.inside - before_inside)
            if result.llm_calls == 1:  # turns with a corrective call do two renders by design
                per_turn.append(elapsed)
            calls += result.llm_calls
            turns += 1
    return {
        "median_ms": statistics.median(per_turn) * 1000,
        "p95_ms": percentile(per_turn, 0.95) * 1000,
        "turns": len(per_turn),
        "calls_per_turn_scripted": calls / turns,
    }


class RecordingScript(TimedScript):
    """A TimedScript that keeps the messages of every request."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.requests: list[list[dict[str, str]]] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request.messages)
        return super().complete(request)


def prompt_growth(path: Path, turns: int = 100) -> list[list[dict[str, str]]]:
    """The messages of each turn's model call over a ``turns``-turn conversation that stays put."""
    definition = llm_fsm.load(path)
    first = definition.initial_state
    stay = json.dumps({"transition": {"target_state": first, "context_update": {}}, "message": "Tell me more. " * 5})
    llm = RecordingScript([stay])
    conversation = llm_fsm.Conversation(definition, llm, prompt=PromptBuilder(settings=PromptSettings()))
    conversation.start()
    opened = len(llm.requests)  # the opening's call, if the model writes it (the examples write their own)
    for i in range(turns):
        conversation.send(f"user message {i} " * 3)
    return llm.requests[opened:]


def characters(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages)


def calls_per_turn(path: Path, invalid_share: float, turns: int = 100) -> float:
    """Model calls per turn when a share of the replies is invalid (each followed by a valid correction)."""
    definition = llm_fsm.load(path)
    first = definition.initial_state
    stay = json.dumps({"transition": {"target_state": first, "context_update": {}}, "message": "ok"})
    every = round(1 / invalid_share) if invalid_share else 0
    replies = [stay]
    for i in range(turns):
        if every and i % every == 0:
            replies.append("this is not JSON")  # invalid: the corrective call gets the valid reply next
        replies.append(stay)
    llm = TimedScript(replies)
    conversation = llm_fsm.Conversation(definition, llm)
    conversation.start()
    opened = llm.calls  # the opening's call, if the model writes it
    for i in range(turns):
        conversation.send(f"turn {i}")
    return (llm.calls - opened) / turns


def litellm_baseline(rounds: int = 200) -> float:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    messages = [{"role": "user", "content": "hi"}]
    litellm.completion(model="gpt-4o-mini", messages=messages, mock_response="warm up")
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        litellm.completion(model="gpt-4o-mini", messages=messages, mock_response="ok")
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--no-litellm", action="store_true", help="skip the litellm baseline")
    args = parser.parse_args()
    path = largest_example()
    result = overhead(path, args.rounds)
    sizes = [characters(m) for m in prompt_growth(path)]
    print(f"example: {path.name} ({len(llm_fsm.load(path).states)} states)")
    print(
        f"runtime overhead per turn: median {result['median_ms']:.3f} ms, p95 {result['p95_ms']:.3f} ms "
        f"over {result['turns']} single-call turns"
    )
    valid, some_invalid = calls_per_turn(path, 0), calls_per_turn(path, 0.2)
    print(f"LLM calls per turn, valid replies: {valid:.2f}; 20% invalid: {some_invalid:.2f}")
    print(
        f"LLM calls per turn, the example's script (includes deliberate rejections): "
        f"{result['calls_per_turn_scripted']:.2f}"
    )
    marks = [1, 5, 10, 25, 50, 100]
    print("prompt characters at turn " + ", ".join(f"{m}: {sizes[m - 1]}" for m in marks))
    window = PromptSettings().history_window
    after = sizes[window + 1 :]
    print(
        f"after the history window ({window} exchanges): min {min(after)}, max {max(after)} "
        f"(spread {max(after) - min(after)} characters)"
    )
    if not args.no_litellm:
        base = litellm_baseline()
        print(
            f"baseline litellm.completion(mock_response) median {base:.3f} ms; "
            f"runtime overhead / baseline = {result['median_ms'] / base:.3f}"
        )


if __name__ == "__main__":
    main()
