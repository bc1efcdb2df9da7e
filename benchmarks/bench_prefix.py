"""How much of each model call's prompt repeats the previous call's, byte for byte, from the start.

    python benchmarks/bench_prefix.py [--old /tmp/old-prompt]

A provider's prompt cache (OpenAI and DeepSeek automatically, Anthropic and Gemini on a marked prefix)
bills the prefix a call shares with an earlier one at a fraction of the price. Every example's scripted
run (``fsm_definitions/scripts/<name>.json`` and ``.txt``, as ``tests/test_examples.py`` drives it, state
changes included) is recorded call by call; for each call after the first, its share is the length of the
common prefix of its messages and the previous call's (roles and contents concatenated) over its own length.
Per example: the median and the lowest share, and the overall share (shared characters over all characters
of the calls after the first).

With ``--old``, each tree is measured in a subprocess of its own with ``PYTHONPATH`` pointing at it, on its
own examples and scripts, and the table shows both; ``--old-order cache`` (or ``recency``) measures the old tree
in that prompt order (a tree with the orders, for a change to one of them), else in its default one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OLD = Path("/tmp/old-prompt")  # git worktree add /tmp/old-prompt 01ff7f5


def flatten(messages: list[dict[str, Any]]) -> str:
    """One call's prompt as one text: each message's role, then its content (JSON when it is not text)."""
    parts = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            # blocks (a cache marker) or tool calls: the text of the blocks, else the message as JSON
            if isinstance(content, list) and all(isinstance(b, dict) and "text" in b for b in content):
                content = "".join(block["text"] for block in content)
            else:
                content = json.dumps({k: v for k, v in message.items() if k != "role"}, sort_keys=True)
        parts.append(f"<{message.get('role')}>\n{content}\n")
    return "".join(parts)


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    low, high = 0, n  # binary search on equal prefixes: fast on long prompts
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def record(root: Path, order: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Every example's calls, as (kind, flattened prompt), over its scripted run (run in the tree on ``sys.path``),
    with the prompt in ``order`` (a tree from before the prompt orders has one: None)."""
    import llm_fsm
    from llm_fsm.testing import ScriptedLLM

    calls: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((root / "fsm_definitions").glob("*.json")):
        definition = llm_fsm.load(path)
        scripts = path.parent / "scripts"
        script = json.loads((scripts / f"{path.stem}.json").read_text(encoding="utf-8"))
        text = (scripts / f"{path.stem}.txt").read_text(encoding="utf-8")
        module = path.parent / "hooks" / f"{path.stem}.py"
        hooks = llm_fsm.Hooks.load(f"{module}:hooks") if module.is_file() else llm_fsm.Hooks()
        llm = ScriptedLLM(script["replies"])
        options = {"prompt_order": order} if order else {}
        conversation = llm_fsm.Conversation(definition, llm, hooks=hooks, **options)
        conversation.start()
        for line in text.splitlines():
            if line.strip():
                conversation.send(line)
        calls[path.stem] = [(request.kind, flatten(request.messages)) for request in llm.requests]
    return calls


def shares(prompts: list[str]) -> dict[str, float]:
    per_call, shared, total, fresh, anywhere = [], 0, 0, [], 0
    for i, now in enumerate(prompts[1:], 1):
        common = common_prefix(prompts[i - 1], now)
        per_call.append(common / len(now))
        shared += common
        total += len(now)
        fresh.append(len(now) - common)
        # a provider's cache holds more than the last prefix: a summary call between two replies does not
        # evict the first reply's
        anywhere += max(common_prefix(before, now) for before in prompts[:i])
    return {
        "calls": len(prompts),
        "median": statistics.median(per_call),
        "min": min(per_call),
        "overall": shared / total,
        "anywhere": anywhere / total,
        "chars": statistics.median(len(p) for p in prompts),
        "total": total,  # the characters of the calls after the first, and how many of them a cache could serve
        "shared": shared,
        "fresh": statistics.median(fresh),
    }


