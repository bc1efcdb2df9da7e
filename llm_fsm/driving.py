"""Opening a turn and driving it: one function opens any kind of turn (:func:`open_turn`), and one
drive (:class:`Drive`) feeds it, sync or async, with what each of its steps produced.

httpx's habit: the logic is in one generator (the turn, :mod:`llm_fsm.turn`); the drivers here only
run its steps (:func:`items` sync, :func:`aitems` async) and turn what they produce into events. The
summary calls made outside a turn are driven by the same step runners (:func:`run_steps`, :func:`arun_steps`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Generator, Iterable, Iterator, Mapping
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union

from llm_fsm import summaries, telemetry
from llm_fsm.definition import FSMDefinition
from llm_fsm.engine import Snapshot
from llm_fsm.errors import ConversationError, LLMError
from llm_fsm.firing import fire_error
from llm_fsm.hooks import Await, Awaited, Hooks
from llm_fsm.llm import LLMClient, LLMResponse, StreamingLLMClient
from llm_fsm.steps import Call, Checkpoint, Runtime, RunTools, Step, Turn, TurnResult
from llm_fsm.streaming import MessageDelta, MessageReset, MessageWatcher, ToolCall, ToolResult
from llm_fsm.subflows.stack import StackTurn
from llm_fsm.telemetry import NO_TRACE, NoTrace
from llm_fsm.tools import calling
from llm_fsm.tools.calling import ToolRun
from llm_fsm.turn import TurnRunner, resume_turn

if TYPE_CHECKING:
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
) -> Turn:
    """The turn from ``snapshot``: ``user`` text (None: the opening), or the resume of a pause with
    ``(token, result)``; of a conversation with sub-conversations (``runtime.stacked``) or not."""
    if runtime.stacked:
        return StackTurn(definition, snapshot, runtime, user=user, resume=resume)
    settings = runtime.settings(definition)
    if resume is None:
        return TurnRunner(definition, snapshot, runtime.hooks, settings, user=user, handle=runtime.handle)
    token, result = resume
    return resume_turn(definition, snapshot, runtime.hooks, settings, token, result, handle=runtime.handle)


class CheckpointSink(Protocol):
    """Where a conversation's checkpoints are saved as they are made (see :class:`~llm_fsm.steps.Checkpoint`)."""

    def hold(self, snapshot: Snapshot) -> None: ...

    async def ahold(self, snapshot: Snapshot) -> None: ...


class Host(Protocol):
    """What a drive needs of the conversation whose turn it drives (a :class:`~llm_fsm.Conversation`):
    its busy flag and snapshot, which the drive sets, and its commit."""

    id: str | None
    definition: FSMDefinition
    hooks: Hooks
    llm: LLMClient
    checkpoints: CheckpointSink | None
    _busy: bool
    _snapshot: Snapshot

    @property
    def state(self) -> str: ...

    def _commit(self, outcome: tuple[Snapshot, TurnResult], *, running: bool = False) -> TurnResult: ...


class Drive:
    """One turn of a conversation, fed by a driver with what each model call produces.

    The driver (``Conversation._run`` or ``_arun``) makes the calls; this object holds everything else:
    the turn's generator, the message shown so far, and the busy flag, and it turns items into events.
    """

    def __init__(self, conversation: Host, runner: Turn, stream: bool, *, sync: bool) -> None:
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
        self.conversation._busy = True
        self.trace = self.runner.trace = telemetry.start_turn(self.conversation, self.runner)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        conversation = self.conversation
        try:
            if isinstance(error, Exception) and self.runner.tool_runs:  # the caller may have to undo what ran
                error.tool_runs = tuple(self.runner.tool_runs)  # type: ignore[attr-defined]
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
        if isinstance(call, tuple):
            self.call = None
            return chain(events, self._end(*call))  # lazily: the commit waits until the result is taken
        if isinstance(item, list) and self.stream:  # the tools that ran, before what the turn does next
            events += [ToolResult(run) for run in item]
        if isinstance(call, RunTools):
            if self.stream:
                events += [ToolCall(p.call.id, p.call.name, p.arguments) for p in call.calls]
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
            if not result.message.startswith(self.shown):
                self.shown = ""
                yield MessageReset("the turn ended with another message")
            if rest := result.message[len(self.shown) :]:
                yield self._show(rest)
        yield self._commit((snapshot, result))

    def _commit(self, outcome: tuple[Snapshot, TurnResult]) -> TurnResult:
        result = self.conversation._commit(outcome, running=not self.sync)
        self.trace.committed(result)
        return result


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
        return done.value  # type: ignore[no-any-return]


async def arun_steps(llm: LLMClient, steps: Generator[Step, Any, T]) -> T:
    """Run ``steps`` to their end, async, with the turns' step runner."""
    try:
        step = next(steps)
        while True:
            produced = [item async for item in aitems(llm, step, False, NO_TRACE)]  # one: nothing streams
            step = steps.send(produced[-1])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


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
