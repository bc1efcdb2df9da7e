"""Crash points: a turn is killed (SIGKILL) at every step boundary it passes, in every store, then retried.

Each case forks a child that runs one turn of a stored conversation and kills itself at its n-th boundary:
before and after each model call, each tool run, each store save (checkpoints and the final save) and each
summary call. The parent then reads what the store holds and retries the turn as a client would (the same
message or resume token, with the same idempotency key), and checks the promises of docs/reliability.md's
"Exactly once" section:

- the stored conversation is the state before the turn or the state after it, never a mix;
- every side effect ran at most once (tools append to a file; keyed tools skip a key they have seen, as a
  payment API does with an idempotency key; the approval tool without a key is run at most once);
- the retry takes the killed turn's lock within its lease, and ends where an uninterrupted turn ends.

``LLM_FSM_CRASH_TABLE=path`` writes the table of all cases (benchmarks/RESULTS.md has one).
"""

from __future__ import annotations

import asyncio
import contextvars
import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.store import aadvance, advance, open_store
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from llm_fsm.testing.scripted import folded_summary

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the harness forks its turns")

LEASE = 0.5  # the killed child's lock lease: the retry must get the lock within it (and a heartbeat's slack)
WAIT = 3 * LEASE
CHILD_DEADLINE = 300.0  # seconds a forked turn may take on a loaded machine before it counts as hung
DATA = Path(__file__).parents[1] / "data" / "subflows"
SHOP = {
    "name": "shop",
    "description": "Look orders up and refund them.",
    "initial_state": "ask",
    "tools": {
        "lookup": {"description": "Find an order", "result_key": "order"},
        "refund": {"description": "Refund an order (the tool takes an idempotency key)", "approval": "always"},
        "refund_unkeyed": {"description": "Refund an order (no key)", "approval": "always"},
    },
    "summaries": {"on_overflow": False, "on_leave": True},  # a summary call in every turn that changes state
    "states": {
        "ask": {
            "purpose": "Ask for the order and look it up",
            "tools": ["lookup", "refund", "refund_unkeyed"],
            "transitions": [
                {"target_state": "found", "description": "known", "conditions": [{"requires_context_keys": ["order"]}]}
            ],
        },
        "found": {"purpose": "Tell the status", "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Say goodbye"},
    },
}
OPEN = reply("ask", "Your order?")


@dataclass(frozen=True)
class Scenario:
    """Setup turns (run whole), then the turn that is killed: ``turn(conversation, token)`` and its replies."""

    name: str
    definition: Callable[[Path], llm_fsm.FSMDefinition]
    setup: list[tuple[str | None, list[Any]]]  # (user text or None for the opening, the turn's replies)
    replies: list[Any]
    turn: Callable[[Any, str | None], Any]
    is_async: bool = False


def _shop(_: Path) -> llm_fsm.FSMDefinition:
    return llm_fsm.load(json.loads(json.dumps(SHOP)))


def _claim(folder: Path) -> llm_fsm.FSMDefinition:
    return llm_fsm.load(folder / "claim.json")


def _resume(conversation: Any, token: str | None) -> Any:
    return conversation.resume(token, {"approved": True})


def _aresume(conversation: Any, token: str | None) -> Any:
    return conversation.aresume(token, {"approved": True})


def _send(text: str) -> Callable[[Any, str | None], Any]:
    return lambda conversation, _: conversation.send(text)


APPROVE = [(None, [OPEN]), ("refund A-1", [tool_calls(("refund", {"order_id": "A-1"}))])]
SCENARIOS = [
    Scenario("approval tool", _shop, APPROVE, [reply("ask", "Refunded.")], _resume),
    Scenario("approval tool, async", _shop, APPROVE, [reply("ask", "Refunded.")], _aresume, is_async=True),
    Scenario(
        "approval tool without a key",
        _shop,
        [(None, [OPEN]), ("refund A-1", [tool_calls(("refund_unkeyed", {"order_id": "A-1"}))])],
        [reply("ask", "Refunded.")],
        _resume,
    ),
    Scenario(
        "plain tools",
        _shop,
        [(None, [OPEN])],
        [tool_calls(("lookup", {"order_id": "A-1"}), ("lookup", {"order_id": "B-2"})), reply("found", "Shipped.")],
        _send("A-1 and B-2?"),
    ),
    Scenario(
        "summary fold",
        _shop,
        [(None, [OPEN]), ("A-1?", [tool_calls(("lookup", {"order_id": "A-1"})), reply("found", "Shipped.")])],
        [reply("done", "Bye!")],
        _send("thanks"),
    ),
    Scenario(
        "sub-conversation push",
        _claim,
        [(None, [reply("ask_policy", "Your policy number?")])],
        [reply("identity", "Let's check who you are.", policy_number="P1", customer_name="Ann")],
        _send("P1, I'm Ann"),
    ),
    Scenario(
        "sub-conversation pop",
        _claim,
        [
            (None, [reply("ask_policy", "Your policy number?")]),
            ("P1, I'm Ann", [reply("identity", "Let's check.", policy_number="P1", customer_name="Ann")]),
            ("1 Jan 1990", [reply("check", "Your first pet?", dob="1990-01-01")]),
        ],
        [reply("ok", "Confirmed.", verified=True)],
        _send("Rex"),
    ),
]


