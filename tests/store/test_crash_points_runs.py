"""Crash points of a run: a three-step workflow run is killed (SIGKILL) at every boundary it passes, in every store.

The run (gather, draft, check: three acting states, each calling one tool whose ``result_key`` its way out needs,
gather's by an automatic move) is taken from a stored conversation two ways: with
``stored.run(lambda c: list(c.run()))`` once the person's turn that enters gather is stored, and as the person's
message itself sent with an idempotency key (its run: that turn and the three steps). A forked child takes it and
kills itself at its n-th boundary: before and after each model call, each tool run and each save (the checkpoint
before every step, then the final save). The parent then does what a restarted process or a client does: the
same ``run()``, or the same message with the same key, which go on from the step the store holds. It checks the
promises of issue 48:

- the store holds the conversation before the run or after one of its steps, never a mix;
- no finished step runs again: its tool is not called again, and its model replies are not asked for again (the
  retry asks for the replies of the steps from the stored one on, no more);
- every tool's effect happens exactly once (a tool called again, in the step the kill interrupted, has the same
  idempotency key and skips it, as a payment API does);
- the retry ends where the uninterrupted run ends.

The forking, the boundaries and the comparison are those of :mod:`tests.store.test_crash_points`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.store import StoredConversation, advance, open_store
from llm_fsm.testing import ScriptedLLM, reply
from tests.store.test_crash_points import IN_ASAVE, LEASE, WAIT, Boundaries, core, forked, lines, url_of

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the harness forks its runs")

WORKFLOW = {
    "name": "report",
    "description": "Gather notes on a topic, draft a report, check it.",
    "initial_state": "ask",
    "tools": {
        "gather": {"description": "Gather notes on a topic", "result_key": "notes"},
        "write": {"description": "Write a draft from the notes", "result_key": "draft"},
        "verify": {"description": "Check a draft", "result_key": "verdict"},
    },
    "states": {
        "ask": {"purpose": "Ask for a topic", "transitions": [{"target_state": "gather", "description": "a topic"}]},
        "gather": {
            "acts": True,
            "purpose": "Gather notes",
            "tools": ["gather"],
            "transitions": [
                {"target_state": "draft", "automatic": True, "conditions": [{"requires_context_keys": ["notes"]}]}
            ],
        },
        "draft": {
            "acts": True,
            "purpose": "Draft the report",
            "tools": ["write"],
            "transitions": [{"target_state": "check", "conditions": [{"requires_context_keys": ["draft"]}]}],
        },
        "check": {
            "acts": True,
            "purpose": "Check the draft",
            "tools": ["verify"],
            "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["verdict"]}]}],
        },
        "done": {"purpose": "Hand the report over"},
    },
}
STEPS = ("gather", "draft", "check")  # the run's steps, in order; "done" waits for a person
TOOL_OF = {"gather": "gather", "draft": "write", "check": "verify"}


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call with an id of its own: the same in a retry, so the stored transcripts compare equal."""
    return {"tool_calls": [{"id": f"call-{tool}", "name": tool, "arguments": arguments}]}


# the replies each state's step asks for, in order: gather's tool round fulfils its automatic move (one call)
SCRIPT = {
    "gather": [call("gather", topic="quantum")],
    "draft": [call("write", notes=["a note on quantum"]), reply("check", "Drafted.")],
    "check": [call("verify", draft="# quantum"), reply("done", "Checked: it holds.")],
}


class ByState(ScriptedLLM):
    """Answers each call with the next reply scripted for the call's state (a retry that goes on at a step gets
    that step's replies); a state asked for more replies than it has took a step twice."""

    def __init__(
        self, boundary: Callable[[str], None] | None = None, script: dict[str, list[Any]] | None = None
    ) -> None:
        super().__init__()
        self.script = {state: deque(replies) for state, replies in (script or SCRIPT).items()}
        self.boundary = boundary or (lambda name: None)

    def complete(self, request: Any) -> Any:
        self.boundary(f"before model call ({request.state})")
        left = self.script[str(request.state)]
        assert left, f"state {request.state} asked for a reply again: one of its step's replies was applied twice"
        self.add(left.popleft())
        response = super().complete(request)
        self.boundary(f"after model call ({request.state})")
        return response

    async def acomplete(self, request: Any) -> Any:
        return self.complete(request)


