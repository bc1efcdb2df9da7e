"""One turn, written as a generator of model calls, so that sync, async and streaming drivers share it.

``TurnRunner.run()`` yields :class:`Call` objects (and the other :data:`Step` kinds) and receives what
each produced; it returns the new snapshot and the :class:`TurnResult`. Nothing outside the turn
changes until the caller assigns that snapshot, so a turn that raises (or is abandoned) changes nothing.

Order of a turn::

    start (opening only) → before_llm_call → [model call → after_reply → decide → checks]
        (invalid reply or failed checks: a corrective call with the reasons, within the budgets)
    → context_update → before_transition → state_exit → commit → after_transition → state_enter → end

An opening in a state with an opening of its own (``"opening"``, :mod:`llm_fsm.definition.opening`) goes from
``start`` straight to the commit (and ``end`` in a terminal state): no model call.

This module is the loop; each concern is a unit of its own, a function of the turn's working state
(:class:`llm_fsm.turn.working.Working`):

- :mod:`llm_fsm.turn.requests`: the prompt, the reply schemas and the requests (corrections too);
- :mod:`llm_fsm.turn.verdict`: one reply parsed, decided and checked;
- :mod:`llm_fsm.turn.tool_rounds`: rounds of tool calls, approvals and what follows them;
- :mod:`llm_fsm.turn.firing`: the handlers;
- :mod:`llm_fsm.turn.outcomes`: the commit with the handlers around it, the fallback, pauses.

The step types, the settings and :class:`TurnResult` are in :mod:`llm_fsm.turn.steps` (imported from here too).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llm_fsm.contract import Reply
from llm_fsm.definition.models import FSMDefinition, Transition
from llm_fsm.definition.opening import render_opening
from llm_fsm.definition.texts import runtime_text
from llm_fsm.errors import RefinementError
from llm_fsm.hooks import Break, Hooks
from llm_fsm.llm import LLMRequest
from llm_fsm.memory import summaries
from llm_fsm.snapshot import PendingEvent, Snapshot
from llm_fsm.tools.calling import ToolRun
from llm_fsm.turn import tool_rounds as rounds
from llm_fsm.turn.automatic import after_tools, take
from llm_fsm.turn.engine import Decision, decide
from llm_fsm.turn.firing import fire, fire_error
from llm_fsm.turn.outcomes import DEFAULT_PAUSE_MESSAGE, accept, close_terminal, exhausted, paused
from llm_fsm.turn.reply_modes import Guided, mode_of, moved
from llm_fsm.turn.requests import correction, prompt_messages, reply_call, request, stays_in
from llm_fsm.turn.resuming import resumed
from llm_fsm.turn.steps import (
    DEFAULT_FALLBACK,
    Call,
    Checkpoint,
    Preview,
    Purpose,
    Runtime,
    RunTools,
    Step,
    Steps,
    Turn,
    TurnResult,
    TurnSettings,
)
from llm_fsm.turn.tool_rounds import DEFAULT_APPROVAL_MESSAGE, INTERRUPTED, NO_MORE_TOOLS
from llm_fsm.turn.verdict import run_checks, verdict
from llm_fsm.turn.working import Working

if TYPE_CHECKING:
    from llm_fsm.telemetry import NoTrace
    from llm_fsm.telemetry.spans import TurnTrace

# the names other modules import from here (the step types and the result live in llm_fsm.turn.steps)
__all__ = [
    "DEFAULT_APPROVAL_MESSAGE", "DEFAULT_FALLBACK", "DEFAULT_PAUSE_MESSAGE", "INTERRUPTED", "NO_MORE_TOOLS",
    "Call", "Checkpoint", "Preview", "Purpose", "RefinementError", "RunTools", "Step", "Steps", "Turn",
    "TurnResult", "TurnRunner", "TurnSettings", "fire_error", "plain_turn", "resume_turn", "summary_steps",
]  # fmt: skip


class TurnRunner:
    """Runs one turn on its working state: ``TurnRunner(Working(definition, base, hooks, settings, user=...))``
    (``user=None``: the opening, or a resume). It implements :class:`~llm_fsm.turn.steps.Turn`."""

    def __init__(self, work: Working) -> None:
        self.work = work
        self.base, self.user, self.turn_index = work.base, work.user, work.turn_index

    # the Turn interface: what the drivers and the telemetry read of the turn's working state
    @property
    def trace(self) -> TurnTrace | NoTrace:
        return self.work.trace

    @trace.setter
    def trace(self, value: TurnTrace | NoTrace) -> None:
        self.work.trace = value

    @property
    def resuming(self) -> PendingEvent | None:
        return self.work.resuming

    @property
    def decision(self) -> Mapping[str, Any] | None:
        return self.work.decision

    @property
    def context(self) -> dict[str, Any]:
        return self.work.context

    @property
    def tool_runs(self) -> list[ToolRun]:
        return self.work.tools.runs

    @property
    def frame_attributes(self) -> dict[str, Any]:
        return {}

    # -- the turn -------------------------------------------------------------------------------

    def run(self) -> Steps:
        """The turn, with the summary calls around it: a summary still due first (background mode),
        or, once the turn is decided, the one it made due."""
        work, settings = self.work, self.work.settings
        caught_up = None
        if settings.background_summaries and work.base.summary.pending:
            # a summary the last turn left due runs first, so that this turn's prompt is built on it
            work.base, caught_up = yield from summary_steps(work.definition, work.base, settings)
        snapshot, result = yield from self.turn()
        if snapshot.state in work.exits:  # the level is dropped at once: no summary of it
            return snapshot, result
        # what is due is judged on the new snapshot, whose history holds this turn's exchange
        snapshot = summaries.mark_due(work.definition, snapshot, settings.prompt.settings.history_window)
        made = caught_up
        if not settings.background_summaries and snapshot.summary.pending:
            snapshot, made = yield from summary_steps(work.definition, snapshot, settings)
        return snapshot, replace(result, summary=made) if made is not None else result

    def turn(self) -> Steps:
        """The turn itself: the handlers before the model call, then the model until a reply is accepted."""
        work = self.work
        state = work.base.state
        if work.resuming is not None and work.resuming.kind == "tool_approval":
            # an approved (or refused) tool call goes straight back to the model: the handlers before the
            # model call ran in the turn that paused, which had already made the call asking for the tool
            messages = work.transcript.start((yield from rounds.after_approval(work)))
            if (move := after_tools(work)) is not None:  # the tool's result fulfils it
                return (yield from take(work, move))
            return (yield from self.replies(request(work, messages), "tool_results"))
        # the opening turn: the first one, or the resume of a pause a start handler made before it (that
        # pause's message is not the opening: the start handlers left go on, then the state's opening)
        opening = work.opening or (work.resuming is not None and work.resuming.timing == "start")
        # a conversation paused in its terminal state has ended: the resume only runs the handlers left
        if work.resuming is not None and work.definition.states[state].terminal and not opening:
            return (yield from close_terminal(work))
        try:
            if opening:
                yield from fire(work, "start", state)
                if (text := work.definition.states[state].opening) is not None:
                    return (yield from self.written_opening(text))
            yield from fire(work, "before_llm_call", state)
        except Break as pause:
            return paused(work, pause, state, pause.message or runtime_text(work.definition, "pause"))
        return (yield from self.replies(request(work, work.transcript.start(prompt_messages(work)))))

    def written_opening(self, text: str) -> Steps:
        """The state's own opening, over the context the ``start`` handlers left: no model call, so no
        ``before_llm_call`` or ``after_reply``; committed like a model's opening that stays (``end`` runs
        in a terminal state), its exchange recorded at turn 0 with no user text."""
        work = self.work
        state = work.base.state
        message = render_opening(text, work.context, state=state)
        work.step = "turn"  # an acting state's opening is said before it acts (its next step): it did no work
        return (yield from accept(work, Decision(True, state, work.context, {}, ()), message))

    def replies(self, ask: LLMRequest, purpose: Purpose = "reply") -> Steps:
        """Model calls until a reply is accepted (tool rounds and corrections in between), or the budgets end."""
        work = self.work
        corrections = 0
        while True:
            response = yield reply_call(work, ask, purpose)
            work.budget.count(response)
            # a reply that asks for tools is not judged: the tools run and the model is asked again with their results
            if calls := rounds.requested_tools(work, response):
                pause = yield from rounds.use_tools(work, calls, response)
                if pause is not None:
                    return pause
                # a tool's result may fulfil an automatic move: taken at once, with no call to read the results
                if (move := after_tools(work)) is not None:
                    return (yield from take(work, move))
                if not work.budget.left():
                    return (yield from exhausted(work, False))
                ask, purpose = request(work, work.transcript.messages), "tool_results"
                continue
            try:
                decision, reply, problems = yield from verdict(work, response)
            except Break as pause:  # an after_reply handler: before the commit, so the move is not made
                return paused(work, pause, work.base.state, pause.message or runtime_text(work.definition, "pause"))
            if decision is not None and reply is not None and not problems:
                if moved(work, reply, decision):  # guided: its message is for the state it leaves
                    return (yield from self.entered(reply, decision))
                return (yield from accept(work, decision, reply.message))
            # failed checks (or values a schema refuses) are refined within the state's max_retries;
            # anything else is corrected within max_corrections
            refining = bool(problems) and all(p.kind in ("check", "context_value") for p in problems)
            corrections += not refining
            work.budget.refinements += refining
            if not self.may_retry(corrections, work.budget.refinements, refining):
                return (yield from exhausted(work, refining))
            ask, purpose = correction(work, response.text, problems), "refinement" if refining else "correction"

    def entered(self, reply: Reply, decision: Decision) -> Steps:
        """A guided reply that stayed, moved to the state its update fulfils a move to (``Guided.settle``): one
        more call, with that state's prompt, writes the message the person reads there. Where it writes none
        (an invalid reply), the conversation stays, with the reply's own message, as the model proposed."""
        work = self.work
        mode = mode_of(work)
        assert isinstance(mode, Guided)  # only a guided reply is moved (the plain mode settles where it says)
        target = decision.state
        response = yield Call("reply", mode.entered_request(work, decision), stays_in(target), "entered")
        work.budget.count(response)
        message = mode.entered_message(work, response.text, target)
        if message is not None:
            return (yield from accept(work, decision, message))
        stay = decide(work.definition, work.snapshot(), reply, attempt=work.budget.calls)
        if work.definition.states[work.base.state].checks:  # they judged the move: the stay is judged again
            failures = yield from run_checks(work, stay, reply.message)
            if failures:
                work.judged.found(failures)
                return (yield from exhausted(work, True))
        return (yield from accept(work, stay, reply.message))

    def may_retry(self, corrections: int, refinements: int, refining: bool) -> bool:
        work = self.work
        state = work.definition.states[work.base.state]
        # the two budgets are counted apart: failed checks do not use up the corrections of malformed
        # replies, and malformed replies do not use up the state's max_retries
        within = refinements <= state.max_retries if refining else corrections <= work.settings.max_corrections
        return within and work.budget.left()


