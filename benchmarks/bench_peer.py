"""Runtime overhead per turn against the peer, llm-fsm 0.1.1, on the same definition and the same replies.

    python benchmarks/bench_peer.py [--rounds 6] [--conversations 200] [--old /tmp/old-tree] [--tree name=/path ...]

The peer (NikolasMarkou's llm-fsm, GPL) is only run, never copied: this script makes a virtualenv of its
own (``~/.cache/llm-fsm/peer-venv``, or ``$LLM_FSM_PEER_VENV``), installs ``llm-fsm==0.1.1`` into it once,
and drives it in a subprocess whose ``litellm.completion`` is replaced by a fake returning pre-built
replies. Ours runs twice, each in a subprocess too (``PYTHONPATH`` set to this tree, or to ``--old``'s tree for
a before/after figure): through :class:`LiteLLMClient` into the same replaced ``litellm.completion`` (the path
users take: ``NAME+litellm``), and through :class:`ScriptedLLM` with the same replies (our runtime alone).

The definition is ``order_flow`` written in the peer's format (each state gets its ``id``; our-only fields
are dropped, extraction instructions folded into the state's instructions), so the same file loads in
both. The script is ``order_flow``'s without the reply the runtime refuses (the peer has no handler-only
keys), so every turn takes one model call in both and both walk the same states (checked).

A turn's overhead is the time of ``send`` (ours) or ``converse`` (peer) minus the time spent inside the
fake model; the opening turn is left out (ours may open without a call). The peer logs through loguru to
stderr and a file by default: its handlers are removed, so its figure is its runtime without log I/O
(the stricter comparison; we write no log either). Rounds alternate the sides, each a fresh process;
figures are medians over all turns of all rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER = "llm-fsm==0.1.1"
# The peer's State fields (its format 3.0); everything else in our file is ours alone.
PEER_STATE_FIELDS = (
    "description",
    "purpose",
    "transitions",
    "required_context_keys",
    "instructions",
    "example_dialogue",
)
PEER_TRANSITION_FIELDS = ("target_state", "description", "conditions", "priority")


def peer_venv() -> Path:
    """The peer's virtualenv, made and filled on first use; returns its python."""
    folder = Path(os.environ.get("LLM_FSM_PEER_VENV", Path.home() / ".cache" / "llm-fsm" / "peer-venv"))
    python = folder / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; assert m.version('llm-fsm') == '0.1.1'"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    subprocess.run([str(python), "-m", "pip", "install", "-q", PEER], check=True)
    return python


def peer_definition(source: Path) -> dict[str, Any]:
    """``source`` in the peer's format: the fields both runtimes read, each state with its ``id``."""
    data = json.loads(source.read_text(encoding="utf-8"))
    states = {}
    for name, state in data["states"].items():
        kept = {key: state[key] for key in PEER_STATE_FIELDS if key in state}
        kept["transitions"] = [
            portable({k: t[k] for k in PEER_TRANSITION_FIELDS if k in t}) for t in state.get("transitions", [])
        ]
        if state.get("extraction_instructions"):
            kept["instructions"] = f"{kept.get('instructions', '')} {state['extraction_instructions']}".strip()
        states[name] = {"id": name, **kept}
    head = {key: data[key] for key in ("name", "description", "initial_state", "persona")}
    return {**head, "version": "3.0", "states": states}


def portable(value: Any) -> Any:
    """``value`` with ``{"has_context": [keys]}`` written as ``{"!": {"missing": [keys]}}``: the same test in
    standard JsonLogic, since the peer's ``has_context`` takes (object, key) instead."""
    if isinstance(value, list):
        return [portable(item) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"has_context"} and isinstance(value["has_context"], list):
        return {"!": {"missing": value["has_context"]}}
    return {key: portable(item) for key, item in value.items()}


def script(source: Path) -> tuple[list[str], list[str], list[str]]:
    """(replies as JSON text, user lines, the state after each user line): the example's script without
    the replies our runtime refuses, which would cost it a corrective call the peer does not make."""
    scripts = source.parent / "scripts"
    replies = json.loads((scripts / f"{source.stem}.json").read_text())["replies"]
    lines = [x for x in (scripts / f"{source.stem}.txt").read_text().splitlines() if x.strip()]
    data = json.loads(source.read_text())
    opening = data["states"][data["initial_state"]].get("opening")
    if opening is not None:  # our example writes its own opening; both sides here open with a model call
        start = {"transition": {"target_state": data["initial_state"], "context_update": {}}, "message": opening}
        replies = [start, *replies]
    if source.stem == "order_flow":  # reply 6 marks the order as paid: a handler-only key, refused by ours
        replies = replies[:6] + replies[7:]
    states = [r["transition"]["target_state"] for r in replies[1:]]
    return [json.dumps(r) for r in replies], lines, states


