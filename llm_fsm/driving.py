"""Opening a turn and driving it: one function opens any kind of turn (:func:`open_turn`), and one
drive (:class:`Drive`) feeds it, sync or async, with what each of its steps produced.

httpx's habit: the logic is in one generator (the turn, :mod:`llm_fsm.turn.runner`); the drivers here only
run its steps (:func:`items` sync, :func:`aitems` async) and turn what they produce into events. The
summary calls made outside a turn are driven by the same step runners (:func:`run_steps`, :func:`arun_steps`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Generator, Iterable, Iterator, Mapping
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, Union

from llm_fsm import telemetry
from llm_fsm.definition.models import FSMDefinition, Transition
from llm_fsm.errors import ConversationError, LLMError
from llm_fsm.hooks import Await, Awaited, Hooks, logger
from llm_fsm.llm import LLMClient, LLMResponse, StreamingLLMClient
from llm_fsm.memory import summaries
from llm_fsm.snapshot import Snapshot
from llm_fsm.streaming import MessageDelta, MessageReset, MessageWatcher, ToolCall, ToolResult
from llm_fsm.subflows.stack import StackTurn
from llm_fsm.telemetry import NO_TRACE, NoRun, NoTrace
from llm_fsm.tools import calling
from llm_fsm.tools.calling import ToolRun
from llm_fsm.turn.firing import fire_error
from llm_fsm.turn.runner import plain_turn, summary_steps
from llm_fsm.turn.steps import Call, Checkpoint, Runtime, RunTools, Step, Turn, TurnResult, TurnSettings
from llm_fsm.values import clean_text

if TYPE_CHECKING:
    from llm_fsm.telemetry.runs import RunTrace
    from llm_fsm.telemetry.spans import TurnTrace

StreamEvent = Union["MessageDelta", "MessageReset", "ToolCall", "ToolResult", "TurnResult"]
# what a step produces: text deltas (when a reply streams), then the response; what an await gave; tool
# runs; a summary call's failure; None: a checkpoint was saved
Item = str | LLMResponse | Awaited | list[ToolRun] | summaries.CallFailed | None
T = TypeVar("T")


def open_turn(
    definition: FSMDefinition,
    snapshot: Snapshot,
    runtime: Runtime,
    *,
    user: str | None,
    resume: tuple[str, Mapping[str, Any]] | None = None,
    move: Transition | None = None,
) -> Turn:
    """The turn from ``snapshot``: ``user`` text (None: the opening, or a turn of a state that acts), the resume
    of a pause with ``(token, result)``, or an automatic ``move``; of a conversation with sub-conversations
    (``runtime.stacked``, where a run takes no steps of its own) or not."""
    if runtime.stacked:
        return StackTurn(definition, snapshot, runtime, user=user, resume=resume)
    settings = runtime.settings(definition)
    return plain_turn(definition, snapshot, runtime, settings, user=user, resume=resume, move=move)


class CheckpointSink(Protocol):
    """Where a conversation's checkpoints are saved as they are made (see :class:`~llm_fsm.turn.steps.Checkpoint`)."""

    def hold(self, snapshot: Snapshot) -> None: ...

    async def ahold(self, snapshot: Snapshot) -> None: ...


class Host(Protocol):
    """What a drive needs of the conversation whose turn it drives (a :class:`~llm_fsm.Conversation`):
    what its turns are opened with, the rule whether one may start, and the busy flag, snapshot and last
    summary, which the drive sets."""

    id: str | None
    definition: FSMDefinition
    hooks: Hooks
    llm: LLMClient
    checkpoints: CheckpointSink | None
    settings: TurnSettings
    last_summary: summaries.SummaryRun | None
    _busy: bool
    _snapshot: Snapshot
    _runtime: Runtime
    _summaries: SummaryCalls
    run_trace: RunTrace | NoRun  # the trace of the run under way (llm_fsm.running), else telemetry.NO_RUN

    @property
    def state(self) -> str: ...

    def _may_take(self, user: str | None, *, resuming: bool = False, going_on: bool = False) -> None: ...


