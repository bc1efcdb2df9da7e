"""A quick probe of the local model under a prompt variant: the first user turns of each example, one call each.

    python benchmarks/bench_first_turns.py --url http://127.0.0.1:PORT/v1 [--root TREE] [--variants plain,...]
        [--turns 4]

``--url``: a running ``scripts/local-model start`` server. ``--root``: the tree whose runtime and
``benchmarks/bench_real_model.py`` variants are played (default: this one; an older worktree compares code).
Each example opens as its tree writes it (no call counted), then its course's first ``--turns`` user lines are
sent with no corrective call (``max_corrections=0``), so every figure is the model's first reply: how many were
valid, how many the token limit cut, the completion tokens. Minutes, where ``bench_real_model.py`` takes an
hour on a loaded machine: issue 26 chose where the prompt's reply rules go with it (``REAL_MODEL.md``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = ["form_filling", "order_flow", "quiz", "restaurant_booking", "small_talk", "support_triage"]


def probe(root: Path, url: str, variant: str, turns: int) -> dict[str, Any]:
    import bench_real_model as bench  # the root's, put on sys.path by main()

    import llm_fsm
    from llm_fsm.testing import scorecard

    rewrite, guided = bench.VARIANTS[variant]
    seen: list[Any] = []  # the responses of the turn being played

    class Recording(bench.Client):  # type: ignore[misc, name-defined]  # the root's client, found at run time
        def complete(self, request: Any) -> Any:
            response = super().complete(request)
            seen.append(response)
            return response

    tokens: list[int] = []
    seconds: list[float] = []
    valid = reached = cut = played = 0
    for example in EXAMPLES:
        course = scorecard.course(root / "fsm_definitions" / f"{example}.json")
        llm = Recording(url, rewrite, course.definition, guided, 120.0)
        conversation = llm_fsm.Conversation(course.definition, llm, hooks=course.hooks, max_corrections=0)
        conversation.start()
        seen.clear()  # a tree whose examples have no opening of their own: the model wrote it, not counted
        for index, line in enumerate(course.lines[:turns]):
            if conversation.ended or conversation.paused:
                break
            started = time.perf_counter()
            result = conversation.send(line)
            seconds.append(time.perf_counter() - started)
            tokens += [r.usage.completion_tokens for r in seen]
            cut += sum(r.finish_reason == "length" for r in seen)
            seen.clear()
            played += 1
            invalid = [r for r in result.rejected if r.attempt == 1 and r.kind in scorecard._INVALID_FIRST]
            valid += not invalid
            reached += result.state == course.expected[index + 1]
    return {
        "variant": variant,
        "turns": played,
        "valid": valid,
        "reached": reached,
        "cut": cut,
        "tokens": statistics.median(tokens),
        "seconds": statistics.median(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the local model server's base URL (…/v1)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--variants", default="plain,guided")
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    for variant in args.variants.split(","):
        f = probe(root, args.url, variant, args.turns)
        print(
            f"{f['variant']:26} valid first replies {f['valid']}/{f['turns']}  cut at the limit {f['cut']}  "
            f"reached {f['reached']}/{f['turns']}  completion tokens (median) {f['tokens']:.0f}  "
            f"s/turn {f['seconds']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
