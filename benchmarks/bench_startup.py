"""Startup of the command line, against `python -c "import litellm"`, measured in one run.

    python benchmarks/bench_startup.py [--runs 7]

For each command: the median wall time of several runs. For chat: the time until the banner is
printed (the program is ready) and until the first prompt (after the opening message, which needs
litellm and one model call to the local OpenAI-compatible test server).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_openai import FakeOpenAI  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def llm_fsm() -> list[str]:
    script = shutil.which("llm-fsm", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, str(ROOT / "cli.py")]


def timed(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, capture_output=True, env=ENV, cwd=ROOT, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def chat_times(server: FakeOpenAI, runs: int) -> tuple[float, float]:
    definition = ROOT / "fsm_definitions" / "small_talk.json"
    first = json.loads((ROOT / "fsm_definitions" / "scripts" / "small_talk.json").read_text())["replies"][0]
    banners, prompts = [], []
    for _ in range(runs):
        server.add(json.dumps(first))
        args = [*llm_fsm(), "chat", str(definition), "-m", "openai/x", "--api-base", server.url, "--api-key", "k"]
        start = time.perf_counter()
        process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV, cwd=ROOT)
        banner = prompt = None
        output = b""
        selector = selectors.DefaultSelector()
        assert process.stdout is not None
        selector.register(process.stdout, selectors.EVENT_READ)
        while prompt is None and time.perf_counter() - start < 60:
            if selector.select(timeout=0.01):
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk
                if banner is None and b"/help" in output:
                    banner = time.perf_counter() - start
                if b"tokens" in output:  # the status line under the opening message
                    prompt = time.perf_counter() - start
        process.kill()
        process.wait()
        banners.append(banner or float("nan"))
        prompts.append(prompt or float("nan"))
    return statistics.median(banners), statistics.median(prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = {
        "python -c pass": timed([sys.executable, "-c", "pass"], args.runs),
        'python -c "import litellm"': timed([sys.executable, "-c", "import litellm"], args.runs),
        "llm-fsm --help": timed([*llm_fsm(), "--help"], args.runs),
        "llm-fsm validate order_flow.json": timed(
            [*llm_fsm(), "validate", "fsm_definitions/order_flow.json"], args.runs
        ),
    }
    server = FakeOpenAI().start()
    try:
        banner, prompt = chat_times(server, max(3, args.runs // 2))
    finally:
        server.stop()
    rows["llm-fsm chat: banner shown"] = banner
    rows["llm-fsm chat: first prompt (after the opening message)"] = prompt
    base = rows['python -c "import litellm"']
    print(f"{'command':<58} {'median s':>9} {'/ import litellm':>17}")
    for name, value in rows.items():
        print(f"{name:<58} {value:>9.3f} {value / base:>17.2f}")


if __name__ == "__main__":
    main()
