"""Ours on several checkouts, compared in small alternating batches: what each commit of a series bought.

    python benchmarks/bench_trees.py NAME=PATH [NAME=PATH ...] [--batches 12] [--size 25] [--sides litellm,ours]

The measured path is ``bench_peer.py``'s own (``run_ours_litellm``: ours through :class:`LiteLLMClient` into a
replaced ``litellm.completion``; ``run_ours``: through :class:`ScriptedLLM`), on the same definition and replies.
``bench_peer.py`` gives each round a fresh process, so on a machine shared with other work a tree measured a
minute after another meets another load; here every (tree, side) keeps one process, started one after the other
and warmed up, and the driver asks each in turn for a batch of ``size`` conversations, ``batches`` times (the order
reversed every other time), so neighbouring trees are measured seconds apart. Figures: the median of the batch
medians of a turn's time (minus the time inside the fake model), per tree and side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_peer  # noqa: E402  (this folder, put on the path above)


def serve(side: str, job: str) -> None:
    """A worker: warm up, say ``ready``, then run one batch of conversations per line read."""
    import litellm

    spec = json.loads(Path(job).read_text())
    run = {"ours": bench_peer.run_ours, "litellm": bench_peer.run_ours_litellm}[side]
    real = litellm.completion  # run_ours_litellm replaces it: each batch starts from litellm's own
    run(spec["definition"], spec["replies"], spec["lines"], 20)
    print("ready", flush=True)
    for line in sys.stdin:
        litellm.completion = real
        result = run(spec["definition"], spec["replies"], spec["lines"], int(line))
        if result["states"] != spec["states"]:
            raise RuntimeError(f"walked {result['states']}, expected {spec['states']}")
        print(json.dumps(result["turns"]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", metavar="NAME=PATH")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--size", type=int, default=25, help="conversations per batch")
    parser.add_argument("--sides", default="litellm,ours")
    parser.add_argument("--worker", nargs=2, metavar=("SIDE", "JOB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve(*args.worker)
        return
    source = bench_peer.ROOT / "fsm_definitions" / "order_flow.json"
    replies, lines, states = bench_peer.script(source)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with tempfile.TemporaryDirectory() as folder:
        definition = Path(folder) / "order_flow.llm-fsm.json"
        definition.write_text(json.dumps(bench_peer.peer_definition(source), indent=2))
        job = Path(folder) / "job.json"
        job.write_text(
            json.dumps({"definition": str(definition), "replies": replies, "lines": lines, "states": states})
        )
        workers: dict[str, subprocess.Popen[str]] = {}
        try:
            for name, _, path in (t.partition("=") for t in args.trees):
                for side in args.sides.split(","):
                    env = {**clean, "PYTHONPATH": str(Path(path).resolve())}
                    command = [sys.executable, __file__, "--worker", side, str(job)]
                    worker = subprocess.Popen(
                        command, env=env, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                    )
                    workers[f"{name}/{side}"] = worker
                    if worker.stdout is None or worker.stdout.readline().strip() != "ready":  # one starting at a time
                        raise RuntimeError(f"{name}/{side} did not start")
            medians: dict[str, list[float]] = {key: [] for key in workers}
            for batch in range(args.batches):
                for key in list(workers) if batch % 2 == 0 else list(reversed(workers)):
                    worker = workers[key]
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(f"{args.size}\n")
                    worker.stdin.flush()
                    medians[key].append(statistics.median(json.loads(worker.stdout.readline())))
        finally:
            for worker in workers.values():
                if worker.stdin is not None:
                    worker.stdin.close()
                worker.wait()
    for key, values in medians.items():
        print(f"{key:>32}: {statistics.median(values) * 1000:.3f} ms/turn (median of {len(values)} batch medians)")


if __name__ == "__main__":
    main()
