"""Model calls of a workflow run (issue 48): 5 steps, 3 tool calls, every reply valid.

    python benchmarks/bench_workflow.py [--runs 50]

The run goes through the path users take: :class:`LiteLLMClient` builds each request and reads each response,
and ``litellm.completion`` is replaced by a stand-in that counts its calls and returns responses litellm's own
``mock_response`` / ``mock_tool_calls`` built before the clock starts. The figure is that count: the model calls
as the provider would see them, not our own counters (``TurnResult.llm_calls`` is printed beside it as a check).

The workflow is five states that act on their own: ``research``, ``read`` and ``measure`` each ask for one tool
(one model call each); each tool's ``result_key`` fulfils an automatic move to the next state, which the runtime
takes right after the tool's result, with no call to read it. ``write`` and ``review`` reply (one call each). So a
step is an acting state's turn, its tool calls are what the model asked for in it, and the automatic moves are
the moves no model call chose. The same workflow with the three moves not automatic (the model reads each tool's
result and names the next state, as in a conversational turn) is run beside it: one more call per tool.

The time per step is the run's wall time minus the time inside the stand-in and inside the tools (no-ops that
time themselves), divided by its five steps; median over ``--runs`` runs after one run to warm up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's price table from the package, no network

MODEL = "gpt-4o-mini"  # litellm says it calls functions natively: tools go as the provider's `tools` parameter
TOOLS = ("search", "fetch_page", "count_words")
REAL_COMPLETION: list[Any] = []  # litellm's own completion, kept before the stand-in replaces it


def definition(automatic: bool) -> dict[str, Any]:
    """The five-step workflow; ``automatic``: whether a tool's result moves it on with no model call."""

    def tool(name: str, key: str) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        return {"description": f"{name} (a no-op here)", "parameters": schema, "result_key": key}

    def acting(purpose: str, target: str, *, tool: str | None = None, needs: str | None = None) -> dict[str, Any]:
        move: dict[str, Any] = {"target_state": target, "description": f"on to {target}"}
        if needs is not None:
            move["conditions"] = [{"description": f"{needs} is in", "requires_context_keys": [needs]}]
            move["automatic"] = automatic
        state: dict[str, Any] = {"purpose": purpose, "acts": True, "transitions": [move]}
        if tool is not None:
            state["tools"] = [tool]
        if target == "measure":  # write: the draft is what it makes
            state["required_context_keys"] = ["draft"]
        return state

    return {
        "name": "bench_workflow",
        "initial_state": "research",
        "tools": {
            "search": tool("search", "hits"),
            "fetch_page": tool("fetch_page", "page"),
            "count_words": tool("count_words", "stats"),
        },
        "states": {
            "research": acting("Search for sources.", "read", tool="search", needs="hits"),
            "read": acting("Read the best source.", "write", tool="fetch_page", needs="page"),
            "write": acting("Write a draft into draft.", "measure"),
            "measure": acting("Count the draft's words.", "review", tool="count_words", needs="stats"),
            "review": acting("Approve the draft.", "done"),
            "done": {"purpose": "Finished."},
        },
    }


def replies(automatic: bool) -> list[tuple[str, dict[str, Any] | str]]:
    """The model's answers, in order: ("tool", {name, arguments}) or ("reply", its JSON text)."""

    def reply(target: str, message: str, **update: Any) -> tuple[str, str]:
        body = {"transition": {"target_state": target, "context_update": update}, "message": message}
        return "reply", json.dumps({**body, "reasoning": "bench"})

    def call(name: str) -> tuple[str, dict[str, Any]]:
        return "tool", {"name": name, "arguments": {"q": "quantum computing"}}

    script: list[tuple[str, dict[str, Any] | str]] = []
    for name, after in (("search", "read"), ("fetch_page", "write")):
        script.append(call(name))
        if not automatic:  # the model reads the result and names the next state itself
            script.append(reply(after, f"{name} done."))
    script.append(reply("measure", "Drafted.", draft="# Quantum computing\nQubits [1]."))
    script.append(call("count_words"))
    if not automatic:
        script.append(reply("review", "count_words done."))
    script.append(reply("done", "Approved."))
    return script


