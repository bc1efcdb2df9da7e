"""Corrections (issue 27 §4): what a correction at the read-back costs, and the turn's overhead before and after.

    PYTHONPATH=$PWD python benchmarks/bench_corrections.py [--rounds 5] [--old /tmp/old-corr]

Two figures:

- the course of ``tests/data/corrections/dentist.json`` in which the person corrects the day at the read-back
  ("make it Friday"), walked by a scripted model the best way each version allows: without ``corrections``
  the read-back refuses the day, so the model goes back to ``ask_day`` and the person says it again; with
  them the read-back takes it. Turns, model calls and refused writes: exact, one run.
- the runtime overhead of a turn (everything but the model call, ``bench_turn.overhead``) on the largest
  example (no ``corrections``: what every old definition pays) in the old tree and this one, and on the
  dentist course with ``corrections`` in this one; each measured in a subprocess whose ``PYTHONPATH`` is its
  tree, the trees alternated round by round; medians of the rounds' medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OLD = Path("/tmp/old-corr")  # git worktree add /tmp/old-corr fdb6308
DENTIST = ROOT / "tests" / "data" / "corrections" / "dentist.json"


def _reply(target: str, message: str, **update: Any) -> dict[str, Any]:
    return {"transition": {"target_state": target, "context_update": update}, "message": message}


OPENING = [
    (None, _reply("ask_service", "Hello! What is the appointment for?")),
    ("A cleaning", _reply("ask_day", "A cleaning: which day and time?", service="cleaning")),
    (
        "Tuesday at 10",
        _reply("read_back", "Tuesday at 10 for a cleaning, right?", preferred_day="Tuesday", time="10:00"),
    ),
]
# without corrections: the read-back refuses the new day, the model goes back to ask it, the person says it again
WITHOUT = [
    *OPENING,
    ("Make it Friday", _reply("ask_day", "Which day would suit you?", confirmed=False, preferred_day="Friday")),
    ("Friday, as I said", _reply("read_back", "Friday at 10 for a cleaning, right?", preferred_day="Friday")),
    ("Yes", _reply("booked", "Booked: Friday at 10.", confirmed=True)),
]
# with corrections: the read-back takes it
WITH = [
    *OPENING,
    ("Make it Friday", _reply("read_back", "Friday at 10 for a cleaning, right?", preferred_day="Friday")),
    ("Yes", _reply("booked", "Booked: Friday at 10.", confirmed=True)),
]


def course(corrections: bool) -> dict[str, Any]:
    """The read-back course walked by a scripted model: user turns, model calls, refused writes, corrections."""
    import llm_fsm
    from llm_fsm.testing import ScriptedLLM

    data = json.loads(DENTIST.read_text())
    if not corrections:
        data.pop("corrections")
    steps = WITH if corrections else WITHOUT
    conversation = llm_fsm.Conversation(llm_fsm.load(data), ScriptedLLM([r for _, r in steps]))
    results = [conversation.start() if text is None else conversation.send(text) for text, _ in steps]
    assert results[-1].state == "booked" and conversation.context["preferred_day"] == "Friday", results[-1]
    return {
        "user_turns": len(steps) - 1,
        "calls": sum(r.llm_calls for r in results),
        "refused": sum(len(r.rejected) for r in results),
        "corrections": sum(len(r.corrections) for r in results),
    }


def decide_cost() -> dict[str, float]:
    """``engine.decide`` on a reply that fills the keys of the largest example's first state (no corrections):
    microseconds per call, the best of 7 repeats of 20,000 calls."""
    import timeit

    from benchmarks import bench_turn
    from llm_fsm import load
    from llm_fsm.contract import Reply
    from llm_fsm.turn.engine import decide, initial_snapshot

    definition = load(bench_turn.largest_example())
    state = definition.initial_state
    snapshot = initial_snapshot(definition, state, {})
    update = dict.fromkeys(definition.states[state].required_context_keys, "x")
    reply = Reply.model_validate({"transition": {"target_state": state, "context_update": update}, "message": "m"})
    best = min(timeit.repeat(lambda: decide(definition, snapshot, reply), number=20_000, repeat=7))
    return {"decide_us": best / 20_000 * 1e6}


def worker(rounds: int, dentist: bool) -> dict[str, float]:
    """In a subprocess, in the tree on ``PYTHONPATH``: the turn's overhead and the cost of ``decide`` on the
    largest example, or the turn's overhead on the dentist course with corrections (this tree only)."""
    sys.path.insert(0, os.environ["PYTHONPATH"])
    from benchmarks import bench_turn

    if not dentist:
        return {**bench_turn.overhead(bench_turn.largest_example(), rounds), **decide_cost()}
    import tempfile

    # bench_turn.overhead reads a definition's script and inputs beside it, as the examples keep them
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dentist.json"
        path.write_text(DENTIST.read_text())
        (Path(folder) / "scripts").mkdir()
        (Path(folder) / "scripts" / "dentist.json").write_text(json.dumps({"replies": [r for _, r in WITH]}))
        (Path(folder) / "scripts" / "dentist.txt").write_text("\n".join(t for t, _ in WITH if t) + "\n")
        return bench_turn.overhead(path, rounds)


