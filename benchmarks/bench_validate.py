"""`validate`'s static analysis on one state holding many transitions: does it grow linearly?

    python benchmarks/bench_validate.py [--runs 3] [--sizes 1000 10000 30000]

The definitions are generated, in three shapes. *router*: a `menu` state routes on `choice == i` (one
transition and one target state per item, priority 10), one in ten transitions routes on a band of
`score` instead (priority 20), and a cancel and a help transition (one unconditioned) close the list;
nothing warns. *two keys*: a `pick` state routes on `row == i // 100 and seat == i % 100`; nothing
warns. *a key each*: a `form` state collects one key per transition and each transition needs its own
key; any two can hold together, so each transition gets an `ambiguous_priority` warning, with the
context the solver found. *from anywhere*: a chain of states, one transition each, with cancel, a
person and help (going back) as global transitions: the size counts them once per state they apply in;
nothing warns. Every check runs (graph, keys, conditions that never hold, ambiguous
priorities). Figures are medians of `--runs` runs of `analyze(definition)`, the dict already in memory
(loading it is part of the time), then the same with Python's cyclic garbage collector paused.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_fsm.authoring.analysis import analyze  # noqa: E402

SIZES = (1_000, 10_000, 30_000)


def definition(transitions: int) -> dict[str, Any]:
    """A definition whose `menu` state has ``transitions`` transitions, each to its own terminal state."""
    routes = []
    for i in range(transitions - 2):
        if i % 10 == 9:
            band = {"and": [{">=": [{"var": "score"}, i]}, {"<": [{"var": "score"}, i + 1]}]}
            routes.append(_route(i, 20, {"description": f"score in [{i}, {i + 1})", "logic": band}))
        else:
            routes.append(_route(i, 10, {"requires_context_keys": ["choice"], "logic": {"==": [{"var": "choice"}, i]}}))
    routes.append(_route("cancelled", 80, {"logic": {"==": [{"var": "cancelled"}, True]}}))
    routes.append({"target_state": "help", "description": "The user asks what the menu offers.", "priority": 90})
    items = {route["target_state"]: {"purpose": f"Confirm {route['target_state']}."} for route in routes}
    menu = {
        "purpose": "Find out which item the user wants.",
        "instructions": "Ask for the item number (choice) or a score; the user may also cancel.",
        "required_context_keys": ["choice", "score", "cancelled"],
        "transitions": routes,
    }
    return {
        "name": f"menu_{transitions}",
        "initial_state": "menu",
        "context_schema": {"choice": {"type": "integer"}, "score": {"type": "number"}},
        "states": {"menu": menu, **items},
    }


def keyed(transitions: int) -> dict[str, Any]:
    """A definition whose `form` state has ``transitions`` transitions, each needing its own key."""
    keys = [f"field_{i}" for i in range(transitions)]
    routes = [_route(i, 10, {"requires_context_keys": [key]}) for i, key in enumerate(keys)]
    form = {"purpose": "Fill in the form.", "required_context_keys": keys, "transitions": routes}
    items = {route["target_state"]: {"purpose": "Done."} for route in routes}
    return {"name": f"form_{transitions}", "initial_state": "form", "states": {"form": form, **items}}


def grid(transitions: int) -> dict[str, Any]:
    """A definition whose `pick` state routes on two keys: `row == i // 100 and seat == i % 100`."""
    routes = [
        _route(i, 10, {"logic": {"and": [{"==": [{"var": "row"}, i // 100]}, {"==": [{"var": "seat"}, i % 100]}]}})
        for i in range(transitions)
    ]
    pick = {"purpose": "Pick a seat.", "required_context_keys": ["row", "seat"], "transitions": routes}
    items = {route["target_state"]: {"purpose": "Booked."} for route in routes}
    return {"name": f"seats_{transitions}", "initial_state": "pick", "states": {"pick": pick, **items}}


def anywhere(transitions: int) -> dict[str, Any]:
    """A chain of states (``transitions`` in all: the chain's own and three global ones per state), each
    leading to the next on its key, with cancel, a person and help (which goes back, ``"$return"``)
    declared once as global transitions, cancel excepted in the last step."""
    steps = max(1, transitions // 4)
    names = [f"step_{i}" for i in range(steps)] + ["done"]
    states: dict[str, Any] = {
        names[i]: {
            "purpose": f"Collect field_{i}.",
            "required_context_keys": [f"field_{i}"],
            "transitions": [{"target_state": names[i + 1], "conditions": [{"requires_context_keys": [f"field_{i}"]}]}],
        }
        for i in range(steps)
    }
    states |= {
        "help": {"purpose": "Answer.", "transitions": [{"target_state": "$return", "description": "Answered."}]},
        "cancelled": {"purpose": "Bye."},
        "person": {"purpose": "A person takes over."},
        "done": {"purpose": "Done."},
    }
    moves = [
        {"target_state": "cancelled", "description": "Stop.", "priority": 5, "except_states": [names[steps - 1]]},
        {"target_state": "person", "description": "Ask for a person.", "priority": 20},
        {"target_state": "help", "description": "A question.", "priority": 50},
    ]
    return {"name": f"chain_{steps}", "initial_state": names[0], "states": states, "global_transitions": moves}


SHAPES = {"router": definition, "two keys": grid, "a key each": keyed, "from anywhere": anywhere}


def _route(item: int | str, priority: int, condition: dict[str, Any]) -> dict[str, Any]:
    return {"target_state": f"item_{item}", "description": f"The user picks {item}.", "priority": priority,
            "conditions": [condition]}  # fmt: skip


def timed(data: dict[str, Any], runs: int, *, collector: bool) -> tuple[float, int]:
    """The median seconds of ``analyze(data)`` and the diagnostics found; ``collector=False`` pauses
    Python's cyclic garbage collector while it runs."""
    times, found = [], 0
    for _ in range(runs):
        gc.collect()
        if not collector:
            gc.disable()
        try:
            start = time.perf_counter()
            found = len(analyze(data))
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return statistics.median(times), found


def measure(sizes: tuple[int, ...] = SIZES, runs: int = 3) -> list[tuple[str, int, float, float, int]]:
    """(shape, transitions, median seconds, median seconds with the collector paused, diagnostics)."""
    rows = []
    for shape, generate in SHAPES.items():
        for size in sizes:
            data = generate(size)
            seconds, found = timed(data, runs, collector=True)
            rows.append((shape, size, seconds, timed(data, runs, collector=False)[0], found))
    return rows


def section(runs: int, sizes: tuple[int, ...] = SIZES) -> list[str]:
    rows = measure(sizes, runs)
    lines = ["## 10. `validate` on one state with many transitions", "",
             f"`analyze` on generated definitions (`benchmarks/bench_validate.py`), median of {runs} run(s); "
             "the GC columns with Python's cyclic garbage collector paused, which shows what the analysis "
             "itself costs (the collector's full passes grow with the heap). Ratios are to the smallest size.",
             "",
             "| shape | transitions | size ratio | time | ratio | GC paused | ratio | diagnostics |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    first: dict[str, tuple[int, float, float]] = {}
    for shape, size, seconds, paused, found in rows:
        size0, time0, paused0 = first.setdefault(shape, (size, seconds, paused))
        lines.append(f"| {shape} | {size} | {size / size0:.0f} | {seconds:.2f} s | {seconds / time0:.1f} "
                     f"| {paused:.2f} s | {paused / paused0:.1f} | {found} |")  # fmt: skip
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    print("\n".join(section(args.runs, tuple(args.sizes))))


if __name__ == "__main__":
    main()
