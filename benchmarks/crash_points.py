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


Kills = dict[tuple[str, str], list[dict]]  # the kills of one (scenario, store), each a dict the test wrote


def collected(test: str, variable: str) -> tuple[int, list[dict], Kills]:
    """Run ``test`` with ``variable`` naming the file its kills are written to: its exit code, the kills, and the
    kills by (scenario, store); no kills (the test wrote none) when it failed before any."""
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "cases.json"
        env = {**os.environ, variable: str(table)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
        done = subprocess.run(command, cwd=ROOT, env=env)
        cases = json.loads(table.read_text()) if table.exists() else []
    rows: Kills = defaultdict(list)
    for case in cases:
        rows[case["scenario"], case["store"]].append(case)
    return done.returncode, cases, rows


def main() -> int:
    code, cases, rows = collected("tests/store/test_crash_points.py", "LLM_FSM_CRASH_TABLE")
    if not cases:
        return code or 1
    print("| scenario | store | kills | store held: before / after / mixed | most effects of one call", end="")
    print(" | most runs of one call |")
    print("|---|---|---|---|---|---|")
    for (scenario, store), kills in rows.items():
        held = [sum(k["held"] == h for k in kills) for h in ("before", "after")]
        mixed = len(kills) - sum(held)
        effects, runs = max(k["effects"] for k in kills), max(k["calls"] for k in kills)
        print(f"| {scenario} | {store} | {len(kills)} | {held[0]} / {held[1]} / {mixed} | {effects} | {runs} |")
    print(f"\n{len(cases)} kills; tests {'passed' if code == 0 else 'FAILED'}")
    approval = [c for c in cases if c["scenario"] == "approval tool" and c["store"] == "sqlite"]
    if approval:
        print("\nThe approval tool on SQLite, kill by kill:\n")
        print("| killed | store held | effects | runs |\n|---|---|---|---|")
        for c in approval:
            print(f"| {c['point']} | {c['held']} | {c['effects']} | {c['calls']} |")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