# -- the child: one turn, killed at a boundary --------------------------------------------------


class Boundaries:
    """Names each boundary as the turn passes it (in ``log``) and kills the process at the ``kill_at``-th."""

    def __init__(self, log: Path, kill_at: int | None) -> None:
        self.log, self.kill_at, self.passed = log, kill_at, 0
        self.lock = threading.Lock()  # tools of one round run at once, in threads: one boundary at a time

    def __call__(self, name: str) -> None:
        with self.lock:
            self.passed += 1
            with self.log.open("a") as f:
                f.write(name + "\n")
            if self.passed == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)


class Watched(ScriptedLLM):
    def __init__(self, replies: list[Any], boundary: Boundaries) -> None:
        super().__init__(replies, summaries=folded_summary)
        self.boundary = boundary

    def complete(self, request: Any) -> Any:
        what = "summary call" if request.kind == "summary" else "model call"
        self.boundary(f"before {what}")
        response = super().complete(request)
        self.boundary(f"after {what}")
        return response

    async def acomplete(self, request: Any) -> Any:
        return self.complete(request)


IN_ASAVE: contextvars.ContextVar[bool] = contextvars.ContextVar("in_asave", default=False)


def watch_saves(store: Any, boundary: Boundaries) -> None:
    save, asave = store.save, store.asave

    def kind(snapshot: Any) -> str:
        call = snapshot.pending.tool_call if snapshot.pending else None
        if call and call.get("approval") in ("running", "approved"):
            return f"checkpoint ({call['approval']})"
        return "final save"

    def watched(conversation_id: str, snapshot: Any, **options: Any) -> int:
        if IN_ASAVE.get():  # asave's own save, in a thread: counted once, by asave
            return save(conversation_id, snapshot, **options)
        boundary(f"before {kind(snapshot)}")
        version = save(conversation_id, snapshot, **options)
        boundary(f"after {kind(snapshot)}")
        return version

    async def awatched(conversation_id: str, snapshot: Any, **options: Any) -> int:
        boundary(f"before {kind(snapshot)}")
        IN_ASAVE.set(True)  # this task's context, copied into asave's thread
        try:
            version = await asave(conversation_id, snapshot, **options)
        finally:
            IN_ASAVE.set(False)
        boundary(f"after {kind(snapshot)}")
        return version

    store.save, store.asave = watched, awatched