class Drive:
    """One turn of a conversation, fed by a driver with what each model call produces.

    The driver (:func:`complete`, :func:`events` or :func:`aevents`) makes the calls; this object holds
    everything else: the turn's generator, the message shown so far, and the busy flag, and it turns
    items into events; it commits the turn into the conversation as the result is handed over.
    """

    def __init__(self, conversation: Host, runner: Turn, stream: bool, *, sync: bool) -> None:
        # refused before any model call is paid for: a sync drive could not await the handler when it came
        if sync and (names := conversation.hooks.async_names()):
            raise ConversationError(
                f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} async: use astart/asend/astream/aresume",
                state=conversation.state,
            )
        self.conversation = conversation
        self.runner = runner
        self.sync = sync
        self.steps = runner.run()
        self.stream = stream
        self.shown = ""
        self.watcher: MessageWatcher | None = None
        self.call: Step | None = None
        self.trace: TurnTrace | NoTrace = NO_TRACE

    def __enter__(self) -> Drive:
        # busy for the whole turn: another turn, update_context and a summary call are refused meanwhile
        self.conversation._busy = True
        self.trace = self.runner.trace = telemetry.start_turn(self.conversation, self.runner)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        conversation = self.conversation
        try:
            if isinstance(error, Exception) and self.runner.tool_runs:  # the caller may have to undo what ran
                error.tool_runs = tuple(self.runner.tool_runs)  # type: ignore[attr-defined]  # read by callers
            if error is not None:
                fire_error(conversation.definition, conversation.hooks, conversation.state, error, handle=conversation)
        finally:
            self.steps.close()
            conversation._busy = False
            self.trace.end(error)

    def take(self, item: Item | None) -> Iterable[StreamEvent]:
        """Events for one item of the current call; after its response (or at the start: None), for
        the turn's next step, which may be its end without any call (a pause before the call)."""
        if isinstance(item, str):
            if self.watcher is not None and (delta := self.watcher.feed(item)):
                return (self._show(delta),)
            return ()
        events: list[StreamEvent] = []
        if self.watcher is not None and (rest := self.watcher.flush()):
            events.append(self._show(rest))
        call = self.call = self._advance(item)
        if isinstance(item, list) and self.stream:  # the tools that ran, before what the turn does next (its end too)
            events += [ToolResult(run) for run in item]
        if isinstance(call, tuple):
            self.call = None
            return chain(events, self._end(*call))  # lazily: the commit waits until the result is taken
        if isinstance(call, RunTools):
            if self.stream:
                events += [ToolCall(p.call.id, p.call.name, p.arguments) for p in call.calls]
        # another reply call means the last reply was not accepted: the text shown from it is taken back
        elif self.shown and isinstance(call, Call) and call.kind == "reply":
            self.shown = ""
            events.append(MessageReset("the reply was not accepted"))
        return events

    def run_to_end(self) -> TurnResult:
        """Drive the whole turn, making each call in one piece; commit and return its result."""
        llm, outcome = self.conversation.llm, self._advance(None)
        while not isinstance(outcome, tuple):
            (response,) = items(llm, outcome, False, self.trace)
            outcome = self._advance(response)
        return self._commit(outcome)

    def withdraw(self) -> Iterator[MessageReset]:
        """Before a failed turn's error: take back any text shown (the turn changed nothing)."""
        if self.shown:
            self.shown = ""
            yield MessageReset("the turn failed")

    def hold_async(self, checkpoint: Checkpoint) -> Awaitable[None]:
        """Save ``checkpoint`` in the async drive (the turn takes it on when the driver next asks for a step)."""
        sink = self.conversation.checkpoints
        assert sink is not None  # _advance hands a checkpoint to the driver only when there is a sink
        return sink.ahold(checkpoint.snapshot)

    def _advance(self, response: Item) -> Any:
        """The turn's next step (a reply call is watched when its message may stream), or its outcome.

        A checkpoint is held from now on, whatever the rest of the turn does, and saved by the sink before
        the turn goes on: here (sync), or by the async driver, to which it is handed as a step."""
        try:
            call = next(self.steps) if response is None else self.steps.send(response)
            while isinstance(call, Checkpoint):
                # held in the conversation at once: if the rest of the turn fails, an approved tool call stays
                # approved and is not run again
                self.conversation._snapshot = call.snapshot
                sink = self.conversation.checkpoints
                if sink is not None and not self.sync:
                    return call
                if sink is not None:
                    sink.hold(call.snapshot)
                call = self.steps.send(None)
        except StopIteration as done:
            return done.value  # (snapshot, result): committed by _end, as the result is handed over
        preview = getattr(call, "preview", None)
        self.watcher = MessageWatcher(preview) if self.stream and preview is not None else None
        return call

    def _show(self, text: str) -> MessageDelta:
        self.shown += text
        return MessageDelta(text)

    def _end(self, snapshot: Snapshot, result: TurnResult) -> Iterator[StreamEvent]:
        """The text not shown yet (all of it when nothing streamed), then the result. The turn is
        committed only as its result is handed over: a consumer that stops before changes nothing."""
        if self.stream and self.shown != result.message:
            # the final message does not go on from what streamed (a fallback, a pause's message): take it back
            if not result.message.startswith(self.shown):
                self.shown = ""
                yield MessageReset("the turn ended with another message")
            if rest := result.message[len(self.shown) :]:
                yield self._show(rest)
        yield self._commit((snapshot, result))

    def _commit(self, outcome: tuple[Snapshot, TurnResult]) -> TurnResult:
        """Hold the turn's snapshot in the conversation; in an event loop, a summary it made due may
        start in the background."""
        conversation = self.conversation
        conversation._snapshot, result = outcome
        if result.summary is not None:
            conversation.last_summary = result.summary
        summary_due = conversation.settings.background_summaries and conversation._snapshot.summary.pending
        # only in an event loop, where a task can run it; a sync conversation's next turn makes it first
        if not self.sync and summary_due:
            conversation._summaries.start()
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "turn %d: %s -> %s, %d call(s), %d rejected, context %s",
                result.turn, result.previous_state, result.state, result.llm_calls, len(result.rejected),
                conversation.definition.masked(result.context),
            )  # fmt: skip
        self.trace.committed(result)
        return result