# --- workers: each runs in a subprocess and prints {"turns": [seconds...], "states": [...]} ---------------


def run_ours(definition_path: str, replies: list[str], lines: list[str], conversations: int) -> dict[str, Any]:
    import llm_fsm
    from llm_fsm.testing import ScriptedLLM

    class Timed(ScriptedLLM):
        inside = 0.0

        def complete(self, request: Any) -> Any:
            start = time.perf_counter()
            response = super().complete(request)
            Timed.inside += time.perf_counter() - start
            return response

    definition = llm_fsm.load(definition_path)
    turns: list[float] = []
    states: list[str] = []
    for n in range(conversations + 1):  # the first conversation warms up and is not counted
        conversation = llm_fsm.Conversation(definition, Timed(replies))
        conversation.start()
        states = []
        for line in lines:
            before, start = Timed.inside, time.perf_counter()
            conversation.send(line)
            elapsed = time.perf_counter() - start - (Timed.inside - before)
            states.append(conversation.state)
            if n:
                turns.append(elapsed)
    return {"turns": turns, "states": states}


def faked_completion(queue: list[Any]) -> tuple[list[float], Any]:
    """A stand-in for ``litellm.completion`` that returns the next response of ``queue``, and the seconds spent
    inside it so far (a one-item list, read as ``inside[0]``): the time a turn's figure leaves out."""
    inside = [0.0]

    def fake_completion(**kwargs: Any) -> Any:
        start = time.perf_counter()
        response = queue.pop(0)
        inside[0] += time.perf_counter() - start
        return response

    return inside, fake_completion


def run_ours_litellm(definition_path: str, replies: list[str], lines: list[str], conversations: int) -> dict[str, Any]:
    """Ours on the path users take: :class:`LiteLLMClient` builds the request and reads the response, and
    ``litellm.completion`` (replaced, as in the peer's process) returns responses litellm's own ``mock_response``
    built before the clock starts."""
    import litellm

    import llm_fsm

    built = [litellm.completion(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], mock_response=text)
             for text in replies]  # fmt: skip
    queue: list[Any] = []
    inside, fake_completion = faked_completion(queue)
    litellm.completion = fake_completion
    definition = llm_fsm.load(definition_path)
    client = llm_fsm.LiteLLMClient("gpt-4o-mini")
    turns: list[float] = []
    states: list[str] = []
    for n in range(conversations + 1):  # the first conversation warms up and is not counted
        queue[:] = built
        conversation = llm_fsm.Conversation(definition, client)
        conversation.start()
        states = []
        for line in lines:
            before, start = inside[0], time.perf_counter()
            conversation.send(line)
            elapsed = time.perf_counter() - start - (inside[0] - before)
            states.append(conversation.state)
            if n:
                turns.append(elapsed)
    return {"turns": turns, "states": states}


def run_peer(definition_path: str, replies: list[str], lines: list[str], conversations: int) -> dict[str, Any]:
    from types import SimpleNamespace

    import litellm
    from loguru import logger

    queue: list[Any] = []
    inside, fake_completion = faked_completion(queue)
    litellm.completion = fake_completion
    import llm_fsm  # the peer's package: this process runs in its virtualenv
    import llm_fsm.llm

    llm_fsm.llm.completion = fake_completion  # it imported the name before we replaced it
    logger.remove()  # no log I/O: see the module docstring
    built = [SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=text))]) for text in replies]
    fsm = llm_fsm.LLM_FSM(definition_path, model="gpt-4o-mini")
    turns: list[float] = []
    states: list[str] = []
    for n in range(conversations + 1):
        queue[:] = built
        conversation_id, _ = fsm.start_conversation()
        states = []
        for line in lines:
            before, start = inside[0], time.perf_counter()
            fsm.converse(line, conversation_id)
            elapsed = time.perf_counter() - start - (inside[0] - before)
            states.append(fsm.get_current_state(conversation_id))
            if n:
                turns.append(elapsed)
        fsm.delete_conversation(conversation_id)
    return {"turns": turns, "states": states}