def render_cost(root: Path, name: str = "order_flow", rounds: int = 300) -> dict[str, float]:
    """What rendering a turn's prompt costs over ``name``'s scripted run: the median CPU time per prompt
    (microseconds) and, a figure load does not move, Python function calls per prompt. Each round replays the
    run's turns in order on a builder whose templates are compiled and whose definition and state parts are
    rendered (as in a running process): each turn's own part is new, as in a conversation."""
    import cProfile
    import pstats

    import llm_fsm
    from llm_fsm.testing import ScriptedLLM
    from llm_fsm.turn.prompt import PromptBuilder

    path = root / "fsm_definitions" / f"{name}.json"
    definition = llm_fsm.load(path)
    script = json.loads((path.parent / "scripts" / f"{name}.json").read_text(encoding="utf-8"))
    lines = [x for x in (path.parent / "scripts" / f"{name}.txt").read_text(encoding="utf-8").splitlines() if x.strip()]
    conversation = llm_fsm.Conversation(definition, ScriptedLLM(script["replies"]))
    conversation.start()
    turns = []
    for line in lines:
        turns.append((conversation.snapshot(), line))
        conversation.send(line)
    warm = PromptBuilder()
    for snapshot, line in turns:
        warm.messages(definition, snapshot, line)

    def builder() -> PromptBuilder:
        fresh = PromptBuilder()
        fresh.env = warm.env  # its templates compiled
        fresh._cache.update(warm._cache)  # the definition's and states' parts rendered
        return fresh

    times = []
    for _ in range(rounds):
        prompt = builder()
        start = time.process_time()
        for snapshot, line in turns:
            prompt.messages(definition, snapshot, line)
        times.append((time.process_time() - start) / len(turns))
    profile, prompt = cProfile.Profile(), builder()
    profile.enable()
    for snapshot, line in turns:
        prompt.messages(definition, snapshot, line)
    profile.disable()
    calls: int = getattr(pstats.Stats(profile), "total_calls")  # noqa: B009 (set by Stats, not declared)
    return {"us": statistics.median(times) * 1e6, "calls": calls / len(turns)}


def measure(root: Path, render: bool = False, order: str | None = None) -> dict[str, dict[str, float]]:
    """The figures of the tree at ``root``, measured in a subprocess whose ``PYTHONPATH`` is that tree:
    the prefix shares per example (with the prompt in ``order``), or (``render``) the render cost."""
    env = {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, __file__, "--worker", str(root), *(["--render"] if render else [])]
    command += ["--order", order] if order else []
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    figures: dict[str, dict[str, float]] = json.loads(out.stdout)
    return figures


# what providers take off the price of cached prompt tokens: 90 % (Anthropic, DeepSeek, OpenAI's GPT-5 models),
# 75 % (OpenAI's GPT-4.1 and o-series, Gemini 2.5), 50 % (OpenAI's GPT-4o models)
DISCOUNTS = (0.9, 0.75, 0.5)

# the first piece of a system prompt that depends on the conversation (memory, summary, context), in any tree
_CONVERSATION_TAGS = ("<background>", "<memory>", "<conversation_summary>", "<current_context>")


def state_stable(prompt: str) -> float:
    """The share of a call's prompt that every conversation in the same state sends alike (everything before
    its memory, summary and context): what a provider's cache, shared by a service's conversations, can
    serve even on a change of state."""
    starts = [i for i in (prompt.find(tag) for tag in _CONVERSATION_TAGS) if i >= 0]
    return min(starts, default=0) / len(prompt)


def figures(calls: list[tuple[str, str]]) -> dict[str, float]:
    """The shares over every call, and over the reply calls alone ("reply_*"): summary calls have a prompt of
    their own (and may go to another model, ``summary_llm``), so the replies are the chain a cache keeps."""
    replies = [text for kind, text in calls if kind == "reply"]
    alone = shares(replies) if len(replies) > 1 else {}
    service = {"service": statistics.median(state_stable(text) for text in replies)} if replies else {}
    return {**shares([text for _, text in calls]), **service, **{f"reply_{k}": v for k, v in alone.items()}}


