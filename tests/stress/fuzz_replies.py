"""The reply-fuzzing properties of tests/turn/test_fuzz_replies.py with many more examples.

python tests/stress/fuzz_replies.py --examples 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.turn.test_fuzz_replies import any_reply, check_turns, contexts, starts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    args = parser.parse_args()
    count = {"examples": 0, "replies": 0}

    @settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(replies=st.lists(any_reply, min_size=1, max_size=6), start=starts, context=contexts)
    def run(replies: list[str], start: str, context: dict[str, object]) -> None:
        count["examples"] += 1
        count["replies"] += len(replies)
        check_turns(replies, start, context)

    began = time.perf_counter()
    run()
    elapsed = time.perf_counter() - began
    print(
        f"{count['examples']} examples, {count['replies']} model replies fuzzed, all properties held ({elapsed:.0f} s)"
    )


if __name__ == "__main__":
    main()
