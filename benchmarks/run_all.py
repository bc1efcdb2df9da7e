"""Run every benchmark and write the figures to ``benchmarks/RESULTS.md``.

    python benchmarks/run_all.py [--quick]

Each figure with a natural baseline is a ratio measured in the same run. The machine is shared and
noisy: figures are medians. ``--quick`` uses fewer rounds (for a smoke run, not for the record).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks import (  # noqa: E402
    bench_async,
    bench_contention,
    bench_corrections,
    bench_history,
    bench_openai_load,
    bench_peer,
    bench_prefix,
    bench_startup,
    bench_store,
    bench_tools,
    bench_turn,
    bench_validate,
)
from tests.fake_openai import FakeOpenAI  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        cpu = model
    except (OSError, StopIteration):
        pass
    return (
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, {os.cpu_count()} CPUs ({cpu})"
    )


def turn_section(rounds: int) -> list[str]:
    path = bench_turn.largest_example()
    figures = bench_turn.overhead(path, rounds)
    baseline = bench_turn.litellm_baseline()
    return [
        "## 1. Runtime overhead per turn (scripted model)",
        "",
        f"On `{path.name}` (the largest example), everything a turn does except the model call:",
        "",
        "| median | p95 | turns | baseline: one `litellm.completion(mock_response=...)` | overhead / baseline |",
        "|---|---|---|---|---|",
        f"| {figures['median_ms']:.3f} ms | {figures['p95_ms']:.3f} ms | {figures['turns']:.0f} "
        f"| {baseline:.3f} ms | {figures['median_ms'] / baseline:.3f} |",
        "",
    ]


def prompt_section() -> list[str]:
    import litellm

    path = bench_turn.largest_example()
    requests = bench_turn.prompt_growth(path, 100)
    rows = ["## 2. Prompt size over a 100-turn conversation", "",
            "| turn | characters | tokens (`litellm.token_counter`, gpt-4o-mini) |", "|---|---|---|"]  # fmt: skip
    for turn in (1, 5, 10, 25, 50, 100):
        messages = requests[turn - 1]
        tokens = litellm.token_counter(model="gpt-4o-mini", messages=messages)
        rows.append(f"| {turn} | {bench_turn.characters(messages)} | {tokens} |")
    after = [bench_turn.characters(m) for m in requests[10:]]
    rows += ["", f"From turn 11 to 100 the prompt varies by {max(after) - min(after)} characters "
             f"(min {min(after)}, max {max(after)}): flat once the history window is full.", ""]  # fmt: skip
    return rows


def calls_section() -> list[str]:
    path = bench_turn.largest_example()
    return [
        "## 3. LLM calls per turn",
        "",
        "| replies | calls per turn |",
        "|---|---|",
        f"| all valid | {bench_turn.calls_per_turn(path, 0):.2f} |",
        f"| 20 % invalid (each corrected by one call) | {bench_turn.calls_per_turn(path, 0.2):.2f} |",
        "",
    ]


def startup_section(runs: int) -> list[str]:
    command = bench_startup.llm_fsm()
    figures = {
        'python -c "import litellm"': bench_startup.timed([sys.executable, "-c", "import litellm"], runs),
        "llm-fsm --help": bench_startup.timed([*command, "--help"], runs),
        "llm-fsm validate fsm_definitions/order_flow.json": bench_startup.timed(
            [*command, "validate", "fsm_definitions/order_flow.json"], runs
        ),
    }
    server = FakeOpenAI().start()
    try:
        banner, prompt = bench_startup.chat_times(server, max(3, runs // 2))
    finally:
        server.stop()
    figures["llm-fsm chat: banner shown (ready)"] = banner
    figures["llm-fsm chat: first prompt, after the opening message (import + 1 call)"] = prompt
    base = figures['python -c "import litellm"']
    rows = ["## 4. CLI startup", "", "| command | median | / import litellm |", "|---|---|---|"]
    rows += [f"| {name} | {value:.3f} s | {value / base:.2f} |" for name, value in figures.items()]
    return [*rows, ""]


def async_section(rounds: int, sizes: list[int]) -> list[str]:
    figures = bench_async.measure(sizes, rounds)
    rows = ["## 5. Throughput: concurrent conversations in one event loop", "",
            f"Local server answering after {figures['delay_ms']:.0f} ms, in its own process. One turn per "
            "conversation, all at once; baseline: the same number of bare `litellm.acompletion` calls with "
            "the same messages, at the same concurrency, interleaved with the runtime's rounds.", "",
            "| N | runtime turns/s | bare calls/s | ratio (target ≥ 0.85) |", "|---|---|---|---|"]  # fmt: skip
    for n, runtime, bare in figures["throughput"]:  # type: ignore[attr-defined]
        rows.append(f"| {n} | {runtime:.1f} | {bare:.1f} | {runtime / bare:.2f} |")
    rows += ["", "## 6. Streaming", "",
             f"Server waits {figures['delay_ms']:.0f} ms, then streams the reply in 8-character chunks.", "",
             "| first message character | end of turn |", "|---|---|",
             f"| {figures['stream_first_ms']:.1f} ms | {figures['stream_total_ms']:.1f} ms |", ""]  # fmt: skip
    return rows


def store_section(reps: int) -> list[str]:
    process, redis_url = bench_store.start_redis()
    rows = ["## 7. Store save + load per turn", "",
            "| store | save @10 | save @1000 | ratio | load @10 | load @1000 | ratio |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as folder:
            urls = {"memory": "memory:", "file": f"file://{folder}/f", "sqlite": f"sqlite://{folder}/c.db"}
            if redis_url:
                urls["redis"] = redis_url
            for name, url in urls.items():
                s10, l10 = bench_store.measure(url, 10, reps)
                s1000, l1000 = bench_store.measure(url, 1000, reps)
                rows.append(f"| {name} | {s10:.3f} ms | {s1000:.3f} ms | {s1000 / s10:.2f} "
                            f"| {l10:.3f} ms | {l1000:.3f} ms | {l1000 / l10:.2f} |")  # fmt: skip
    finally:
        if process is not None:
            process.terminate()
    return [*rows, "", "A save appends one turn (SQLite, Redis) or rewrites one file (file store); a load reads the "
            "tail of the history a turn needs (the file store: its whole file).", ""]  # fmt: skip


def _title(line: str) -> str:
    """A section's title without its number: "## 12. Exactly once" -> "Exactly once"."""
    return line[3:].split(" ", 1)[-1].strip() if line[3:4].isdigit() else line[3:].strip()


