"""A stored run holds its conversation's lock from its first step to its last, on every store (issue 48).

While a step of the run is in progress (a tool that waits on an event), another caller's run on the same id waits
for the lock (:class:`ConflictError` after a short wait), though a load without the lock already shows the steps
saved so far; once the run ends, the caller that waited takes the lock and finds the run finished.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llm_fsm import Hooks
from llm_fsm.errors import ConflictError
from llm_fsm.store import Store, open_store
from tests.store.test_crash_points_runs import ByState, set_up, stored
from tests.store.test_store import KINDS, url_for

TIMEOUT = 60.0  # seconds any wait here may take on a loaded machine before the test fails


def blocking_hooks(entered: threading.Event, release: threading.Event, calls: list[str]) -> Hooks:
    """The run's tools; ``write`` (the draft step's) says it began, then waits for ``release``."""
    hooks = Hooks()

    @hooks.tool("gather")
    def gather(topic: str) -> list[str]:
        calls.append("gather")
        return [f"a note on {topic}"]

    @hooks.tool("write")
    def write(notes: list[str]) -> str:
        calls.append("write")
        entered.set()
        assert release.wait(TIMEOUT), "the test never let the draft step end"
        return "# quantum"

    @hooks.tool("verify")
    def verify(draft: str) -> str:
        calls.append("verify")
        return f"{draft} holds"

    return hooks


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``work`` started in a thread; its result (or error) lands in the dict."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = work()
        except BaseException as exc:  # reported by the test, in its own thread
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("kind", KINDS)
def test_another_run_on_the_id_waits_for_a_run_in_progress_then_finds_it_finished(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(kind, tmp_path, request)
    first = open_store(url)
    opened: Callable[[], Store] = (lambda: first) if kind == "memory" else (lambda: open_store(url))
    set_up(first, "c1", tmp_path / "effects")
    entered, release, calls = threading.Event(), threading.Event(), []
    hooks = blocking_hooks(entered, release, calls)
    running, ran = in_thread(lambda: stored(opened(), "c1", ByState(), hooks).run(lambda c: list(c.run())))
    waiting: threading.Thread | None = None
    try:
        assert entered.wait(TIMEOUT), ran.get("error")  # the draft step's tool is running: the run holds the lock
        impatient = stored(opened(), "c1", ByState(), hooks)
        impatient.wait = 0.2
        with pytest.raises(ConflictError):
            impatient.run(lambda c: list(c.run()))
        assert impatient.load().state == "draft"  # the gather step is saved; the draft step is the one running
        patient = stored(opened(), "c1", ByState(), hooks)
        patient.wait = TIMEOUT
        waiting, seen = in_thread(lambda: patient.run(lambda c: (c.state, list(c.run()))))
        time.sleep(0.3)
        assert waiting.is_alive() and not seen, "the second run did not wait for the first"
    finally:
        release.set()
        running.join(TIMEOUT)
        if waiting is not None:
            waiting.join(TIMEOUT)
    assert "error" not in ran, ran.get("error")
    assert [r.state for r in ran["result"]] == ["draft", "check", "done"]
    assert seen == {"result": ("done", [])}  # it took the lock after the run and found nothing left to do
    assert calls == ["gather", "write", "verify"]


def test_an_async_run_holds_the_lock_alike(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'c.db'}")
    set_up(store, "c1", tmp_path / "effects")
    calls: list[str] = []

    async def scenario() -> tuple[Any, Any]:
        entered, release = asyncio.Event(), asyncio.Event()
        hooks = Hooks()

        @hooks.tool("gather")
        def gather(topic: str) -> list[str]:
            calls.append("gather")
            return [f"a note on {topic}"]

        @hooks.tool("write")
        async def write(notes: list[str]) -> str:
            calls.append("write")
            entered.set()
            await asyncio.wait_for(release.wait(), TIMEOUT)
            return "# quantum"

        @hooks.tool("verify")
        def verify(draft: str) -> str:
            calls.append("verify")
            return f"{draft} holds"

        async def steps(c: Any) -> list[Any]:
            return [result async for result in c.arun()]

        async def seen(c: Any) -> tuple[str, list[Any]]:
            return c.state, await steps(c)

        running = asyncio.create_task(stored(store, "c1", ByState(), hooks).arun(steps))
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        impatient = stored(store, "c1", ByState(), hooks)
        impatient.wait = 0.2
        with pytest.raises(ConflictError):
            await impatient.arun(steps)
        patient = stored(store, "c1", ByState(), hooks)
        patient.wait = TIMEOUT
        waiting = asyncio.create_task(patient.arun(seen))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the second run did not wait for the first"
        release.set()
        return await running, await waiting

    ran, seen = asyncio.run(scenario())
    assert [r.state for r in ran] == ["draft", "check", "done"]
    assert seen == ("done", []) and calls == ["gather", "write", "verify"]
