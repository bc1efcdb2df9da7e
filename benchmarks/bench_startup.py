"""Startup of the command line, against `python -c "import litellm"`, measured in one run.

    python benchmarks/bench_startup.py [--runs 7]

For each command: the median wall time of several runs. For chat: the time until the banner is
printed (the program is ready) and until the first prompt (after the opening message, which needs
litellm and one model call to the local OpenAI-compatible test server).

    python benchmarks/bench_startup.py --opening [--runs 9] [--old /tmp/old-tree]

Chat's first prompt with a state's own opening (no model call) against a model-written one, and with
``--old`` the checkout at OLD (before states had openings), the commands alternated round by round.
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
    """Banner and first prompt of a chat whose opening the model writes (see :func:`opening_times` for
    one the definition writes)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return _chat_times(server, runs, model_written(Path(folder)))


def _chat_times(server: FakeOpenAI, runs: int, definition: Path) -> tuple[float, float]:
    banners, prompts = [], []
    for _ in range(runs):
        server.add(json.dumps(OPENING_REPLY))
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


# -- chat's first prompt, with a state's own opening and with one the model writes ---------------

OPENING_REPLY = {  # what the local server answers for a model-written opening
    "transition": {"target_state": "greeting", "context_update": {}},
    "message": "Hi there, I'm Sunny! What should I call you?",
    "reasoning": "Opening the conversation.",
}


def tree_command(tree: Path) -> tuple[list[str], dict[str, str]]:
    """``llm-fsm`` from the checkout at ``tree`` (its code, whatever is installed), and its environment:
    bytecode is written and read, as an installed package has it (with PYTHONDONTWRITEBYTECODE every start
    would compile each module again, a third of the start on a loaded machine)."""
    env = {k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return [sys.executable, str(tree / "cli.py")], env | {"PYTHONPATH": str(tree)}


def model_written(folder: Path) -> Path:
    """``small_talk.json`` without its state's own opening: the model writes it."""
    data = json.loads((ROOT / "fsm_definitions" / "small_talk.json").read_text(encoding="utf-8"))
    for state in data["states"].values():
        state.pop("opening", None)
    data.pop("$schema", None)
    path = folder / "small_talk_model_opening.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# commands run in the same rounds, to read the load by: their wall time (banner and prompt columns) and CPU time
CALIBRATION = {"python -c pass": "pass", 'python -c "import litellm"': "import litellm"}


def run_once(args: list[str]) -> tuple[float, float, float]:
    """``args`` run to its end: its wall time (twice, as banner and prompt) and its CPU time."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, capture_output=True, env=ENV, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def cpu_seconds(pid: int) -> float:
    """The CPU time a running process has used (all its threads, user and system): what its start costs
    whatever else the machine runs, unlike the wall time (Linux; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def first_prompt(
    command: list[str], env: dict[str, str], definition: Path, server: FakeOpenAI, home: Path
) -> tuple[float, float, float]:
    """Seconds from launching ``chat`` until its banner is written, until its first ``you>`` prompt (the
    opening shown), and the CPU seconds it used until that prompt."""
    args = [*command, "chat", str(definition), "-m", "openai/x", "--api-base", server.url, "--api-key", "k"]
    start = time.perf_counter()
    process = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env | {"LLM_FSM_HOME": str(home)}, cwd=ROOT
    )
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    output, banner, seen, cpu = b"", float("nan"), float("nan"), float("nan")
    while time.perf_counter() - start < 60:
        if selector.select(timeout=0.005):
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
            if banner != banner and b"/help" in output:  # nan: not seen yet
                banner = time.perf_counter() - start
            if b"you>" in output:
                seen = time.perf_counter() - start
                cpu = cpu_seconds(process.pid)
                break
    process.kill()
    process.wait()
    return banner, seen, cpu


def opening_times(runs: int, old: Path | None = None) -> dict[str, tuple[float, float, float]]:
    """Median seconds to chat's banner, to its first prompt, and of CPU until that prompt: this tree with the
    static opening and with a model-written one (and ``old``'s tree, which can only have the model write it),
    and ``python -c pass`` (wall time in every column), the commands alternated round by round."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        written = model_written(home)
        static = ROOT / "fsm_definitions" / "small_talk.json"
        new = tree_command(ROOT)
        cases = {"static opening": (*new, static), "model-written opening": (*new, written)}
        if old is not None:
            # the same file without "opening": what small_talk.json was before, the old code's only kind
            cases["before (01ff7f5): model-written opening"] = (*tree_command(old), written)
        times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in [*cases, *CALIBRATION]}
        server = FakeOpenAI().start()
        server.default = json.dumps(OPENING_REPLY)  # the answer to every model-written opening
        try:
            for command, env, definition in cases.values():  # bytecode written, disk cache and store folder warm
                first_prompt(command, env, definition, server, home)
            for _ in range(runs):
                for name, (command, env, definition) in cases.items():
                    times[name].append(first_prompt(command, env, definition, server, home))
                for name, code in CALIBRATION.items():
                    times[name].append(run_once([sys.executable, "-c", code]))
        finally:
            server.stop()
    return {name: _medians(values) for name, values in times.items()}


def _medians(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    banners, prompts, cpus = zip(*values, strict=True)
    return statistics.median(banners), statistics.median(prompts), statistics.median(cpus)


def section(quick: bool) -> list[str]:
    """The RESULTS.md section: chat's first prompt with a static opening against a model-written one."""
    runs = 3 if quick else 9
    figures = opening_times(runs)
    rows = [
        ('static (`"opening"`: no model call)', figures["static opening"]),
        ("model-written (litellm's import and one call)", figures["model-written opening"]),
    ]
    written = figures["model-written opening"][1]
    return [
        "## 16. No model call for a fixed opening (issue 26 §2): chat's first prompt",
        "",
        f"`llm-fsm chat fsm_definitions/small_talk.json` until its banner and its first `you>` prompt (medians "
        f"of {runs} runs, alternated with `python -c pass`); the model-written opening is the same file without "
        "`opening`, answered by the local OpenAI-compatible test server. CPU: the seconds the process used until "
        "the prompt (all threads), which the machine's load changes far less than the wall time. "
        "Target: < 0.5 s to the first prompt with a static opening.",
        "",
        "| opening | banner | first prompt | CPU until the prompt | prompt / model-written |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {banner:.3f} s | {prompt:.3f} s | {cpu:.2f} s | {prompt / written:.3f} |"
            for name, (banner, prompt, cpu) in rows
        ),
        "",
        *(
            f"`{name}` in the same rounds: {wall:.3f} s, CPU {cpu:.2f} s (the machine's load shows in them)."
            for name, (_, wall, cpu) in figures.items()
            if name in CALIBRATION
        ),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--opening", action="store_true", help="only chat's first prompt, static against model-written")
    parser.add_argument("--old", type=Path, help="with --opening: also the checkout at OLD (alternated)")
    args = parser.parse_args()
    if args.opening:
        print(f"{'median s':<48} {'banner':>8} {'prompt':>8} {'cpu':>8}")
        for name, (banner, prompt, cpu) in opening_times(args.runs, args.old).items():
            print(f"{name:<48} {banner:>8.3f} {prompt:>8.3f} {cpu:>8.3f}")
        return
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