class AutomaticMove(TurnRunner):
    """A step of a run with no model call: the automatic ``move`` from the snapshot's state
    (:mod:`llm_fsm.turn.automatic`), with the handlers around it and the summaries a turn has."""

    def __init__(self, work: Working, move: Transition) -> None:
        super().__init__(work)
        self.move = move

    def turn(self) -> Steps:
        self.work.step = "automatic"
        return (yield from take(self.work, self.move))


def summary_steps(
    definition: FSMDefinition, snapshot: Snapshot, settings: TurnSettings
) -> Generator[Step, Any, tuple[Snapshot, summaries.SummaryRun | None]]:
    """One summary call for what is due in ``snapshot``: the snapshot after it, and its report (None:
    nothing was due). It never raises for the call: a failure is in the report and the snapshot."""
    job = summaries.job(definition, snapshot)
    if job is None:
        return snapshot, None
    try:
        summary_request = summaries.request(definition, job, settings.prompt)
    except Exception as exc:  # noqa: BLE001 (a template that fails must not fail the turn either)
        return summaries.outcome(definition, snapshot, job, summaries.CallFailed(exc))
    # a failed call comes back as a summaries.CallFailed (the driver does not raise it): the outcome
    # counts the failure in the snapshot's summary, which stays where it was, and the turn stands
    answer = yield Call("summary", summary_request, purpose="summary", llm=settings.summary_llm)
    return summaries.outcome(definition, snapshot, job, answer)