def effect_hooks(effects: Path, boundary: Boundaries | None = None) -> Hooks:
    """The shop's tools: each appends its effect to ``effects``; a keyed one skips a key it has seen."""
    hooks = Hooks()
    passed = boundary or (lambda name: None)

    def apply(tool: str, order_id: str, key: str | None) -> None:
        passed(f"before tool {tool}")
        with Path(f"{effects}.calls").open("a") as calls:
            calls.write(json.dumps({"tool": tool, "order": order_id}) + "\n")
        with effects.open("a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            seen = [json.loads(line) for line in f if line.strip()]
            if key is None or key not in {s["key"] for s in seen}:
                f.write(json.dumps({"tool": tool, "order": order_id, "key": key}) + "\n")
        passed(f"after tool {tool}")

    @hooks.tool("lookup")
    def lookup(order_id: str, idempotency_key: str) -> dict[str, str]:
        apply("lookup", order_id, idempotency_key)
        return {"id": order_id, "status": "shipped"}

    @hooks.tool("refund")
    def refund(order_id: str, idempotency_key: str) -> dict[str, str]:
        apply("refund", order_id, idempotency_key)
        return {"refunded": order_id}

    @hooks.tool("refund_unkeyed")
    def refund_unkeyed(order_id: str) -> dict[str, str]:
        apply("refund_unkeyed", order_id, None)
        return {"refunded": order_id}

    return hooks


def take_turn(scenario: Scenario, store: Any, cid: str, folder: Path, llm: Any, hooks: Hooks, token: str | None) -> Any:
    """The killed turn (or its retry), with one idempotency key: the retry of a turn that was saved gets its answer."""
    definition = scenario.definition(folder)
    options: dict[str, Any] = {"hooks": hooks, "wait": WAIT, "idempotency_key": f"{cid}-turn"}
    if scenario.is_async:
        action = lambda c: scenario.turn(c, token)  # noqa: E731
        return asyncio.run(aadvance(store, cid, definition, llm, None, action=action, **options))
    return advance(store, cid, definition, llm, None, action=lambda c: scenario.turn(c, token), **options)


def child(scenario: Scenario, url: str, cid: str, folder: Path, kill_at: int | None, token: str | None) -> None:
    """In a forked process: the turn, with every boundary watched (the store opened anew, its lease short)."""
    boundary = Boundaries(folder / f"{cid}.points", kill_at)
    store = open_store(url)
    store.lease = LEASE
    watch_saves(store, boundary)
    llm = Watched(list(scenario.replies), boundary)
    take_turn(scenario, store, cid, folder, llm, effect_hooks(folder / f"{cid}.effects", boundary), token)


def forked(work: Callable[[], None], errors: Path) -> int:
    """Run ``work`` in a forked child; its exit status (a signal number as negative)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 0
        try:
            work()
        except BaseException:
            errors.write_text(traceback.format_exc())
            code = 1
        finally:
            os._exit(code)
    # A child that hangs (a lock some thread of the parent held at the fork) must not hang the suite:
    # after CHILD_DEADLINE it is killed, and the test fails saying so.
    deadline = time.monotonic() + CHILD_DEADLINE
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked turn did not end within {CHILD_DEADLINE:.0f} s: killed it")
        time.sleep(0.02)


# -- the parent: set up, kill, look, retry, compare ---------------------------------------------


IN_EACH_RUN = ("uid", "used_tokens", "pending", "created_at", "idempotency")  # differ between two runs of a turn


def core(snapshot: Any) -> Any:
    """What the conversation is, without what differs between two runs of it (uids, tokens, the pause's record)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in IN_EACH_RUN}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(snapshot.model_dump(mode="json"))


def set_up(scenario: Scenario, store: Any, cid: str, folder: Path) -> tuple[Any, str | None]:
    """The turns before the killed one, run whole; the stored core and the pause's token (if paused)."""
    definition = scenario.definition(folder)
    hooks = effect_hooks(folder / f"{cid}.effects")
    result = None
    for text, replies in scenario.setup:
        llm = ScriptedLLM(replies, summaries=folded_summary)
        result = advance(store, cid, definition, llm, text, hooks=hooks)
    token = result.pending.token if result is not None and result.pending else None
    return core(store.load(cid).snapshot), token


@dataclass
class Case:
    scenario: str
    store: str
    point: str
    held: str  # what the store held after the kill: "before" or "after" (or "MIXED")
    effects: int  # the most times one call's effect happened
    calls: int  # the most times one call's tool was invoked, the retry's included


def run_case(scenario: Scenario, url: str, folder: Path, kill_at: int | None) -> tuple[Case, list[str], Any]:
    store = open_store(url)
    cid = f"c{uuid.uuid4().hex[:12]}"
    before, token = set_up(scenario, store, cid, folder)
    errors = folder / f"{cid}.error"
    status = forked(lambda: child(scenario, url, cid, folder, kill_at, token), errors)
    assert status == (0 if kill_at is None else -signal.SIGKILL), errors.read_text() if errors.exists() else status
    points = (folder / f"{cid}.points").read_text().splitlines()
    if kill_at is None:
        return Case(scenario.name, "", "", "after", 0, 0), points, (before, core(store.load(cid).snapshot))
    held = core(store.load(cid).snapshot)
    mid = "before" if held == before else "after"
    # the client got no answer: it sends the turn again with its key, and takes the lock within a lease
    llm = ScriptedLLM(list(scenario.replies), summaries=folded_summary)
    answer = take_turn(scenario, store, cid, folder, llm, effect_hooks(folder / f"{cid}.effects"), token)
    assert answer.message == scenario.replies[-1]["message"]
    if mid == "after":  # saved whole before the kill: the retry is answered from the store, without a model call
        assert llm.requests == [], f"killed {points[kill_at - 1]}: the saved turn ran again"
    effects, calls = lines(folder / f"{cid}.effects"), lines(folder / f"{cid}.effects.calls")
    most = max(Counter((e["tool"], e["order"]) for e in effects).values(), default=0)
    made = max(Counter((e["tool"], e["order"]) for e in calls).values(), default=0)
    case = Case(scenario.name, url.split(":")[0], points[kill_at - 1], mid, most, made)
    return case, points, (held, core(store.load(cid).snapshot))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


STORES = ["file", "sqlite", "redis", "postgresql"]
CASES: list[Case] = []


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for path in DATA.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def url_of(kind: str, folder: Path, request: pytest.FixtureRequest) -> str:
    if kind == "file":
        return f"file://{folder}/conversations"
    if kind == "sqlite":
        return f"sqlite://{folder}/c.db"
    if kind == "redis":
        return request.getfixturevalue("redis_url") + f"?prefix=crash{uuid.uuid4().hex[:6]}"
    return request.getfixturevalue("postgres_url") + f"?schema=crash{uuid.uuid4().hex[:6]}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_turn_killed_at_any_boundary_is_whole_or_absent_and_its_effects_happen_once(
    scenario: Scenario, kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    url = url_of(kind, folder, request)
    _, points, (start, end) = run_case(scenario, url, folder, None)
    assert start != end  # the turn changes the conversation: a kill before or after it can be told apart
    assert any(p.startswith("before model call") for p in points) and points.count("before final save") == 1
    for kill_at in range(1, len(points) + 1):
        case, _, (held, final) = run_case(scenario, url, folder, kill_at)
        CASES.append(case)
        where = f"killed {case.point} (boundary {kill_at})"
        assert held in (start, end), f"{where}: the store holds a mix of before and after"
        assert final == end, f"{where}: the retry did not end where the turn ends"
        assert case.effects <= 1, f"{where}: a side effect ran {case.effects} times"


@pytest.fixture(scope="module", autouse=True)
def table() -> Any:
    yield
    path = os.environ.get("LLM_FSM_CRASH_TABLE")
    if path and CASES:
        Path(path).write_text(json.dumps([case.__dict__ for case in CASES], indent=1))


# -- the same through llm-fsm serve: kill -9 the server while the model call after the tool is in flight ------


HOOKS = """
import os
from llm_fsm import Hooks

hooks = Hooks()


@hooks.tool("refund")
def refund(order_id: str) -> dict:
    with open(os.environ["REFUNDS"], "a") as f:
        f.write(order_id + "\\n")
    return {"refunded": order_id}
"""


@pytest.mark.slow
def test_serve_killed_after_an_approved_call_ran_does_not_run_it_again_on_resume(
    tmp_path: Path, fake_openai: Any, monkeypatch: pytest.MonkeyPatch
):
    import subprocess
    import time

    import httpx

    from tests.fake_openai import Hang
    from tests.server.test_serve_workers import start_workers

    definition = {**SHOP, "summaries": None, "tools": {"refund": SHOP["tools"]["refund_unkeyed"]}}
    definition["states"] = {**SHOP["states"], "ask": {**SHOP["states"]["ask"], "tools": ["refund"]}}
    (tmp_path / "shop.json").write_text(json.dumps({k: v for k, v in definition.items() if v is not None}))
    (tmp_path / "shop_hooks.py").write_text(HOOKS)
    refunds = tmp_path / "refunds"
    monkeypatch.setenv("REFUNDS", str(refunds))  # the servers' environment: start_workers copies os.environ
    extra = ["--hooks", f"{tmp_path / 'shop_hooks.py'}:hooks", "--workers", "1"]
    store = f"sqlite://{tmp_path / 'c.db'}"
    fake_openai.add(OPEN, {"tool_calls": [{"name": "refund", "arguments": {"order_id": "A-1"}}]})
    process, base = start_workers(tmp_path / "shop.json", fake_openai.url, store, "queue", tmp_path, extra=extra)
    try:
        cid = httpx.post(f"{base}/conversations", json={}, timeout=60).json()["id"]
        token = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "refund A-1"}, timeout=60)
        token = token.json()["pending"]["token"]
        fake_openai.add(Hang(60))  # the model call after the refund: still in flight when the server dies
        resume = {"token": token, "result": {"approved": True}}
        with subprocess.Popen([sys.executable, "-c", RESUME, f"{base}/conversations/{cid}/resume", json.dumps(resume)]):
            deadline = time.monotonic() + 60
            while not refunds.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
            os.killpg(process.pid, signal.SIGKILL)  # the server and its worker, at once
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    fake_openai.queue.clear()
    fake_openai.add(reply("ask", "Refunded."))
    again, base = start_workers(tmp_path / "shop.json", fake_openai.url, store, "queue", tmp_path, extra=extra)
    try:
        answer = httpx.post(f"{base}/conversations/{cid}/resume", json=resume, timeout=60)
    finally:
        again.terminate()
        again.wait(timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"] == "Refunded." and answer.json()["tool_calls"][0]["approval"] == "approved"
    assert refunds.read_text().split() == ["A-1"]  # ran once, before the kill; the resume found its result


RESUME = """
import httpx, json, sys
try:
    httpx.post(sys.argv[1], json=json.loads(sys.argv[2]), timeout=120)
except httpx.HTTPError:
    pass  # the server died
"""