# -- the drivers: one turn, sync or async --------------------------------------------------------

Resume = tuple[str, Mapping[str, Any] | None]  # a pause's token, and the result to resume it with
# a step of a run that nobody typed for: a turn of a state that acts ("act"), or an automatic move
Going = Transition | Literal["act"]


def complete(
    conversation: Host, user: str | None, resume: Resume | None = None, *, step: Going | None = None
) -> TurnResult:
    """A turn with no events to show: the same drive, without the event machinery (send's speed)."""
    with Drive(conversation, opened(conversation, user, resume, step), stream=False, sync=True) as drive:
        return drive.run_to_end()


def events(
    conversation: Host, user: str | None, resume: Resume | None = None, *, stream: bool, step: Going | None = None
) -> Iterator[StreamEvent]:
    """A turn, sync, as its events (the message's deltas while it streams, then the result); the
    turn is opened when the first event is asked for."""
    with Drive(conversation, opened(conversation, user, resume, step), stream, sync=True) as drive:
        try:
            yield from drive.take(None)
            while drive.call is not None:
                for item in items(conversation.llm, drive.call, stream, drive.trace):
                    yield from drive.take(item)
        except Exception:
            yield from drive.withdraw()
            raise


async def aevents(
    conversation: Host, user: str | None, resume: Resume | None = None, *, stream: bool, step: Going | None = None
) -> AsyncIterator[StreamEvent]:
    """A turn, async, as its events; a summary still running in the background ends first."""
    await conversation._summaries.settle()  # never two summaries at once, none lost
    with Drive(conversation, opened(conversation, user, resume, step), stream, sync=False) as drive:
        try:
            for event in drive.take(None):
                yield event
            while drive.call is not None:
                if isinstance(drive.call, Checkpoint):  # saved, awaited, before the turn goes on
                    await drive.hold_async(drive.call)
                async for item in aitems(conversation.llm, drive.call, stream, drive.trace):
                    for event in drive.take(item):
                        yield event
        except Exception:
            for event in drive.withdraw():
                yield event
            raise