def resume_turn(
    definition: FSMDefinition,
    snapshot: Snapshot,
    hooks: Hooks,
    settings: TurnSettings,
    token: str,
    result: Mapping[str, Any],
    *,
    handle: Any = None,
) -> TurnRunner:
    """The turn that continues a paused conversation with ``result`` (:class:`ResumeError` for a bad token).

    A pause for a tool call's approval takes a decision instead of context: ``{"approved": true}``,
    ``{"approved": false, "reason": "..."}`` or ``{"result": ...}`` (the call's result, supplied)."""
    rounds.check_approval(snapshot, token, result)
    # read from the paused snapshot: resumed() gives a base with the pause lifted
    pause = snapshot.pending
    base = resumed(definition, snapshot, token, result)
    if pause is not None and pause.kind == "tool_approval":
        note = rounds.approval_note(settings.prompt, pause, result)
    else:
        note = settings.prompt.resume_note(pause.reason if pause else "paused", dict(result))
    acting = definition.states[base.state].acts  # a step of a run goes on as one: its result says "act"
    return TurnRunner(
        Working(
            definition, base, hooks, settings, user=None, note=note, handle=handle, resuming=pause,
            paused=snapshot, decision=result, acting=acting,
        )
    )  # fmt: skip


def plain_turn(
    definition: FSMDefinition,
    snapshot: Snapshot,
    runtime: Runtime,
    settings: TurnSettings,
    *,
    user: str | None,
    resume: tuple[str, Mapping[str, Any]] | None = None,
    move: Transition | None = None,
) -> TurnRunner:
    """The turn of one level, with ``settings``: ``user`` text (None: the opening, or a turn of a state that
    acts on its own), the resume of a pause with ``(token, result)``, or an automatic ``move``."""
    hooks, handle = runtime.hooks, runtime.handle
    if move is not None:
        return AutomaticMove(Working(definition, snapshot, hooks, settings, user=None, handle=handle), move)
    if resume is None and (state := definition.states[snapshot.state]).acts:
        # nobody waits to type: the prompt says so, with the run's input (``user``) as the task, if there is one
        note = settings.prompt.act_note(user, tools=bool(state.tools))
        acting = Working(definition, snapshot, hooks, settings, user=user, note=note, handle=handle, acting=True)
        return TurnRunner(acting)
    if resume is None:
        return TurnRunner(Working(definition, snapshot, hooks, settings, user=user, handle=handle))
    token, result = resume
    return resume_turn(definition, snapshot, runtime.hooks, settings, token, result, handle=runtime.handle)
