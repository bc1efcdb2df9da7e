"""A run: the steps a conversation takes from one input until a state waits for a person, a pause, or the end.

In a workflow (a definition where some state ``acts`` or some move is ``automatic``), a turn may be followed by
steps nobody types for. After each step the next is chosen on the committed snapshot:

1. an automatic move of the current state whose conditions hold (no model call; :mod:`llm_fsm.turn.automatic`);
2. else, in a state that acts on its own, that state's turn (its message is its report);
3. else the run stops: the state waits for a person, or the conversation paused or ended.

Every step is a whole turn of its own: committed before the next is chosen, saved first where the conversation
is stored (the conversation's checkpoint sink, as a tool approval's checkpoint is), so a process killed mid-run
goes on at the step it was in and runs no finished step again. A run takes at most the definition's
``max_run_steps`` steps on its own; the next one raises :class:`~llm_fsm.errors.RunLimitError`, every step
before it standing; a step that fell back (no valid reply within its budgets) ends the run where it is. A
conversation with sub-conversations takes no steps of its own (its turns are one each).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeVar

from llm_fsm import telemetry
from llm_fsm.driving import Going, Host, Resume, StreamEvent, aevents, alast, complete, events
from llm_fsm.errors import RunLimitError
from llm_fsm.telemetry import NO_RUN, NoRun
from llm_fsm.turn.automatic import automatic_move
from llm_fsm.turn.steps import TurnResult

if TYPE_CHECKING:
    from llm_fsm.definition.models import Transition
    from llm_fsm.telemetry.runs import RunTrace

T = TypeVar("T")
HOLD = None  # an action of a run's plan: save the last step where the conversation is stored
# the other actions: a turn to take, as (user text, resume, step of its own)
Action = tuple[str | None, "Resume | None", "Going | None"] | None


def next_step(conversation: Host) -> Transition | Literal["act"] | None:
    """The step the conversation takes next on its own, or None: it waits for a person, paused, or ended."""
    snapshot, definition = conversation._snapshot, conversation.definition
    if snapshot.status != "active" or conversation._runtime.stacked or not definition.is_workflow:
        return None
    move = automatic_move(definition, snapshot)
    if move is not None:
        return move
    return "act" if definition.states[snapshot.state].acts else None


class Run:
    """One run's bookkeeping: its trace (a span with the steps' spans under it), the steps taken on their own
    against the limit, and the last result (a step that fell back ends the run: the same step would again)."""

    def __init__(self, conversation: Host) -> None:
        self.conversation = conversation
        self.taken = 0
        self.last: TurnResult | None = None
        self.trace: RunTrace | NoRun = NO_RUN

    def __enter__(self) -> Run:
        self.trace = self.conversation.run_trace = telemetry.start_run(self.conversation)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.conversation.run_trace = NO_RUN
        self.trace.end(error)

    def plan(self, user: str | None, resume: Resume | None) -> Iterator[Action]:
        """What the run does, one action at a time, each read on the conversation as the last one left it: the
        caller's turn (a message, a resume, or a new one's opening), then the steps nobody types for, the
        last step saved (:data:`HOLD`) before each. A message to a conversation whose run stopped part-way (a
        process killed between two steps, a limit) comes after the steps it left: it is a person's message, not
        the task of the state that was acting."""
        conversation = self.conversation
        began = bool(conversation._snapshot.history_len)
        if user is not None and resume is None and began and next_step(conversation) is not None:
            yield from self._own_steps()
            yield HOLD
            conversation._may_take(user)  # the run may have ended or paused: the message is refused as ever
            yield user, None, None
        elif user is not None or resume is not None or not began:
            yield user, resume, None
        yield from self._own_steps()

    def _own_steps(self) -> Iterator[Action]:
        while (step := self._next()) is not None:
            yield HOLD  # the last step saved before the next starts, or before the limit stops the run
            self._within_limit()
            yield None, None, step

    def took(self, event: T) -> T:
        """``event`` passed on; a step's result is counted."""
        if isinstance(event, TurnResult):
            self.last = event
            self.trace.step(event)
        return event

    def _next(self) -> Going | None:
        """The next step on its own (counted), or None: the run is over."""
        if self.last is not None and self.last.fallback:  # no valid reply within the budgets: it would fail again
            return None
        step = next_step(self.conversation)
        self.taken += step is not None
        return step

    def _within_limit(self) -> None:
        """:class:`RunLimitError` when the step about to start is past the limit (the last one is saved by then)."""
        limit = self.conversation.definition.max_run_steps
        if self.taken > limit:
            state = self.conversation.state
            raise RunLimitError(
                f"the run took {limit} steps on its own and stopped in state '{state}' (max_run_steps: {limit}); "
                "its steps stand: run it again to go on, or raise the definition's max_run_steps",
                state=state, limit=limit,
            )  # fmt: skip


def _hold(conversation: Host) -> None:
    """Save the committed step where the conversation is stored, before the next one starts."""
    if conversation.checkpoints is not None:
        conversation.checkpoints.hold(conversation._snapshot)


async def _ahold(conversation: Host) -> None:
    if conversation.checkpoints is not None:
        await conversation.checkpoints.ahold(conversation._snapshot)


def steps(conversation: Host, user: str | None = None, resume: Resume | None = None) -> Iterator[TurnResult]:
    """The run from ``user`` text (or a resume, or the opening of a new conversation, or nothing: the steps the
    current state takes on its own), one result per step."""
    with Run(conversation) as run:
        for action in run.plan(user, resume):
            if action is HOLD:
                _hold(conversation)
            else:
                text, how, step = action
                yield run.took(complete(conversation, text, how, step=step))


async def asteps(
    conversation: Host, user: str | None = None, resume: Resume | None = None
) -> AsyncIterator[TurnResult]:
    """The async form of :func:`steps`."""
    with Run(conversation) as run:
        for action in run.plan(user, resume):
            if action is HOLD:
                await _ahold(conversation)
            else:
                text, how, step = action
                yield run.took(await alast(aevents(conversation, text, how, stream=False, step=step)))


def step_events(
    conversation: Host, user: str | None = None, resume: Resume | None = None, *, stream: bool = True
) -> Iterator[StreamEvent]:
    """The run as the events of its steps: each step's deltas, tool calls and results, then its
    :class:`TurnResult` (one per step)."""
    with Run(conversation) as run:
        for action in run.plan(user, resume):
            if action is HOLD:
                _hold(conversation)
            else:
                text, how, step = action
                yield from map(run.took, events(conversation, text, how, stream=stream, step=step))


async def astep_events(
    conversation: Host, user: str | None = None, resume: Resume | None = None, *, stream: bool = True
) -> AsyncIterator[StreamEvent]:
    """The async form of :func:`step_events`."""
    with Run(conversation) as run:
        for action in run.plan(user, resume):
            if action is HOLD:
                await _ahold(conversation)
            else:
                text, how, step = action
                async for event in aevents(conversation, text, how, stream=stream, step=step):
                    yield run.took(event)


def last(results: list[TurnResult]) -> TurnResult:
    """A run's last result, carrying the results of the steps before it (``TurnResult.steps``)."""
    return replace(results[-1], steps=tuple(results[:-1])) if len(results) > 1 else results[-1]
