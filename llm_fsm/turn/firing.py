"""Firing a turn's handlers (registered in :mod:`llm_fsm.hooks`): each delta applied as it comes, a
``Break`` marked with the handler and timing that raised it, a resume's handlers that ran not run again."""

from __future__ import annotations

import copy
from collections.abc import Generator
from types import MappingProxyType
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.hooks import Break, Handler, Hooks, Invocation, call, logger, selected
from llm_fsm.turn.engine import write
from llm_fsm.turn.steps import Step
from llm_fsm.turn.working import Working

# the timings whose handlers run before a move is committed (a Break there means the move is not made)
BEFORE_COMMIT = ("after_reply", "context_update", "before_transition", "state_exit")


def fire(
    work: Working,
    timing: str,
    state: str,
    *,
    target: str | None = None,
    keys: frozenset[str] = frozenset(),
    **extra: Any,
) -> Generator[Step, Any, None] | tuple[()]:
    """Run the handlers for ``timing``; apply each delta as it comes (later handlers see it)."""
    if not work.hooks.handlers:
        return ()  # most turns have no handlers: no generator to make and step through
    return _fire(work, timing, state, target, keys, extra)


def _fire(
    work: Working, timing: str, state: str, target: str | None, keys: frozenset[str], extra: dict[str, Any]
) -> Generator[Step, Any, None]:
    listed = frozenset(work.definition.states[state].handlers)
    handlers = selected(work.hooks, Invocation(timing, state, target, keys, listed))
    for handler in not_yet_run(work, timing, state, handlers):
        arguments = {
            "conversation": work.handle,
            "timing": timing,
            "state": state,
            "target": target,
            # a copy, read-only: a handler changes the context by returning a delta, never in place
            "context": MappingProxyType(copy.deepcopy(work.context)),
            "update": extra.get("update", {}),
            "corrections": extra.get("corrections", {}),  # context_update: the keys whose values it changed
            "user": work.user,
            "reply": extra.get("reply"),
            "message": extra.get("message"),
            "error": None,
            "memory": work.memory,
        }
        with work.trace.handler(handler.name, timing, state, target) as span:
            try:
                delta = yield from call(handler, arguments, span.run)
            except Break as pause:
                pause.handler, pause.timing = handler.name, timing  # the resume goes on after this one
                raise
            span.changed(delta)
        if delta:
            by = f"handler:{handler.name}"
            # applied at once, not after the timing point: the next handler is given the context with this delta
            work.context, work.provenance = write(work.context, work.provenance, delta, by=by, turn=work.turn_index)


def not_yet_run(work: Working, timing: str, state: str, handlers: list[Handler]) -> list[Handler]:
    """On a resume, the handlers of the paused timing point after the one that paused (the others ran)."""
    pause = work.resuming
    if pause is None or (pause.timing, pause.state) != (timing, state):
        return handlers
    work.resuming = None  # only that timing point's first firing was interrupted
    names = [h.name for h in handlers]
    return handlers[names.index(pause.handler) + 1 :] if pause.handler in names else handlers


def fire_error(definition: FSMDefinition, hooks: Hooks, state: str, error: BaseException, *, handle: Any) -> None:
    """Run ``error`` handlers; their own failures are logged, never raised over the original."""
    # KeyboardInterrupt, SystemExit and cancellation are not the conversation's errors: no handlers run
    if not isinstance(error, Exception) or not hooks.handlers:
        return
    listed = frozenset(definition.states[state].handlers)
    for handler in selected(hooks, Invocation("error", state, listed=listed)):
        arguments = {"conversation": handle, "timing": "error", "state": state, "error": error}
        try:
            for step in call(handler, arguments):  # error handlers are plain functions: nothing to await
                step.close()
                raise TypeError(f"{step.what} returned an awaitable; an error handler must not")
        except BaseException as failure:  # noqa: BLE001 (an error handler must not mask the error)
            logger.warning("error handler %r failed: %s", handler.name, failure)