def measure(root: Path, rounds: int, dentist: bool = False) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(rounds)]
    command += ["--dentist"] if dentist else []
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=root)
    figures: dict[str, float] = json.loads(out.stdout)
    return figures


def section(quick: bool = False, old: Path = OLD, rounds: int | None = None) -> list[str]:
    """The RESULTS.md section: the course's turns, and the overhead before (the tree at ``old``, when there)
    and after, alternated; 2 rounds with ``quick``, else 5 (or ``rounds``)."""
    rounds = rounds or (2 if quick else 5)
    per_run = 20 if quick else 60  # conversations per subprocess
    before, after = course(False), course(True)
    runs: dict[str, list[float]] = {"old": [], "new": [], "dentist": [], "old_decide": [], "new_decide": []}
    has_old = (old / "llm_fsm").is_dir()
    for _ in range(rounds):
        for tree, root in [("old", old), ("new", ROOT)] if has_old else [("new", ROOT)]:
            figures = measure(root, per_run)
            runs[tree].append(figures["median_ms"])
            runs[f"{tree}_decide"].append(figures["decide_us"])
        runs["dentist"].append(measure(ROOT, per_run, dentist=True)["median_ms"])
    med = {name: statistics.median(values) for name, values in runs.items() if values}
    lines = [
        "## 20. Corrections at the read-back (issue 27 §4)",
        "",
        "Command: `PYTHONPATH=$PWD python benchmarks/bench_corrections.py --rounds "
        f"{rounds} --old {old}`" + ("" if has_old else " (no old tree found)") + ".",
        "",
        "The course of `tests/data/corrections/dentist.json` in which the person corrects the day at the "
        "read-back, walked by a scripted model the best way each version allows (exact, one run):",
        "",
        "| | user turns | model calls | refused writes | corrections reported |",
        "|---|---|---|---|---|",
        f"| without `corrections` (as before) | {before['user_turns']} | {before['calls']} | {before['refused']} "
        f"| {before['corrections']} |",
        f'| with `"corrections": ["preferred_day", "time"]` | {after["user_turns"]} | {after["calls"]} '
        f"| {after['refused']} | {after['corrections']} |",
        "",
        f"The turn's runtime overhead (no model call; {per_run} conversations a run, {rounds} runs alternated, "
        "median of the runs' medians):",
        "",
        "| | per turn | after / before |",
        "|---|---|---|",
    ]
    if "old" in med:
        lines.append(f"| largest example, before (old tree) | {med['old']:.3f} ms | 1.000 |")
        lines.append(f"| largest example, after | {med['new']:.3f} ms | {med['new'] / med['old']:.3f} |")
        lines.append(f"| `engine.decide` alone, before | {med['old_decide']:.2f} µs | 1.000 |")
        ratio = med["new_decide"] / med["old_decide"]
        lines.append(f"| `engine.decide` alone, after | {med['new_decide']:.2f} µs | {ratio:.3f} |")
    else:
        lines.append(f"| largest example, after | {med['new']:.3f} ms | |")
        lines.append(f"| `engine.decide` alone, after | {med['new_decide']:.2f} µs | |")
    lines += [f"| dentist course with corrections, after | {med['dentist']:.3f} ms | |", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--old", type=Path, default=OLD)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dentist", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.dentist)))
        return
    print("\n".join(section(args.quick, args.old, args.rounds)))


if __name__ == "__main__":
    main()