def built_responses(script: list[tuple[str, dict[str, Any] | str]]) -> list[Any]:
    """litellm's own mock responses for ``script``, built once, before any clock runs."""
    import litellm

    completion = REAL_COMPLETION[0] if REAL_COMPLETION else litellm.completion
    REAL_COMPLETION[:] = [completion]
    responses = []
    for n, (kind, item) in enumerate(script):
        asked = [{"role": "user", "content": "x"}]
        if kind == "tool":
            assert isinstance(item, dict)
            function = {"name": item["name"], "arguments": json.dumps(item["arguments"])}
            mock = [{"id": f"call_{n}", "type": "function", "function": function}]
            responses.append(completion(model=MODEL, messages=asked, mock_response="", mock_tool_calls=mock))
        else:
            responses.append(completion(model=MODEL, messages=asked, mock_response=item))
    return responses


class Provider:
    """Stands in for ``litellm.completion``: counts the calls and times itself."""

    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.calls = 0
        self.inside = 0.0

    def __call__(self, **params: Any) -> Any:
        start = time.perf_counter()
        self.calls += 1
        response = self.queue.pop(0)
        self.inside += time.perf_counter() - start
        return response


def measure(automatic: bool, runs: int) -> dict[str, Any]:
    """Run the workflow ``runs`` times (after one to warm up): calls at the client, per-step figures, timings."""
    import litellm

    import llm_fsm

    script = replies(automatic)
    built = built_responses(script)
    provider = Provider()
    litellm.completion = provider  # the client calls litellm.completion: from here on, it calls this
    tools_inside = [0.0]
    hooks = llm_fsm.Hooks()
    for name in TOOLS:

        def noop(q: str, _name: str = name) -> dict[str, str]:
            start = time.perf_counter()
            result = {"tool": _name, "q": q}
            tools_inside[0] += time.perf_counter() - start
            return result

        hooks.add_tool(noop, name=name)
    fsm = llm_fsm.load(definition(automatic))
    client = llm_fsm.LiteLLMClient(MODEL)
    per_step: list[float] = []
    figures: dict[str, Any] = {}
    for n in range(runs + 1):
        provider.queue[:] = built
        provider.calls, inside, tools = 0, provider.inside, tools_inside[0]
        conversation = llm_fsm.Conversation(fsm, client, hooks=hooks)
        start = time.perf_counter()
        steps = list(conversation.run("quantum computing"))
        elapsed = time.perf_counter() - start - (provider.inside - inside) - (tools_inside[0] - tools)
        assert conversation.ended and not provider.queue, "every scripted response is used and the run ends"
        assert all(not step.rejected and not step.fallback for step in steps), "every reply is valid"
        if n:
            per_step.append(elapsed / len(steps))
        figures = {
            "calls": provider.calls,
            "counted": sum(step.llm_calls for step in steps),
            "steps": [
                (step.step, step.previous_state, step.state, step.llm_calls, [c.name for c in step.tool_calls])
                for step in steps
            ],
        }
    figures["ms_per_step"] = statistics.median(per_step) * 1000
    return figures


def table(figures: dict[bool, dict[str, Any]]) -> list[str]:
    """The results as Markdown lines."""
    lines = ["| step | kind | move | model calls | tool calls | how it moved on |", "|---|---|---|---|---|---|"]
    fsm = definition(True)["states"]
    for n, (kind, before, after, calls, tools) in enumerate(figures[True]["steps"], 1):
        move = fsm[before]["transitions"][0] if before else {}
        how = "automatic, right after the tool's result" if move.get("automatic") else "named by the model"
        lines.append(f"| {n} | {kind} | {before} → {after} | {calls} | {', '.join(tools) or '-'} | {how} |")
    lines += ["", "| workflow | steps | tool calls | model calls (at the client) | llm_calls (ours) | runtime / step |"]
    lines.append("|---|---|---|---|---|---|")
    for automatic in (True, False):
        f = figures[automatic]
        name = "moves automatic after a tool's result" if automatic else "same workflow, no automatic moves"
        tools = sum(len(step[4]) for step in f["steps"])
        lines.append(
            f"| {name} | {len(f['steps'])} | {tools} | {f['calls']} | {f['counted']} | {f['ms_per_step']:.3f} ms |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs timed per workflow (after one to warm up)")
    args = parser.parse_args()
    figures = {automatic: measure(automatic, args.runs) for automatic in (True, False)}
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.runs} runs each, litellm.completion counted")
    print("\n".join(table(figures)))
    done = figures[True]
    if done["calls"] != 5 or done["calls"] != done["counted"]:
        raise SystemExit(f"expected 5 model calls, counted {done['calls']} at the client ({done['counted']} ours)")


if __name__ == "__main__":
    main()