def opened(conversation: Host, user: str | None, resume: Resume | None, step: Going | None = None) -> Turn:
    """The conversation's turn, once it may take it: ``user`` text (None: the opening), a resume, or a ``step``
    of a run (:mod:`llm_fsm.running`)."""
    conversation._may_take(user, resuming=resume is not None, going_on=step is not None)
    conversation._summaries.refuse_while_running("a sync turn")
    text = None if user is None else clean_text(user)  # a lone surrogate could never be saved
    how = None if resume is None else (resume[0], {} if resume[1] is None else resume[1])
    move = step if isinstance(step, Transition) else None
    snapshot, runtime = conversation._snapshot, conversation._runtime
    return open_turn(conversation.definition, snapshot, runtime, user=text, resume=how, move=move)


def items(llm: LLMClient, step: Step, stream: bool, trace: TurnTrace | NoTrace) -> Iterable[Item]:
    """What the model (or the tools) produce for a step, sync. The model is called here, outside the
    turn's generator: a StopIteration it raises is its own error, not the end of the turn."""
    if isinstance(step, Await):  # the drive refused async hooks already; a sync hook returned an awaitable
        step.close()
        raise ConversationError(f"{step.what} returned an awaitable: use astart/asend/astream/aresume")
    if isinstance(step, RunTools):
        return (calling.run_batch(step.calls, trace.tools(step.calls)),)
    assert isinstance(step, Call)  # a checkpoint is held by the drive, never handed here
    if step.kind == "summary":  # a failure comes back as summaries.CallFailed
        return (summaries.complete(lambda: trace.complete(step.llm or llm, step)),)
    if stream and step.preview is not None and isinstance(llm, StreamingLLMClient):
        return trace.stream(step, llm.stream_complete(step.request))
    return (trace.complete(llm, step),)


async def aitems(llm: LLMClient, step: Step, stream: bool, trace: TurnTrace | NoTrace) -> AsyncIterator[Item]:
    """What a step produces, async: an async handler's awaitable is awaited here too."""
    if isinstance(step, Checkpoint):  # saved by the driver already: the turn goes on
        yield None
    elif isinstance(step, Await):
        try:
            yield Awaited(await step.awaitable)
        except Exception as exc:  # the turn applies the handler's policy, as for a sync handler
            yield Awaited(error=exc)
    elif isinstance(step, RunTools):
        yield await calling.arun_batch(step.calls, trace.tools(step.calls))
    elif step.kind == "summary":
        yield await summaries.acomplete(trace.acomplete(step.llm or llm, step))
    elif stream and step.preview is not None and isinstance(llm, StreamingLLMClient):
        async for item in trace.astream(step, llm.astream_complete(step.request)):
            yield item
    else:
        yield await trace.acomplete(llm, step)


def run_steps(llm: LLMClient, steps: Generator[Step, Any, T]) -> T:
    """Run ``steps`` (summary calls outside a turn) to their end, sync, with the turns' step runner."""
    try:
        step = next(steps)
        while True:
            (item,) = items(llm, step, False, NO_TRACE)
            step = steps.send(item)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped


async def arun_steps(llm: LLMClient, steps: Generator[Step, Any, T]) -> T:
    """Run ``steps`` to their end, async, with the turns' step runner."""
    try:
        step = next(steps)
        while True:
            produced = [item async for item in aitems(llm, step, False, NO_TRACE)]  # one: nothing streams
            step = steps.send(produced[-1])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped


