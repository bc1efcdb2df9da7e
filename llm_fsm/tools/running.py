"""Running prepared tool calls, several at once, each within its tool's timeout: in a shared pool of
worker threads for the sync API (:func:`run_batch`), on the running loop for the async one
(:func:`arun_batch`). Whatever a tool returns or raises ends as a :class:`~llm_fsm.tools.tool_types.ToolRun`."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from llm_fsm.errors import ContextValueError
from llm_fsm.telemetry import NO_SPAN
from llm_fsm.tools.tool_types import KEY_PARAMETER, MAX_ERROR_CHARS, BoundTool, Prepared, ToolRun, bounded
from llm_fsm.values import as_json_data, exception_text

if TYPE_CHECKING:
    from llm_fsm.telemetry import NoSpan
    from llm_fsm.telemetry.spans import ToolSpan

_log = logging.getLogger("llm_fsm.tools")

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
POOL_SIZE = 64  # tool calls running at once in the sync API, across conversations


def _forget_pool_in_child() -> None:
    """After ``os.fork()``: the parent's pool has no threads in this process, so every call would wait out its
    timeout (a pre-fork server, multiprocessing with fork). The child makes its own pool on its first call."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # threads are reused: starting one per call would cost more than most tools
            _POOL = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="llm_fsm-tool")
        return _POOL


def _retire_pool(pool: ThreadPoolExecutor) -> None:
    """A call outlived its timeout in ``pool``: later calls get a fresh pool, so that threads stuck in
    tools that never return cannot starve them (the old pool's threads end when their calls do)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is pool:
            _POOL = None
    pool.shutdown(wait=False, cancel_futures=False)


def run_batch(calls: Sequence[Prepared], spans: Sequence[ToolSpan] | None = None) -> list[ToolRun]:
    """Run ``calls`` (each without an error) at once, in worker threads, each within its timeout.

    A call that has not started when its time is up is cancelled and never runs. One that started
    is reported as timed out, but its thread cannot be interrupted (Python cannot): the function
    runs on until it returns, and the pool is replaced so that it holds no later call back.
    """
    if not calls:
        return []
    pool = _pool()
    traced: Sequence[ToolSpan | NoSpan] = spans or [NO_SPAN] * len(calls)
    # all submitted before any is waited for: the calls run at once
    futures = [(p, s, time.perf_counter(), pool.submit(_call_sync, p, s)) for p, s in zip(calls, traced, strict=True)]
    return [span.ended(_outcome(p, started, future, pool)) for p, span, started, future in futures]


async def arun_batch(calls: Sequence[Prepared], spans: Sequence[ToolSpan] | None = None) -> list[ToolRun]:
    """Run ``calls`` concurrently on the running loop (plain functions in threads), each within its timeout."""
    traced: Sequence[ToolSpan | NoSpan] = spans or [NO_SPAN] * len(calls)
    runs = await asyncio.gather(*(_arun(p, span) for p, span in zip(calls, traced, strict=True)))
    return [span.ended(run) for span, run in zip(traced, runs, strict=True)]


def _call_sync(prepared: Prepared, span: ToolSpan | NoSpan) -> Any:
    tool = bound_tool(prepared)
    keywords = _keywords(tool, prepared)
    if tool.function.is_async:  # in this worker thread, on a loop of its own
        # Unlike a thread, a coroutine can be stopped: cancelled at the tool's timeout (when the
        # caller gives up on it), it frees this thread and ends its I/O (an MCP request) instead of
        # running on and holding the interpreter's exit back, which joins these threads.
        return asyncio.run(asyncio.wait_for(span.run(tool.function.function, keywords), tool.timeout))
    return span.run(tool.function.function, keywords)


def _outcome(prepared: Prepared, started: float, future: Any, pool: ThreadPoolExecutor) -> ToolRun:
    tool = bound_tool(prepared)
    # the timeout counts from the call's submission: time spent waiting on earlier calls' results counts
    remaining = max(0.0, tool.timeout - (time.perf_counter() - started))
    try:
        value = future.result(timeout=remaining)
    except FutureTimeout:
        if future.cancel():  # still waiting for a worker: it will never run
            return _failed(prepared, f"not run: no worker was free within {tool.timeout:g} s", started)
        _retire_pool(pool)
        return _failed(prepared, f"timed out after {tool.timeout:g} s (it may still finish)", started)
    except Exception as exc:  # the tool raised: the model is told, the turn goes on
        return _failed(prepared, raised(prepared, exc), started)
    return _succeeded(prepared, value, started)


async def _arun(prepared: Prepared, span: ToolSpan | NoSpan) -> ToolRun:
    tool, started = bound_tool(prepared), time.perf_counter()
    function = tool.function.function
    try:
        keywords = _keywords(tool, prepared)
        if tool.function.is_async:
            value = await asyncio.wait_for(span.run(function, keywords), tool.timeout)
        else:
            # a plain function runs in a thread so that the loop is not blocked; at its timeout the await
            # ends, but the thread runs on (a thread cannot be stopped)
            value = await asyncio.wait_for(asyncio.to_thread(span.run, function, keywords), tool.timeout)
    except TimeoutError:
        return _failed(prepared, f"timed out after {tool.timeout:g} s", started)
    except Exception as exc:
        return _failed(prepared, raised(prepared, exc), started)
    return _succeeded(prepared, value, started)


def _keywords(tool: BoundTool, prepared: Prepared) -> dict[str, Any]:
    keywords = tool.keywords(prepared.arguments)
    if tool.takes_key:
        keywords[KEY_PARAMETER] = prepared.key
    return keywords


def bound_tool(prepared: Prepared) -> BoundTool:
    if prepared.tool is None or prepared.error is not None:
        raise ValueError(f"tool call {prepared.call.name!r} was refused and must not run")
    return prepared.tool


def _succeeded(prepared: Prepared, value: Any, started: float) -> ToolRun:
    try:
        # a result that is not JSON data fails the call (the model is told why), not the turn
        result = as_json_data({"result": value}, source=f"the result of tool '{prepared.call.name}'")["result"]
    except ContextValueError as exc:
        return _failed(prepared, str(exc), started)
    return ToolRun(
        id=prepared.call.id, name=prepared.call.name, arguments=prepared.arguments, result=result,
        duration=time.perf_counter() - started, round=prepared.round, idempotency_key=prepared.key,
    )  # fmt: skip


def _failed(prepared: Prepared, error: str, started: float) -> ToolRun:
    return ToolRun(
        id=prepared.call.id, name=prepared.call.name, arguments=prepared.arguments,
        error=bounded(error, MAX_ERROR_CHARS), duration=time.perf_counter() - started, round=prepared.round,
        idempotency_key=prepared.key,
    )  # fmt: skip


def raised(prepared: Prepared, exc: BaseException) -> str:
    """What the model, ``rejected`` and the turn's result say of an exception the tool raised: its type
    and first line with secret-looking values masked (the call's secret arguments too), or its type only."""
    tool = bound_tool(prepared)
    text = describe(exc)
    if tool.secret_keys is not None:
        from llm_fsm.secrets import mask_text, secret_values

        known = secret_values(prepared.arguments, tool.secret_keys)
        text = mask_text(text, tool.secret_keys, known)
    _log.debug("tool %r raised %s", tool.name, text)  # masked too: logs are no safer than prompts
    return type(exc).__name__ if tool.error_detail == "type" else text


def describe(exc: BaseException) -> str:
    message = exception_text(exc).strip()
    text = message.splitlines()[0] if message else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