def worker(side: str, job: str) -> None:
    spec = json.loads(Path(job).read_text())
    run = {"peer": run_peer, "ours": run_ours, "litellm": run_ours_litellm}[side]
    print(json.dumps(run(spec["definition"], spec["replies"], spec["lines"], spec["conversations"])))


# --- the driver ---------------------------------------------------------------------------------------


def run_side(command: list[str], env: dict[str, str], cwd: str) -> dict[str, Any]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{command[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(rounds: int, conversations: int, trees: dict[str, Path]) -> dict[str, list[float]]:
    """Per-turn seconds for the peer and for each of ``trees`` (name -> checkout), rounds alternating."""
    source = ROOT / "fsm_definitions" / "order_flow.json"
    replies, lines, expected = script(source)
    peer_python = peer_venv()
    times: dict[str, list[float]] = {"peer": [], **{n: [] for name in trees for n in (name, f"{name}+litellm")}}
    with tempfile.TemporaryDirectory() as folder:
        definition = Path(folder) / "order_flow.llm-fsm.json"
        definition.write_text(json.dumps(peer_definition(source), indent=2))
        job = Path(folder) / "job.json"
        spec = {"definition": str(definition), "replies": replies, "lines": lines, "conversations": conversations}
        job.write_text(json.dumps(spec))
        me = str(Path(__file__).resolve())
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        # litellm's price list from the wheel: no network fetch (with retries) as each process starts
        clean["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        sides = {"peer": ([str(peer_python), me, "--worker", "peer", str(job)], clean)}
        for name, tree in trees.items():
            env = {**clean, "PYTHONPATH": str(tree)}
            sides[name] = ([sys.executable, me, "--worker", "ours", str(job)], env)
            # the same tree through LiteLLMClient: the path users take (the figure issue 47 is judged on)
            sides[f"{name}+litellm"] = ([sys.executable, me, "--worker", "litellm", str(job)], env)
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                command, env = sides[name]
                result = run_side(command, env, folder)  # the peer writes a logs/ folder where it runs
                if result["states"] != expected:
                    raise RuntimeError(f"{name} walked {result['states']}, expected {expected}")
                times[name] += result["turns"]
    return times


def section(quick: bool) -> list[str]:
    rounds, conversations = (3, 60) if quick else (6, 200)
    times = measure(rounds, conversations, {"ours": ROOT})
    peer, ours = statistics.median(times["peer"]) * 1000, statistics.median(times["ours"]) * 1000
    through = statistics.median(times["ours+litellm"]) * 1000
    return [
        "## 18. Runtime overhead against the peer, llm-fsm 0.1.1 (issue 26 §4, issue 47)",
        "",
        f"`order_flow` in the peer's format, its scripted replies (one model call a turn, both walk the same "
        f"states), {rounds} alternating rounds of {conversations} conversations of {len(script_lines())} user "
        "turns, each side in its own process; a turn's time minus the time inside the fake model "
        "(`litellm.completion` replaced in the peer's process and in ours through `LiteLLMClient`, returning "
        "responses litellm's `mock_response` built beforehand; `ScriptedLLM` for the last column); peer logging off.",
        "",
        "| peer median / turn | ours through LiteLLMClient | ours / peer (goal ≤ 0.8) | ours with ScriptedLLM |",
        "|---|---|---|---|",
        f"| {peer:.3f} ms | {through:.3f} ms | {through / peer:.2f} | {ours:.3f} ms ({ours / peer:.2f}) |",
        "",
    ]


def script_lines() -> list[str]:
    return script(ROOT / "fsm_definitions" / "order_flow.json")[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("SIDE", "JOB"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--conversations", type=int, default=200, help="per round and side")
    parser.add_argument("--old", type=Path, help="another checkout of ours to measure in the same run")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="more checkouts, named")
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    trees = {"ours": ROOT, **({"old": args.old.resolve()} if args.old else {})}
    trees.update({name: Path(path).resolve() for name, _, path in (t.partition("=") for t in args.tree)})
    times = measure(args.rounds, args.conversations, trees)
    peer = statistics.median(times["peer"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>5}: median {median * 1000:.3f} ms/turn over {len(values)} turns; / peer {median / peer:.2f}")


if __name__ == "__main__":
    main()