def watch_saves(store: Any, boundary: Callable[[str], None], saved: list[Any] | None = None) -> None:
    """Name each save by the state it saves (a step's checkpoint, or the final save in "done"); ``saved`` gets
    the core of each."""
    save, asave = store.save, store.asave

    def watched(conversation_id: str, snapshot: Any, **options: Any) -> int:
        if IN_ASAVE.get():  # asave's own save, in a thread: counted once, by asave
            return save(conversation_id, snapshot, **options)
        boundary(f"before save ({snapshot.state})")
        version = save(conversation_id, snapshot, **options)
        if saved is not None:
            saved.append(core(snapshot))
        boundary(f"after save ({snapshot.state})")
        return version

    async def awatched(conversation_id: str, snapshot: Any, **options: Any) -> int:
        boundary(f"before save ({snapshot.state})")
        IN_ASAVE.set(True)  # this task's context, copied into asave's thread
        try:
            version = await asave(conversation_id, snapshot, **options)
        finally:
            IN_ASAVE.set(False)
        boundary(f"after save ({snapshot.state})")
        return version

    store.save, store.asave = watched, awatched


def tool_hooks(effects: Path, boundary: Callable[[str], None] | None = None) -> Hooks:
    """The run's tools: each call is written to ``effects.calls``; its effect to ``effects``, once per key."""
    hooks = Hooks()
    passed = boundary or (lambda name: None)

    def apply(tool: str, key: str) -> None:
        passed(f"before tool {tool}")
        with Path(f"{effects}.calls").open("a") as calls:
            calls.write(json.dumps({"tool": tool, "key": key}) + "\n")
        seen = {e["key"] for e in lines(effects)}  # one process runs the tools at a time: no lock needed
        if key not in seen:
            with effects.open("a") as f:
                f.write(json.dumps({"tool": tool, "key": key}) + "\n")
        passed(f"after tool {tool}")

    @hooks.tool("gather")
    def gather(topic: str, idempotency_key: str) -> list[str]:
        apply("gather", idempotency_key)
        return [f"a note on {topic}"]

    @hooks.tool("write")
    def write(notes: list[str], idempotency_key: str) -> str:
        apply("write", idempotency_key)
        return "# " + notes[0].removeprefix("a note on ")

    @hooks.tool("verify")
    def verify(draft: str, idempotency_key: str) -> str:
        apply("verify", idempotency_key)
        return f"{draft} holds"

    return hooks


def stored(store: Any, cid: str, llm: Any, hooks: Hooks) -> StoredConversation:
    definition = llm_fsm.load(WORKFLOW)

    def make(snapshot: Any) -> llm_fsm.Conversation:
        if snapshot is None:
            return llm_fsm.Conversation(definition, llm, hooks=hooks)
        return llm_fsm.Conversation.restore(snapshot, definition, llm, hooks=hooks)

    return StoredConversation(store, cid, make, wait=WAIT)


def go_on(conversation: StoredConversation, is_async: bool) -> list[Any]:
    """The run from the stored step, as a restarted process takes it: ``run()`` with no text."""
    if not is_async:
        return conversation.run(lambda c: list(c.run()))

    async def steps(c: llm_fsm.Conversation) -> list[Any]:
        return [result async for result in c.arun()]

    return asyncio.run(conversation.arun(steps))


def keyed_message(conversation: StoredConversation, is_async: bool) -> list[Any]:
    """The person's message that starts the run, with an idempotency key: sent again as it was, it goes on with
    the run saved part-way (see :mod:`llm_fsm.store.idempotency`)."""
    key = f"{conversation.id}-run"
    if is_async:
        result = asyncio.run(conversation.arun(lambda c: c.asend("quantum"), idempotency_key=key))
    else:
        result = conversation.run(lambda c: c.send("quantum"), idempotency_key=key)
    return [*result.steps, result]


@dataclass(frozen=True)
class Scenario:
    """The turns before the run (``(text or None for the opening, replies)``, each alone), the run as the killed
    process takes it and as the retry does (``take``), and the states of its steps."""

    name: str
    setup: list[tuple[str | None, list[Any]]]
    take: Callable[[StoredConversation, bool], list[Any]]
    steps: tuple[str, ...]