def kept_sections(previous: str, written: list[str]) -> list[str]:
    """The sections of the previous results that this run does not write (measured by hand or by
    slower scripts, such as the mutation runs), kept whole and in their order, with the comment above each."""
    generated = {_title(line) for line in written if line.startswith("## ")}
    kept: list[str] = []
    block: list[str] = []
    keep = False
    for line in previous.splitlines():
        starts = line.startswith("## ") or (line.startswith("<!-- section") and line.endswith("-->"))
        # a section's comment stays with the section under it
        commented = bool(block) and block[0].startswith("<!-- section") and not any(b.strip() for b in block[1:])
        if starts and not (commented and line.startswith("## ")):
            if keep:
                kept += block
            block, keep = [], False
        block.append(line)
        if line.startswith("## "):
            keep = _title(line) not in generated
    if keep:
        kept += block
    return kept


def in_order(lines: list[str]) -> list[str]:
    """The results with their numbered sections in the order of their numbers (a section's comment stays
    above it); what comes before the first section stays first, and unnumbered sections go last."""
    head: list[str] = []
    sections: list[tuple[float, list[str]]] = []
    for line in lines:
        commented = bool(sections) and sections[-1][1][0].startswith("<!-- section")
        if line.startswith("## ") and commented and not any(s.strip() for s in sections[-1][1][1:]):
            sections[-1][1].append(line)  # the heading under its comment: the number is the heading's
            sections[-1] = (_number(line), sections[-1][1])
        elif line.startswith("## ") or (line.startswith("<!-- section") and line.endswith("-->")):
            sections.append((_number(line), [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            head.append(line)
    ordered = sorted(sections, key=lambda s: s[0])  # stable: equal numbers keep their order
    return head + [line for _, block in ordered for line in _spaced(block)]


def _spaced(block: list[str]) -> list[str]:
    """A section that ends with one blank line, whatever came after it before."""
    while block and not block[-1].strip():
        block = block[:-1]
    return [*block, ""]


def _number(line: str) -> float:
    digits = line[3:].split(".", 1)[0] if line.startswith("## ") else ""
    return float(digits) if digits.isdigit() else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = parser.parse_args()
    quick = args.quick
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    lines = [
        "# Benchmark results",
        "",
        f"- Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; commit {commit.strip() or 'unknown'}",
        f"- Machine: {machine()}",
        f"- Command: `python benchmarks/run_all.py{' --quick' if quick else ''}` (medians; the machine is shared)",
        "",
    ]
    sections = [
        lambda: turn_section(100 if quick else 300),
        prompt_section,
        calls_section,
        lambda: startup_section(3 if quick else 7),
        lambda: bench_startup.section(quick),
        lambda: async_section(1 if quick else 3, [100, 500, 1000]),
        lambda: store_section(10 if quick else 30),
        lambda: bench_contention.section(1 if quick else 3, 1 if quick else 3, [10, 50, 200]),
        lambda: bench_validate.section(1 if quick else 3),
        lambda: bench_tools.section(100 if quick else 300),
        lambda: bench_prefix.section(quick),
        lambda: bench_peer.section(quick),
        lambda: bench_history.section(quick),
        lambda: bench_openai_load.section(quick),
        lambda: bench_corrections.section(quick),
    ]
    for section in sections:
        part = section()
        print("\n".join(part), flush=True)
        lines += part
    output = Path(args.output)
    previous = output.read_text(encoding="utf-8") if output.exists() else ""
    lines = in_order(lines + kept_sections(previous, lines))
    output.write_text("\n".join(lines), encoding="utf-8")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
