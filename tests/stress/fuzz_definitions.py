"""Fuzz definition files at length: ``python tests/stress/fuzz_definitions.py --mutations 10000``.

Each mutation (the kinds of ``tests/definition/test_definition_fuzz.py``, which this script imports) is written to a
file, loaded with ``llm_fsm.load`` and checked with ``llm-fsm validate``; the contract is the one that
module documents. Prints the count of each kind and each outcome, the problem codes seen, every distinct
broken promise with a reproduction command, and the slowest files. Mutation ``i`` of seed ``s`` is rebuilt
alone with ``--show i --seed s``.

Exit status: 0 when the contract held everywhere except in the known-bug kinds (1 with ``--strict``), else 1.
``--scaling`` also times the static analysis on reachable chains of 1,000, 2,000 and 5,000 states.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.definition import test_definition_fuzz as fuzz  # noqa: E402 (after the path is set)


def _run_chunk(seed: int, start: int, count: int, kinds: tuple[str, ...], huge_states: int) -> list[dict[str, Any]]:
    from typer.testing import CliRunner

    fuzz.HUGE_STATES = huge_states
    runner = CliRunner()
    results = []
    with tempfile.TemporaryDirectory(prefix="llm-fsm-fuzz-") as directory:
        for index, mutation in enumerate(fuzz.generate(seed, count, kinds, start), start):
            outcome = fuzz.check(mutation, Path(directory), runner)
            results.append(
                {
                    "index": index,
                    "kind": mutation.kind,
                    "example": mutation.example,
                    "note": mutation.note,
                    "label": outcome.label,
                    "codes": outcome.codes,
                    "failures": outcome.failures,
                    "seconds": outcome.load_seconds + outcome.validate_seconds,
                }
            )
    return results


def run(args: argparse.Namespace) -> int:
    kinds = tuple(fuzz.MUTATORS) if args.all_kinds else fuzz.SAFE_KINDS
    jobs = max(1, args.jobs)
    chunk = max(1, min(250, args.mutations // jobs or 1))
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(jobs) as pool:
        futures = [
            pool.submit(_run_chunk, args.seed, start, min(chunk, args.mutations - start), kinds, args.huge_states)
            for start in range(0, args.mutations, chunk)
        ]
        for future in futures:
            results += future.result()
            print(f"\r{len(results)}/{args.mutations} mutations", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    elapsed = time.perf_counter() - started
    return report(results, elapsed, args)


def report(results: list[dict[str, Any]], elapsed: float, args: argparse.Namespace) -> int:
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        by_kind[r["kind"]][r["label"] if not r["failures"] else "FAILED"] += 1
    outcomes = Counter(r["label"] if not r["failures"] else "FAILED" for r in results)
    print(f"{len(results)} mutations (seed {args.seed}) in {elapsed:.1f} s, {args.jobs} job(s)\n")
    print(f"{'kind':22} {'total':>6} {'loaded':>7} {'rejected':>9} {'FAILED':>7}")
    for kind in sorted(by_kind):
        c = by_kind[kind]
        known = "  (known bug)" if kind in fuzz.KNOWN_BUG_KINDS else ""
        print(f"{kind:22} {c.total():>6} {c['loaded']:>7} {c['rejected']:>9} {c['FAILED']:>7}{known}")
    print(f"{'all':22} {len(results):>6} {outcomes['loaded']:>7} {outcomes['rejected']:>9} {outcomes['FAILED']:>7}\n")

    codes = Counter(code for r in results for code in set(r["codes"]))
    print("problem codes (files reporting each): " + ", ".join(f"{c} {n}" for c, n in codes.most_common()) + "\n")

    signatures: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        for failure in r["failures"]:
            signatures[(r["kind"], failure.split(":")[0] + ":" + _first_words(failure))].append(r)
    unexpected = 0
    if signatures:
        print("broken promises (kind, failure: count, first reproduction):")
        for (kind, signature), hits in sorted(signatures.items()):
            known = kind in fuzz.KNOWN_BUG_KINDS
            unexpected += 0 if known else len(hits)
            first = hits[0]
            print(f"  {'known  ' if known else 'NEW    '}{kind}: {signature}: {len(hits)}")
            print(f"         {first['note']} -> --show {first['index']} --seed {args.seed}")
        print()
    slowest = sorted(results, key=lambda r: -r["seconds"])[:5]
    print("slowest files (load + validate): " + "; ".join(f"{r['kind']} {r['seconds']:.2f} s" for r in slowest))
    if args.scaling:
        scaling()
    failed = unexpected or (args.strict and signatures)
    print(f"\n{'FAIL' if failed else 'OK'}: {unexpected} unexpected broken promise(s)")
    return 1 if failed else 0


def _first_words(failure: str) -> str:
    rest = failure.split(":", 1)[1] if ":" in failure else failure
    return " ".join(rest.split()[:4])


def scaling() -> None:
    import warnings

    import llm_fsm
    from llm_fsm.authoring.analysis import find_warnings

    print("\nstatic analysis on reachable chains (load, find_warnings):")
    for states in (1_000, 2_000, 5_000):
        data = fuzz.reachable_chain(fuzz.examples()[0], states)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            definition = llm_fsm.load(data)
            loaded = time.perf_counter()
            find_warnings(definition)
            analysed = time.perf_counter()
        print(f"  {states:>5} states: load {loaded - started:.2f} s, find_warnings {analysed - loaded:.2f} s")


def show(args: argparse.Namespace) -> int:
    kinds = tuple(fuzz.MUTATORS) if args.all_kinds else fuzz.SAFE_KINDS
    fuzz.HUGE_STATES = args.huge_states
    mutation = fuzz.mutation_at(args.seed, args.show, kinds)
    path = Path(tempfile.gettempdir()) / f"fuzz-{args.seed}-{args.show}-{mutation.kind}.json"
    path.write_bytes(mutation.data)
    print(f"{mutation}\nwritten to {path}\nreproduce: llm-fsm validate {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutations", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--huge-states", type=int, default=fuzz.HUGE_STATES, help="states of a 'huge' file")
    parser.add_argument(
        "--safe-kinds-only",
        dest="all_kinds",
        action="store_false",
        help="leave out the kinds that hit known bugs (included by default, and reported as known)",
    )
    parser.add_argument("--strict", action="store_true", help="known bugs fail the run too")
    parser.add_argument("--scaling", action="store_true", help="also time the analysis of 1,000-5,000 state chains")
    parser.add_argument("--show", type=int, metavar="INDEX", help="write mutation INDEX to a file and stop")
    args = parser.parse_args()
    return show(args) if args.show is not None else run(args)


if __name__ == "__main__":
    sys.exit(main())