def section(quick: bool = False, old: Path = OLD, old_order: str | None = None) -> list[str]:
    """The RESULTS.md section: before (the tree at ``old``, when there, in ``old_order``: None for its default)
    and after. The shares are exact (one run); the render cost alternates old and new, 2 runs each with
    ``quick``, else 5."""
    # the two orders of today's prompt (llm_fsm.turn.prompt.PromptOrder): "recency" for models without a prompt
    # cache (local ones), "cache" for the providers that have one
    recency, new = measure(ROOT, order="recency"), measure(ROOT, order="cache")
    before = measure(old, order=old_order) if (old / "llm_fsm").is_dir() else {}
    renders: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(2 if quick else 5):
        if before:
            renders["old"].append(measure(old, render=True)["order_flow"])
        renders["new"].append(measure(ROOT, render=True)["order_flow"])
    lines = [
        "## 15. A prompt providers can cache (issue 26 §1): the prefix consecutive model calls share",
        "",
        "Every example's scripted run, state changes included; per call, the byte-identical prefix it shares with "
        "the previous call over its own length. Each cell: before → the recency order (what models without a "
        "prompt cache get: the reply rules after the state) → the cache order (what OpenAI, Anthropic, DeepSeek, "
        'Gemini and the like get: the rules and a map of the states before the state). "Not shared": the '
        "characters of a call after that prefix, which a provider bills at the full price. "
        '"Vs any earlier call": the longest prefix shared '
        "with any earlier call of the run, as a provider's cache sees it. \"Billed\": the cache order's calls "
        "after the first against the old tree's, the characters a cache can serve billed at 10 %, 25 % or 50 % of "
        'the price (the discounts providers give), the rest in full. "Across conversations": per reply '
        "call, the share of its prompt that any conversation in the same state sends alike (all before memory and "
        "context), which a cache shared by a service's conversations serves on a change of state too. "
        "Command: `python benchmarks/bench_prefix.py --old /tmp/old-prompt"
        + (f" --old-order {old_order}" if old_order else "")
        + "`"
        + (
            f" (old tree: `{old}`" + (f", in its {old_order} order" if old_order else "") + ")"
            if before
            else " (no old tree found)"
        )
        + ".",
        "",
        "| example | calls | prompt chars (median) | not shared, chars (median) | median share "
        "| lowest | overall | overall, vs any earlier call | overall, reply calls alone | across conversations "
        "| billed, cached at 90 % / 75 % / 50 % off |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pair(name: str, key: str, form: str = ".0%") -> str:
        after = f"{format(recency[name][key], form)} → {format(new[name][key], form)}"
        return f"{format(before[name][key], form)} → {after}" if name in before else after

    def billed(name: str) -> str:
        """What the calls after the first cost against the old tree's, their cached prefix billed at each of
        the ``DISCOUNTS``, the rest in full."""
        if name not in before:
            return "-"
        old, now = before[name], new[name]
        cost = [(now["total"] - off * now["shared"]) / (old["total"] - off * old["shared"]) for off in DISCOUNTS]
        return " / ".join(f"{c:.2f}×" for c in cost)

    for name, f in new.items():
        keys = ("median", "min", "overall", "anywhere", "reply_overall", "service")
        shown = [pair(name, key) if key in new[name] and key in before.get(name, new[name]) else "-" for key in keys]
        shown.append(billed(name))
        lines.append(
            f"| {name} | {f['calls']:.0f} | {pair(name, 'chars', '.0f')} | {pair(name, 'fresh', '.0f')} | "
            + " | ".join(shown)
            + " |"
        )
    worst = min(new.values(), key=lambda f: f["median"])
    lines += [
        "",
        f"The cache order: the lowest median share is {worst['median']:.0%}, the lowest single call "
        f"{min(f['min'] for f in new.values()):.0%}, the lowest overall share "
        f"{min(f['overall'] for f in new.values()):.0%}; over the reply calls alone (a summary call has a prompt "
        f"of its own, and may go to another model) the lowest overall share is "
        f"{min(f.get('reply_overall', f['overall']) for f in new.values()):.0%}; across conversations in the same "
        f"state, the lowest median is {min(f.get('service', 0) for f in new.values()):.0%}.",
        "",
    ]
    cost = {side: statistics.median(r["us"] for r in runs) for side, runs in renders.items() if runs}
    calls = {side: runs[0]["calls"] for side, runs in renders.items() if runs}
    lines += [
        "Rendering a turn's prompt (`order_flow`'s scripted turns in order, templates compiled, definition and "
        f"state parts rendered; median CPU time per prompt, {len(renders['new'])} runs alternating old and new): "
        + (
            f"{cost['old']:.0f} µs before, {cost['new']:.0f} µs after ({cost['new'] / cost['old']:.2f}×); "
            f"Python function calls per prompt (load does not move them): {calls['old']:.0f} before, "
            f"{calls['new']:.0f} after ({calls['new'] / calls['old']:.2f}×)."
            if "old" in cost
            else f"{cost['new']:.0f} µs, {calls['new']:.0f} Python function calls per prompt."
        ),
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, default=OLD, help="the tree to compare with (a git worktree)")
    parser.add_argument("--old-order", choices=("recency", "cache"), help="the old tree's prompt order")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--order", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker and args.render:
        print(json.dumps({"order_flow": render_cost(args.worker)}))
        return
    if args.worker:
        print(json.dumps({name: figures(calls) for name, calls in record(args.worker, args.order).items()}))
        return
    print("\n".join(section(old=args.old, old_order=args.old_order)))


if __name__ == "__main__":
    main()