def last(events: Iterator[StreamEvent]) -> TurnResult:
    """The turn's result: the last of its events."""
    result = None
    for result in events:  # noqa: B007 (the last event is the turn's result)
        pass
    return _result(result)


async def alast(events: AsyncIterator[StreamEvent]) -> TurnResult:
    result = None
    async for result in events:  # noqa: B007
        pass
    return _result(result)


def _result(event: StreamEvent | None) -> TurnResult:
    if not isinstance(event, TurnResult):
        raise LLMError("the model's stream ended without a response")
    return event


# -- summary calls outside a turn ------------------------------------------------------------------


class SummaryHost(Protocol):
    """What :class:`SummaryCalls` needs of its conversation: the definition, model and settings the
    calls are made with, and the snapshot it brings the summary into."""

    definition: FSMDefinition
    llm: LLMClient
    settings: TurnSettings
    last_summary: summaries.SummaryRun | None
    _snapshot: Snapshot

    def _refuse_busy(self) -> None: ...


class SummaryCalls:
    """A conversation's summary calls outside its turns (see :mod:`llm_fsm.memory.summaries`): made on demand,
    sync or async, or in the background after an async turn (``background_summaries=True``), never two
    at once. A summary is merged into the snapshot the conversation holds when it ends, which turns may
    have moved on meanwhile."""

    def __init__(self, conversation: SummaryHost) -> None:
        self.conversation = conversation
        self.task: asyncio.Task[summaries.SummaryRun | None] | None = None

    def make_now(self) -> summaries.SummaryRun | None:
        """The summary call that is due, made now, sync (not while a turn or another summary runs)."""
        self.refuse_while_running("summarize_pending()")
        self.conversation._refuse_busy()
        return self.make()

    async def awaited_or_made(self) -> summaries.SummaryRun | None:
        """The summary running in the background, awaited; if none runs, the one that is due, made now."""
        if self.task is not None:
            return await self.settle()
        self.conversation._refuse_busy()
        return await self.amake()

    def make(self) -> summaries.SummaryRun | None:
        """The summary call that is due, now (None: nothing was due)."""
        host, before = self.conversation, self.conversation._snapshot
        after, run = run_steps(host.llm, summary_steps(host.definition, before, host.settings))
        return self._apply(before, after, run)

    async def amake(self) -> summaries.SummaryRun | None:
        host, before = self.conversation, self.conversation._snapshot
        after, run = await arun_steps(host.llm, summary_steps(host.definition, before, host.settings))
        return self._apply(before, after, run)

    def start(self) -> None:
        """Make the call that is due in a task of the running event loop."""
        self.task = asyncio.get_running_loop().create_task(self._background())

    async def settle(self) -> summaries.SummaryRun | None:
        """Wait for the summary running in the background, if one runs (its report; None otherwise)."""
        if self.task is None:
            return None
        task, self.task = self.task, None
        return await task

    def refuse_while_running(self, what: str) -> None:
        """Raise while a summary is being written in the background: ``what`` must wait for it."""
        if self.task is not None and not self.task.done():
            raise ConversationError(
                f"a summary is being written in the background: await asummarize_pending() before {what}",
                state=self.conversation._snapshot.state,
            )

    async def _background(self) -> summaries.SummaryRun | None:
        host, before = self.conversation, self.conversation._snapshot
        try:
            after, run = await arun_steps(host.llm, summary_steps(host.definition, before, host.settings))
        except Exception:  # a bug, not the call (whose failures are reported): the next turn tries again
            logger.exception("the background summary failed")
            return None
        return self._apply(before, after, run)

    def _apply(
        self, before: Snapshot, after: Snapshot, run: summaries.SummaryRun | None
    ) -> summaries.SummaryRun | None:
        if run is not None:
            host = self.conversation
            host.last_summary = run
            # merged into the snapshot held now, not the one the call started from: turns may have run
            # meanwhile, and a summary that no longer fits them (None) is dropped
            merged = summaries.applied(host._snapshot, before, after)
            if merged is not None:
                host._snapshot = merged
        return run
