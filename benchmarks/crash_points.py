"""The crash-point table: run tests/store/test_crash_points.py and print what every kill left and what the retry did.

    python benchmarks/crash_points.py        # about 3 minutes; needs redis-server and PostgreSQL's binaries

A row per scenario and store: the boundaries the turn passes (each one a kill), what the store held after
the kill (the state before the turn, after it, or a mix), and the most times one tool call had its effect
and was invoked (the retry included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "cases.json"
        env = {**os.environ, "LLM_FSM_CRASH_TABLE": str(table)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/store/test_crash_points.py"]
        done = subprocess.run(command, cwd=ROOT, env=env)
        if not table.exists():
            return done.returncode or 1
        cases = json.loads(table.read_text())
    rows: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for case in cases:
        rows[case["scenario"], case["store"]].append(case)
    print("| scenario | store | kills | store held: before / after / mixed | most effects of one call", end="")
    print(" | most runs of one call |")
    print("|---|---|---|---|---|---|")
    for (scenario, store), kills in rows.items():
        held = [sum(k["held"] == h for k in kills) for h in ("before", "after")]
        mixed = len(kills) - sum(held)
        effects, runs = max(k["effects"] for k in kills), max(k["calls"] for k in kills)
        print(f"| {scenario} | {store} | {len(kills)} | {held[0]} / {held[1]} / {mixed} | {effects} | {runs} |")
    print(f"\n{len(cases)} kills; tests {'passed' if done.returncode == 0 else 'FAILED'}")
    approval = [c for c in cases if c["scenario"] == "approval tool" and c["store"] == "sqlite"]
    if approval:
        print("\nThe approval tool on SQLite, kill by kill:\n")
        print("| killed | store held | effects | runs |\n|---|---|---|---|")
        for c in approval:
            print(f"| {c['point']} | {c['held']} | {c['effects']} | {c['calls']} |")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
