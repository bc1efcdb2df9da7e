"""The crash-point table of workflow runs: run tests/store/test_crash_points_runs.py and print what every kill left.

    python benchmarks/run_crash_points.py        # about a minute; needs redis-server and PostgreSQL's binaries

A row per way of taking the run and store: the boundaries the three-step run passes (each one a kill), the step
the store held after the kill (the run's first step when nothing of it was saved; "done": all of it), and what the
retry ran again: the tools of finished steps (called again), and the most effects and calls of one tool (a call
cut off in its step runs again with the same key, so its effect happens once). A kill that left a mix of two
steps, or a retry that asked for a finished step's model reply, fails the test.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.crash_points import collected  # noqa: E402 (the tree on sys.path first)

TEST = "tests/store/test_crash_points_runs.py"


def main() -> int:
    code, cases, rows = collected(TEST, "LLM_FSM_RUN_CRASH_TABLE")
    if not cases:
        return code or 1
    print("| run | store | kills | store held (step: kills) | finished steps' tools called again |", end="")
    print(" most effects of one tool | most calls of one tool |")
    print("|---|---|---|---|---|---|---|")
    for (scenario, store), kills in rows.items():
        held = ", ".join(f"{step}: {n}" for step, n in Counter(k["held"] for k in kills).items())
        again = sum(k["tools_again"] for k in kills)
        effects, calls = max(k["effects"] for k in kills), max(k["calls"] for k in kills)
        print(f"| {scenario} | {store} | {len(kills)} | {held} | {again} | {effects} | {calls} |")
    verdict = "passed (0 mixed states, 0 finished steps run again)" if code == 0 else "FAILED"
    print(f"\n{len(cases)} kills; tests {verdict}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
