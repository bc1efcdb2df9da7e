"""Kill a process that saves turns, at random moments, many times; check the store after each kill.

    python tests/stress/crash_stores.py --kills 1000 [--store sqlite|file|both] [--seed 1]

The quick version (8 kills per store) runs in the normal test suite.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.store.test_store import crash_rounds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--store", choices=["sqlite", "file", "both"], default="both")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    kinds = ["sqlite", "file"] if args.store == "both" else [args.store]
    for kind in kinds:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite://{folder}/c.db" if kind == "sqlite" else f"file://{folder}/c"
            start = time.perf_counter()
            turns = crash_rounds(url, args.kills, seed=args.seed)
            elapsed = time.perf_counter() - start
            committed = f"{turns} turns committed between kills ({elapsed:.0f} s)"
            print(f"{kind}: {args.kills} SIGKILLs, every reload intact; {committed}")


if __name__ == "__main__":
    main()