OPENING = (None, [reply("ask", "Your topic?")])
ENTER = reply("gather", "On it.", topic="quantum")  # the person's turn that enters the run's acting states
SCENARIOS = [
    Scenario("gone on with run()", [OPENING, ("quantum", [ENTER])], go_on, STEPS),
    Scenario("a keyed message sent again", [OPENING], keyed_message, ("ask", *STEPS)),
]


def set_up(store: Any, cid: str, effects: Path, scenario: Scenario = SCENARIOS[0]) -> Any:
    """The setup's turns, each alone (a message's run stops after its first step): the stored core."""
    definition = llm_fsm.load(WORKFLOW)
    hooks = tool_hooks(effects)
    for text, replies in scenario.setup:
        step: Callable[[Any], Any] = (lambda c: c.start()) if text is None else (lambda c, t=text: next(c.run(t)))
        advance(store, cid, definition, ScriptedLLM(replies), text, hooks=hooks, action=step)
    snapshot = store.load(cid).snapshot
    assert snapshot.state == scenario.steps[0]  # the run's steps are still to come
    return core(snapshot)


def child(scenario: Scenario, url: str, cid: str, folder: Path, kill_at: int, is_async: bool) -> None:
    """In a forked process: the run, every boundary watched (the store opened anew, its lease short)."""
    boundary = Boundaries(folder / f"{cid}.points", kill_at)
    store = open_store(url)
    store.lease = LEASE
    watch_saves(store, boundary)
    hooks = tool_hooks(folder / f"{cid}.effects", boundary)
    scenario.take(stored(store, cid, ByState(boundary, script_of(scenario)), hooks), is_async)


def script_of(scenario: Scenario) -> dict[str, list[Any]]:
    return {**SCRIPT, "ask": [ENTER]} if "ask" in scenario.steps else SCRIPT


def uninterrupted(
    url: str, folder: Path, scenario: Scenario = SCENARIOS[0]
) -> tuple[list[str], list[Any], list[str | None]]:
    """The run whole, in this process: the boundaries it passes, the core of each save, its model calls' states."""
    store, cid = open_store(url), f"u{uuid.uuid4().hex[:12]}"
    set_up(store, cid, folder / f"{cid}.effects", scenario)
    boundary, saved = Boundaries(folder / f"{cid}.points", None), []
    llm = ByState(boundary, script_of(scenario))
    watch_saves(store, boundary, saved)
    results = scenario.take(stored(store, cid, llm, tool_hooks(folder / f"{cid}.effects", boundary)), False)
    assert [r.previous_state for r in results] == list(scenario.steps) and results[-1].state == "done"
    assert all(left == deque() for left in llm.script.values())  # every scripted reply was used, once
    return (folder / f"{cid}.points").read_text().splitlines(), saved, [r.state for r in llm.requests]


@dataclass
class Killed:
    """What one kill left and what its retry made: the stored cores before the run, after the kill and at the
    end, the states of the retry's model calls, and the file of the tools' effects."""

    before: Any
    held: Any
    final: Any
    asked: list[str | None]
    effects: Path


def kill_and_retry(scenario: Scenario, url: str, folder: Path, kill_at: int, is_async: bool, unlock: bool) -> Killed:
    """The run killed at its ``kill_at``-th boundary, then taken again (``unlock``: after the dead run's lock is
    force-released, as an operator would, rather than waited out)."""
    store, cid = open_store(url), f"c{uuid.uuid4().hex[:12]}"
    effects = folder / f"{cid}.effects"
    before = set_up(store, cid, effects, scenario)
    errors = folder / f"{cid}.error"
    status = forked(lambda: child(scenario, url, cid, folder, kill_at, is_async), errors)
    assert status == -signal.SIGKILL, errors.read_text() if errors.exists() else status
    held = core(store.load(cid).snapshot)
    if unlock:
        store.unlock(cid)
    llm = ByState(script=script_of(scenario))
    scenario.take(stored(store, cid, llm, tool_hooks(effects)), is_async)  # the retry takes the lock within a lease
    return Killed(before, held, core(store.load(cid).snapshot), [r.state for r in llm.requests], effects)


