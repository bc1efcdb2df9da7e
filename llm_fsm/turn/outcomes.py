"""How a turn ends: an accepted reply committed (with the handlers around the commit), the fallback when
no valid reply came within the budgets, a pause, or the close of a terminal state on a resume.

A ``Break`` raised before the commit pauses the conversation in the state it was in (the move is
not made); raised after it, in the new state.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from llm_fsm.definition.clearing import written
from llm_fsm.definition.corrections import corrected
from llm_fsm.definition.texts import BUILT_IN, runtime_text
from llm_fsm.errors import RefinementError
from llm_fsm.hooks import Break, new_token, now
from llm_fsm.memory.working import apply_model_update
from llm_fsm.snapshot import PendingEvent, Snapshot
from llm_fsm.turn.engine import Decision, apply_delta, commit
from llm_fsm.turn.firing import fire
from llm_fsm.turn.steps import Step, Steps, TurnResult
from llm_fsm.turn.working import Working
from llm_fsm.values import as_json_data, clean_text, copied

DEFAULT_PAUSE_MESSAGE = BUILT_IN["en"]["pause"]  # a definition in another language says it in its own

Outcome = Generator[Step, Any, tuple[Snapshot, TurnResult]]


def accept(work: Working, decision: Decision, message: str) -> Outcome:
    """Commit an accepted reply, running the handlers around the commit."""
    current, target = work.base.state, decision.state
    # the model's updates become the working context first: the context_update handlers read them
    work.set(decision.context, decision.applied, "llm")
    if target in work.exits:  # a move of a level below (subflows): that level runs the move's handlers
        return finish(work, target, message, decision.applied)
    if proposed := work.judged.memory_update:  # the memory_update of the reply the turn settles on
        work.memory.written, applied, _ = apply_model_update(work.definition, work.memory.written, proposed)
        work.memory.changed.update(applied)
    if not work.hooks.handlers:  # most turns: no handler to fire around the commit (fire() would run none)
        return finish(work, target, message, decision.applied)
    try:
        if decision.applied:
            keys = frozenset(decision.applied)
            fixed = corrected(work.definition, current, work.base.context, work.context, written(decision.applied))
            yield from fire(work, "context_update", current, keys=keys, update=decision.applied, corrections=fixed)
        if target != current:
            yield from fire(work, "before_transition", current, target=target, message=message)
            yield from fire(work, "state_exit", current, target=target, message=message)
    except Break as pause:
        return paused(work, pause, current, pause.message or runtime_text(work.definition, "pause"))
    try:
        if target != current:
            yield from fire(work, "after_transition", current, target=target, message=message)
            yield from fire(work, "state_enter", target, target=target, message=message)
        if work.definition.states[target].terminal:
            yield from fire(work, "end", target, message=message)
    except Break as pause:
        # after the commit the move stands: the pause is in the new state, with the reply's message
        return paused(work, pause, target, message)
    return finish(work, target, message, decision.applied)


def exhausted(work: Working, refining: bool) -> Outcome:
    """No valid reply within the budgets: stay with the valid updates, or the state's policy.

    The fallback message describes no move, so it is true whichever state the turn ends in.
    """
    state = work.definition.states[work.base.state]
    if refining and state.on_exhausted == "raise":
        failures = work.judged.refinements()
        message = f"state '{state.id}': checks still failing after {state.max_retries} retries"
        raise RefinementError(message, state=state.id, failures=failures)
    work.trace.note("llm_fsm.fallback", True)
    work.fallback = True
    target = state.id
    if refining and state.on_exhausted == "fallback_state" and state.fallback_state:
        target = state.fallback_state
    # the updates of the last reply read stay, except those a check refused (and the clear_keys of a move not made)
    applied = work.judged.kept_updates()
    decision = Decision(True, target, apply_delta(work.context, applied), applied, ())
    # through accept() like any reply, so the handlers around a move run for the fallback's move too
    # nobody waits to type in a state that acts: its fallback says the step failed, not "tell me more"
    said = runtime_text(work.definition, "step_failed") if state.acts else None
    message = said or work.settings.fallback_message or runtime_text(work.definition, "fallback")
    return (yield from accept(work, decision, message))


def close_terminal(work: Working) -> Steps:
    """A resume in a terminal state (paused on entering it, or at its end): the rest of its handlers,
    and no model call, since the conversation has ended."""
    state, timing = work.base.state, work.resuming.timing if work.resuming else None
    try:
        if timing == "state_enter":
            yield from fire(work, "state_enter", state, target=state)
        yield from fire(work, "end", state)
    except Break as pause:
        return paused(work, pause, state, pause.message or runtime_text(work.definition, "pause"))
    return finish(work, state, "", {})


def paused(work: Working, pause: Break, state: str, message: str) -> tuple[Snapshot, TurnResult]:
    """The turn ended by a handler's ``Break``, in ``state``: pending until it is resumed."""
    source = f"the Break payload of handler '{pause.handler}'"
    event = PendingEvent(
        reason=clean_text(str(pause.reason)),
        payload=as_json_data(pause.payload, source=source),  # saved with the snapshot: JSON data only
        created_at=now(),
        token=new_token(),
        state=state,
        handler=pause.handler,
        timing=pause.timing,
    )
    return finish(work, state, clean_text(message), {}, pending=event)


def finish(
    work: Working, state: str, message: str, applied: dict[str, Any], pending: PendingEvent | None = None
) -> tuple[Snapshot, TurnResult]:
    """The turn's new snapshot in ``state`` and its result (nothing is held until the driver commits it)."""
    snapshot = commit(
        work.definition,
        work.base,
        state=state,
        context=work.context,
        provenance=work.provenance,
        user=work.user,
        message=message,
        pending=pending,
        exchange=work.exchange,
    )
    if work.memory.written != work.base.memory:
        snapshot = snapshot.model_copy(update={"memory": dict(work.memory.written)})
    result = TurnResult(
        message=message,
        state=state,
        previous_state=None if work.opening else work.base.state,
        user=work.user,
        turn=snapshot.turns,
        context_updates=dict(applied),
        rejected=tuple(work.judged.problems),
        llm_calls=work.budget.calls,
        usage=work.budget.usage,
        latency=work.budget.elapsed(),
        ended=snapshot.status == "ended",
        # a copy: a caller that changes the result's context does not change the committed snapshot
        context=copied(snapshot.context),
        status=snapshot.status,
        pending=pending,
        tool_calls=tuple(work.tools.runs),
        memory_updates=dict(work.memory.changed),
        fallback=work.fallback,
        corrections=corrected(work.definition, work.base.state, work.base.context, snapshot.context, written(applied)),
        step=work.step,
    )
    return snapshot, result