def check_effects(scenario: Scenario, effects: Path, held_state: str, where: str) -> tuple[int, int, int]:
    """Each tool's effect happened once; a tool of a step saved before the kill was not even called again. The
    most effects of one tool, the most calls of one tool, and the calls again of finished steps' tools."""
    steps = scenario.steps
    finished = steps[: steps.index(held_state)] if held_state in steps else steps
    made = Counter(e["tool"] for e in lines(effects))
    called = Counter(e["tool"] for e in lines(Path(f"{effects}.calls")))
    again = {tool: called[tool] - 1 for tool in (TOOL_OF[step] for step in finished if step in TOOL_OF)}
    assert made == Counter(TOOL_OF.values()), f"{where}: the tools' effects happened {dict(made)} times"
    assert not any(again.values()), f"{where}: tools of saved steps were called again: {again}"
    return max(made.values()), max(called.values()), sum(again.values())


# every store, sync; the async run (arun, asave) on one of them
CASES = [("file", False), ("sqlite", False), ("redis", False), ("postgresql", False), ("sqlite", True)]
# where the retry waits out the dead run's lease (about 0.6 s a kill); elsewhere it force-releases the lock, so that
# every kill point costs little: waiting a lease out is the same for a run as for a turn, and the turn harness
# waits it out on every store
LEASE_WAITED = ((SCENARIOS[0].name, "sqlite", False),)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "is_async"), CASES, ids=[f"{k}{'-async' if a else ''}" for k, a in CASES])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_run_killed_at_any_boundary_goes_on_from_its_stored_step_and_runs_no_finished_step_again(
    scenario: Scenario, kind: str, is_async: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_of(kind, tmp_path, request)
    points, saved, states = uninterrupted(url, tmp_path, scenario)
    # each step's tool; a checkpoint before each step after a person's (gone on with run(), the first one's saves
    # what the store holds), then the final save
    assert [p for p in points if p.startswith("before tool")] == [f"before tool {TOOL_OF[s]}" for s in STEPS]
    assert [p for p in points if p.startswith("before save")] == [f"before save ({s})" for s in (*STEPS, "done")]
    for kill_at in range(1, len(points) + 1):
        unlock = (scenario.name, kind, is_async) not in LEASE_WAITED
        killed = kill_and_retry(scenario, url, tmp_path, kill_at, is_async, unlock)
        row = {"scenario": scenario.name, "store": f"{kind}{' (async)' if is_async else ''}"}
        TABLE.append(row | check_kill(scenario, killed, points[:kill_at], saved, states))


def check_kill(
    scenario: Scenario, killed: Killed, passed: list[str], saved: list[Any], states: list[str | None]
) -> dict[str, Any]:
    """What a kill after the boundaries ``passed`` left and what its retry did, checked: a row of the table."""
    where = f"killed {passed[-1]} (boundary {len(passed)})"
    held = killed.held
    assert held == killed.before or held in saved, f"{where}: the store holds a mix of two steps"
    held_state = held["state"]  # the step the retry goes on at ("done": none left)
    # every save the run passed stands: a kill after a step's checkpoint goes on at that step
    saves = [p.removeprefix("after save (")[:-1] for p in passed if p.startswith("after save")]
    assert held_state == (saves or [scenario.steps[0]])[-1], f"{where}: the store went on from {held_state}"
    assert killed.final == saved[-1], f"{where}: the retry did not end where the run ends"
    # the retry asks for the replies of the steps from the stored one on: none of a finished step
    left = states[states.index(held_state) :] if held_state in states else []
    assert killed.asked == left, f"{where}: the retry asked {killed.asked}, not the replies of the steps left"
    effects, calls, again = check_effects(scenario, killed.effects, held_state, where)
    return {"point": passed[-1], "held": held_state, "effects": effects, "calls": calls, "tools_again": again}


TABLE: list[dict[str, Any]] = []  # a row per kill, for LLM_FSM_RUN_CRASH_TABLE (benchmarks/run_crash_points.py)


@pytest.fixture(scope="module", autouse=True)
def table() -> Any:
    yield
    path = os.environ.get("LLM_FSM_RUN_CRASH_TABLE")
    if path and TABLE:
        Path(path).write_text(json.dumps(TABLE, indent=1))
