"""The public shell: a conversation holds a snapshot and runs turns (see :mod:`llm_fsm.turn`).

A turn makes one model call when the reply is valid. An invalid reply (unparseable, unknown or
disallowed target, unmet condition, a value its schema refuses) gets up to ``max_corrections``
corrective calls whose prompt says exactly what was wrong; failed acceptance checks get up to the
state's ``max_retries`` calls with feedback; no turn makes more than ``max_calls_per_turn`` calls.
If the reply is still invalid, the conversation stays where it is, keeps the context updates that
were valid, and answers with ``fallback_message``: a message that describes a state the
conversation did not enter is never returned. A turn that fails raises and changes nothing.

Handlers (:mod:`llm_fsm.hooks`) may pause the conversation by raising ``Break``; ``resume`` with
the pending event's token continues it, exactly once.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Union

from pydantic import ValidationError

from llm_fsm import memory, subflow_turns, subflows, summaries, telemetry
from llm_fsm.definition import FSMDefinition
from llm_fsm.engine import Exchange, PendingEvent, Snapshot, initial_snapshot, with_uid, write
from llm_fsm.errors import (
    ConversationEnded,
    ConversationError,
    ConversationPaused,
    DefinitionError,
    EmptyMessageError,
    LLMError,
    Problem,
)
from llm_fsm.hooks import Await, Awaited, Hooks, logger
from llm_fsm.jsonfiles import validation_summary
from llm_fsm.llm import LLMClient, LLMResponse, StreamingLLMClient
from llm_fsm.prompt import PromptBuilder
from llm_fsm.streaming import MessageDelta, MessageReset, MessageWatcher, ToolCall, ToolResult
from llm_fsm.telemetry import NO_TRACE, NoTrace
from llm_fsm.tools import calling
from llm_fsm.tools.calling import ToolMode, ToolRun
from llm_fsm.turn import (
    DEFAULT_FALLBACK,
    Call,
    Checkpoint,
    RunTools,
    Step,
    TurnResult,
    TurnRunner,
    TurnSettings,
    fire_error,
    resume_turn,
    summary_steps,
)
from llm_fsm.values import as_json_data, blank, clean_text
from llm_fsm.wording import did_you_mean

if TYPE_CHECKING:
    from llm_fsm.telemetry.spans import TurnTrace

StreamEvent = Union["MessageDelta", "MessageReset", "ToolCall", "ToolResult", "TurnResult"]
# what a step produces: text deltas (when a reply streams), then the response; what an await gave; tool runs
Item = str | LLMResponse | Awaited | list[ToolRun] | summaries.CallFailed | None  # None: a checkpoint was saved

__all__ = ["DEFAULT_FALLBACK", "Conversation", "StreamEvent", "TurnResult"]

_default_builder: PromptBuilder | None = None


def refuse_empty(user: str) -> None:
    """Raise :class:`EmptyMessageError` for a message with no text: its turn would show the model an
    empty user turn, which reads as the conversation's beginning."""
    if blank(user):
        what = "empty" if not user else "only whitespace" if not user.strip() else "only invisible characters"
        raise EmptyMessageError(f"the user's message is {what}: there is nothing to answer")


def _shared_builder() -> PromptBuilder:
    # One Jinja environment for every conversation that uses the packaged templates: it caches
    # compiled templates, so only the first conversation of a process pays for compiling them.
    global _default_builder
    if _default_builder is None:
        _default_builder = PromptBuilder()
    return _default_builder


class Conversation:
    """One conversation with a definition, driven by ``llm``. Not safe for two turns at once.

    ``hooks`` holds the handlers and named checks (share one :class:`Hooks` between the
    conversations of a runtime); every handler and Python check the definition names must be
    registered there, or construction fails with a :class:`DefinitionError` naming them.
    ``id`` names the conversation in traces (see :mod:`llm_fsm.telemetry`); a stored conversation
    gets its store id.

    Summaries (:mod:`llm_fsm.summaries`, when the definition asks for them) are written by
    ``summary_llm`` (default: ``llm``), at the end of the turn that made them due, or with
    ``background_summaries=True`` after it returned (:meth:`summarize_pending`, or a task ``asend`` starts).
    """

    def __init__(
        self,
        definition: FSMDefinition,
        llm: LLMClient,
        state: str | None = None,
        context: Mapping[str, Any] | None = None,
        *,
        hooks: Hooks | None = None,
        max_corrections: int = 1,
        max_calls_per_turn: int = 8,
        fallback_message: str = DEFAULT_FALLBACK,
        prompt: PromptBuilder | None = None,
        guided: bool | None = None,
        id: str | None = None,  # the conversation's id, as a store or the caller knows it
        summary_llm: LLMClient | None = None,
        background_summaries: bool = False,
    ) -> None:
        if state is not None and state not in definition.states:
            raise ConversationError(f"unknown state '{state}'", state=state)
        if id is not None and not isinstance(id, str):
            raise TypeError(f"a conversation's id is a str, not {type(id).__name__} ({id!r:.40})")
        self.id = id  # in traces (gen_ai.conversation.id); a StoredConversation sets it to its id
        self.definition = definition
        self.llm = llm
        self.hooks = hooks if hooks is not None else Hooks()
        tools = _check_bindings(definition, self.hooks)
        self.settings = TurnSettings(
            prompt or _shared_builder(), max(0, max_corrections), max(1, max_calls_per_turn), fallback_message,
            tools=tools, tool_mode=lambda: tool_mode(self.llm),
            guided=bool(getattr(llm, "guided", False)) if guided is None else guided,
            summary_llm=summary_llm, background_summaries=background_summaries,
        )  # fmt: skip
        self._snapshot = initial_snapshot(definition, state, dict(context or {}))
        self._stacked = subflows.has_subflows(definition)
        if self._stacked:
            self._frame_settings = _bind_subflows(definition, self.hooks, self.settings)
            self._snapshot = subflow_turns.entered(definition, self._snapshot)
        self._busy = False
        # where a checkpoint a turn makes is saved before the turn goes on (a StoredConversation sets it)
        self.checkpoints: CheckpointSink | None = None
        self._summary_task: asyncio.Task[summaries.SummaryRun | None] | None = None
        self.last_summary: summaries.SummaryRun | None = None  # the last summary call made, in a turn or not

    @property
    def prompt(self) -> PromptBuilder:
        return self.settings.prompt

    # -- hooks ----------------------------------------------------------------------------------

    def on(self, *timings: Any, **filters: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register a handler on this conversation (see :meth:`Hooks.on`)."""
        return self.hooks.on(*timings, **filters)

    # -- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._snapshot.state

    @property
    def context(self) -> dict[str, Any]:
        """A copy of the context: changing it does not change the conversation."""
        return copy.deepcopy(self._snapshot.context)

    @property
    def provenance(self) -> dict[str, Any]:
        """Who set each context key, and on which turn."""
        return {k: v.model_dump() for k, v in self._snapshot.provenance.items()}

    @property
    def history(self) -> tuple[Exchange, ...]:
        return self._snapshot.history

    @property
    def ended(self) -> bool:
        return self._snapshot.status == "ended"

    @property
    def paused(self) -> bool:
        return self._snapshot.status == "paused"

    @property
    def pending(self) -> PendingEvent | None:
        """The event the conversation waits for while paused (reason, payload, token), else None."""
        return self._snapshot.pending

    @property
    def status(self) -> str:
        return self._snapshot.status

    @property
    def frames(self) -> list[dict[str, Any]]:
        """Where the conversation is: ``{"definition", "state"}`` of the root, then of each
        sub-conversation under way (the last one talks; see :mod:`llm_fsm.subflows`)."""
        return subflows.frames(self.definition, self._snapshot)

    def snapshot(self) -> Snapshot:
        """The whole conversation as an immutable, JSON-serialisable model."""
        return self._snapshot

    @property
    def memory(self) -> dict[str, str]:
        """Every working-memory slot's text (a copy; see :mod:`llm_fsm.memory`)."""
        return memory.current(self.definition, self._snapshot)

    @property
    def summary(self) -> str:
        """The running summary of the exchanges summarised so far ("" before the first)."""
        return self._snapshot.summary.text

    @property
    def summary_pending(self) -> bool:
        """Whether exchanges are due to be summarised (see :meth:`summarize_pending`)."""
        return self._snapshot.summary.pending

    @classmethod
    def restore(
        cls,
        snapshot: Snapshot | Mapping[str, Any] | str,
        definition: FSMDefinition,
        llm: LLMClient,
        *,
        allow_changed_definition: bool = False,
        strict_definition: bool = False,
        **options: Any,
    ) -> Conversation:
        """A conversation continuing from ``snapshot`` (the model, its dict, or its JSON text).

        A snapshot taken on another version of ``definition`` restores when only its prose changed
        (descriptions, persona, purpose, instructions, examples); a change to its structure (states,
        transitions, conditions, keys, checks) raises :class:`ConversationError` naming what changed,
        unless ``allow_changed_definition``. ``strict_definition``: any change raises.
        """
        snap = with_uid(_as_snapshot(snapshot))
        if snap.state not in definition.states:
            raise ConversationError(
                f"snapshot state '{snap.state}' is not in definition '{definition.name}'", state=snap.state
            )
        saved = (snap.definition_hash, snap.definition_outline)
        changes = definition.blocking_changes(*saved, strict=strict_definition, name=snap.definition_name)
        if changes and not allow_changed_definition:
            if snap.definition_name != definition.name:
                message = f"this snapshot was taken with another definition ('{snap.definition_name}'), not "
                message += f"'{definition.name}' (pass allow_changed_definition=True to restore it anyway)"
            else:
                prose_only = strict_definition and not definition.blocking_changes(*saved)
                why = "refused because of strict_definition=True"
                if not prose_only:
                    why = "pass allow_changed_definition=True to restore anyway"
                message = f"the definition '{definition.name}' changed since this snapshot was taken: "
                message += f"{'; '.join(changes)} ({why})"
            raise ConversationError(message, state=snap.state)
        if snap.definition_hash != definition.content_hash:  # from now on it runs on this definition
            snap = snap.model_copy(
                update={"definition_hash": definition.content_hash, "definition_outline": definition.outline}
            )
        conversation = cls(definition, llm, **options)
        strict = strict_definition
        conversation._snapshot = subflow_turns.check_restore(
            definition, snap, allow_changed=allow_changed_definition, strict=strict
        )
        return conversation

    def update_context(self, delta: Mapping[str, Any]) -> None:
        """Set (or, with None, delete) context keys from code, outside any turn (provenance ``user_code``)."""
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)
        snap = self._snapshot
        values = as_json_data(delta, source="update_context")
        context, provenance = write(snap.context, snap.provenance, values, by="user_code", turn=snap.turns)
        self._snapshot = snap.model_copy(update={"context": context, "provenance": provenance})

    def update_memory(self, delta: Mapping[str, Any]) -> None:
        """Write working-memory slots from code, outside any turn (None: back to the slot's initial text).

        Each slot must be declared and the value text within its ``max_chars``, or
        :class:`~llm_fsm.errors.MemoryValueError` names the slot and nothing is written."""
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)
        written = memory.code_update(self.definition, self._snapshot.memory, delta)
        self._snapshot = self._snapshot.model_copy(update={"memory": written})

    # -- summaries ------------------------------------------------------------------------------

    def summarize_pending(self) -> summaries.SummaryRun | None:
        """Make the summary call that is due, now (one call: a backlog longer than ``max_exchanges`` takes
        several); None when nothing is due. A failed call is reported in the result, never raised.

        With ``background_summaries=True``, call it once the turn's reply is shown: the next turn makes
        it otherwise, before its own model call."""
        self._no_summary_running("summarize_pending()")
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)
        before = self._snapshot
        after, run = _drive_summary(self.llm, summary_steps(self.definition, before, self.settings))
        return self._apply_summary(before, after, run)

    async def asummarize_pending(self) -> summaries.SummaryRun | None:
        """Wait for the summary ``asend`` started in the background; if none runs, make the one that is due."""
        if self._summary_task is not None:
            task, self._summary_task = self._summary_task, None
            return await task
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)
        before = self._snapshot
        after, run = await _adrive_summary(self.llm, summary_steps(self.definition, before, self.settings))
        return self._apply_summary(before, after, run)

    async def aclose(self) -> None:
        """Wait for a summary running in the background (call it before the event loop ends)."""
        if self._summary_task is not None:
            task, self._summary_task = self._summary_task, None
            await task

    def _apply_summary(
        self, before: Snapshot, after: Snapshot, run: summaries.SummaryRun | None
    ) -> summaries.SummaryRun | None:
        if run is not None:
            self.last_summary = run
            merged = summaries.applied(self._snapshot, before, after)
            if merged is not None:
                self._snapshot = merged
        return run

    def _no_summary_running(self, what: str) -> None:
        if self._summary_task is not None and not self._summary_task.done():
            raise ConversationError(
                f"a summary is being written in the background: await asummarize_pending() before {what}",
                state=self.state,
            )

    async def _background_summary(self) -> summaries.SummaryRun | None:
        before = self._snapshot
        try:
            after, run = await _adrive_summary(self.llm, summary_steps(self.definition, before, self.settings))
        except Exception:  # a bug, not the call (whose failures are reported): the next turn tries again
            logger.exception("the background summary failed")
            return None
        return self._apply_summary(before, after, run)

    async def _settle_summary(self) -> None:
        """Before a turn: the background summary finishes first (never two at once, none lost)."""
        if self._summary_task is not None:
            task, self._summary_task = self._summary_task, None
            await task

    # -- turns ----------------------------------------------------------------------------------

    def start(self) -> TurnResult:
        """The opening message of the current state, with one model call."""
        return self._complete(self._steps(None))

    def send(self, text: str) -> TurnResult:
        """Answer the user's ``text``: one model call when the reply is valid."""
        return self._complete(self._steps(text))

    def resume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        """Continue a paused conversation: merge ``result`` into the context, then one model call.

        Works once per token: a second call with the same token raises :class:`ResumeError` and
        changes nothing. If the model call fails, nothing changes and the token stays valid.
        """
        return self._complete(self._resume_steps(token, result))

    def stream(self, text: str | None = None) -> Iterator[StreamEvent]:
        """Run a turn (``text=None``: the opening) and yield its events as they happen.

        Yields :class:`MessageDelta` for message text whose transition has been checked,
        :class:`MessageReset` if shown text must be discarded, and last the :class:`TurnResult`.
        The deltas after the last reset add up to the result's message. Closing the iterator
        early leaves the conversation exactly as it was before the turn.
        """
        return self._run(self._steps(text), stream=True)

    async def astart(self) -> TurnResult:
        return await _alast(self._arun(self._steps(None), stream=False))

    async def asend(self, text: str) -> TurnResult:
        return await _alast(self._arun(self._steps(text), stream=False))

    async def aresume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        return await _alast(self._arun(self._resume_steps(token, result), stream=False))

    def astream(self, text: str | None = None) -> AsyncIterator[StreamEvent]:
        """The async form of :meth:`stream`."""
        return self._arun(self._steps(text), stream=True)

    # -- running turns: one loop, driven sync or async ------------------------------------------

    def _complete(self, steps: Callable[[], TurnRunner]) -> TurnResult:
        """A turn with no events to show: the same drive, without the event machinery (send's speed)."""
        with _Drive(self, steps(), stream=False, sync=True) as turn:
            return turn.run_to_end()

    def _run(self, steps: Callable[[], TurnRunner], *, stream: bool) -> Iterator[StreamEvent]:
        with _Drive(self, steps(), stream, sync=True) as turn:
            try:
                yield from turn.take(None)
                while turn.call is not None:
                    for item in _items(self.llm, turn.call, stream, turn.trace):
                        yield from turn.take(item)
            except Exception:
                yield from turn.withdraw()
                raise

    async def _arun(self, steps: Callable[[], TurnRunner], *, stream: bool) -> AsyncIterator[StreamEvent]:
        await self._settle_summary()
        with _Drive(self, steps(), stream, sync=False) as turn:
            try:
                for event in turn.take(None):
                    yield event
                while turn.call is not None:
                    if isinstance(turn.call, Checkpoint):  # saved, awaited, before the turn goes on
                        await turn.hold_async(turn.call)
                    async for item in _aitems(self.llm, turn.call, stream, turn.trace):
                        for event in turn.take(item):
                            yield event
            except Exception:
                for event in turn.withdraw():
                    yield event
                raise

    def _steps(self, user: str | None) -> Callable[[], TurnRunner]:
        """The turn's runner, made once the conversation may take the turn (checked when the turn runs)."""

        def steps() -> TurnRunner:
            self._may_take(user)
            self._no_summary_running("a sync turn")
            text = None if user is None else clean_text(user)  # a lone surrogate could never be saved
            if self._stacked:
                return subflow_turns.StackTurn(self.definition, self._snapshot, self._runtime(), user=text)  # type: ignore[return-value]  # stands in for it
            return TurnRunner(self.definition, self._snapshot, self.hooks, self.settings, user=text, handle=self)

        return steps

    def _resume_steps(self, token: str, result: Mapping[str, Any] | None) -> Callable[[], TurnRunner]:
        def steps() -> TurnRunner:
            self._may_take(None, resuming=True)
            self._no_summary_running("a sync turn")
            if self._stacked:
                runtime, resume = self._runtime(), (token, {} if result is None else result)
                return subflow_turns.StackTurn(self.definition, self._snapshot, runtime, user=None, resume=resume)  # type: ignore[return-value]  # stands in for it
            args = (self.definition, self._snapshot, self.hooks, self.settings, token, {} if result is None else result)
            return resume_turn(*args, handle=self)

        return steps

    def _runtime(self) -> subflow_turns.Runtime:
        settings = self._frame_settings
        return subflow_turns.Runtime(self.hooks, lambda d: settings.get(id(d), self.settings), self)

    def _may_take(self, user: str | None, *, resuming: bool = False) -> None:
        """Raise unless the conversation can take this turn now."""
        if self._busy:
            raise ConversationError("another turn of this conversation is in progress", state=self.state)
        if resuming:
            return  # the engine checks the pause and the token
        if self.ended:
            raise ConversationEnded(f"the conversation has ended in state '{self.state}'", state=self.state)
        if self.paused:
            reason = self.pending.reason if self.pending else "paused"
            raise ConversationPaused(
                f"the conversation is paused ({reason}); call resume() with its token", state=self.state
            )
        if user is None and self._snapshot.history:
            raise ConversationError("start() was already called; use send()", state=self.state)
        if user is not None and not isinstance(user, str):
            raise TypeError(f"send() takes a str, not {type(user).__name__}")
        if user is not None:
            refuse_empty(user)

    def _commit(self, outcome: tuple[Snapshot, TurnResult], *, running: bool = False) -> TurnResult:
        """Hold the turn's snapshot; ``running``: in an event loop, where a summary may start in the background."""
        self._snapshot, result = outcome
        if result.summary is not None:
            self.last_summary = result.summary
        if running and self.settings.background_summaries and self._snapshot.summary.pending:
            self._summary_task = asyncio.get_running_loop().create_task(self._background_summary())
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "turn %d: %s -> %s, %d call(s), %d rejected, context %s",
                result.turn, result.previous_state, result.state, result.llm_calls, len(result.rejected),
                self.definition.masked(result.context),
            )  # fmt: skip
        return result


class _Drive:
    """One turn of a conversation, fed by a driver with what each model call produces.

    The driver (``_run`` or ``_arun``) makes the calls; this object holds everything else: the
    turn's generator, the message shown so far, and the busy flag, and it turns items into events.
    """

    def __init__(self, conversation: Conversation, runner: TurnRunner, stream: bool, *, sync: bool) -> None:
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

    def __enter__(self) -> _Drive:
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
            (response,) = _items(llm, outcome, False, self.trace)
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


def _items(llm: LLMClient, step: Step, stream: bool, trace: TurnTrace | NoTrace) -> Iterable[Item]:
    """What the model produces for a call. The model is called here, outside the turn's
    generator: a StopIteration it raises is its own error, not the end of the turn."""
    assert not isinstance(step, Checkpoint)  # the sync drive saves checkpoints itself (_Drive._advance)
    if isinstance(step, Await):  # the drive refused async hooks already; a sync hook returned an awaitable
        step.close()
        raise ConversationError(f"{step.what} returned an awaitable: use astart/asend/astream/aresume")
    if isinstance(step, RunTools):
        return (calling.run_batch(step.calls, trace.tools(step.calls)),)
    if isinstance(step, Call) and step.kind == "summary":  # a failure comes back as summaries.CallFailed
        return (summaries.complete(lambda: trace.complete(step.llm or llm, step)),)
    if stream and step.preview is not None and isinstance(llm, StreamingLLMClient):
        return trace.stream(step, llm.stream_complete(step.request))
    return (trace.complete(llm, step),)


async def _aitems(llm: LLMClient, step: Step, stream: bool, trace: TurnTrace | NoTrace) -> AsyncIterator[Item]:
    if isinstance(step, Checkpoint):  # saved by the driver already: the turn goes on
        yield None
    elif isinstance(step, Await):
        try:
            yield Awaited(await step.awaitable)
        except Exception as exc:  # the turn applies the handler's policy, as for a sync handler
            yield Awaited(error=exc)
    elif isinstance(step, RunTools):
        yield await calling.arun_batch(step.calls, trace.tools(step.calls))
    elif isinstance(step, Call) and step.kind == "summary":
        yield await summaries.acomplete(trace.acomplete(step.llm or llm, step))
    elif stream and step.preview is not None and isinstance(llm, StreamingLLMClient):
        async for item in trace.astream(step, llm.astream_complete(step.request)):
            yield item
    else:
        yield await trace.acomplete(llm, step)


class CheckpointSink(Protocol):
    """Where a conversation's checkpoints are saved as they are made (see :class:`~llm_fsm.turn.Checkpoint`)."""

    def hold(self, snapshot: Snapshot) -> None: ...

    async def ahold(self, snapshot: Snapshot) -> None: ...


def _last(events: Iterator[StreamEvent]) -> TurnResult:
    result = None
    for result in events:  # noqa: B007 (the last event is the turn's result)
        pass
    return _result(result)


async def _alast(events: AsyncIterator[StreamEvent]) -> TurnResult:
    result = None
    async for result in events:  # noqa: B007
        pass
    return _result(result)


def _result(event: StreamEvent | None) -> TurnResult:
    if not isinstance(event, TurnResult):
        raise LLMError("the model's stream ended without a response")
    return event


def _drive_summary(llm: LLMClient, steps: Any) -> tuple[Snapshot, summaries.SummaryRun | None]:
    """Run :func:`~llm_fsm.turn.summary_steps` outside a turn, sync."""
    try:
        step = next(steps)
        while True:
            step = steps.send(summaries.complete(partial((step.llm or llm).complete, step.request)))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped


async def _adrive_summary(llm: LLMClient, steps: Any) -> tuple[Snapshot, summaries.SummaryRun | None]:
    try:
        step = next(steps)
        while True:
            step = steps.send(await summaries.acomplete((step.llm or llm).acomplete(step.request)))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped


def tool_mode(llm: LLMClient) -> ToolMode:
    """How ``llm`` takes tool calls: its ``tool_mode()`` if it has one, else the JSON form (any model can)."""
    mode = getattr(llm, "tool_mode", None)
    return mode() if callable(mode) else "json"


def _check_bindings(definition: FSMDefinition, hooks: Hooks) -> dict[str, calling.BoundTool]:
    """Every handler, Python check and tool the definition names must be registered: the bound tools."""
    tools, problems = calling.bind(definition, hooks) if definition.tools or _lists_tools(definition) else ({}, [])
    named = sorted(h.name for h in hooks.handlers if h.named)
    for sid, state in definition.states.items():
        for i, name in enumerate(state.handlers):
            if hooks.named_handler(name) is None:
                message = f"state '{sid}' names handler '{name}', which is not registered"
                problems.append(
                    Problem(
                        f"states.{sid}.handlers[{i}]", message, hint=did_you_mean(name, named), code="unbound_handler"
                    )
                )
        for i, check in enumerate(state.checks):
            if check.kind == "python" and check.name not in hooks.checks:
                message = f"state '{sid}' uses python check '{check.name}', which is not registered"
                hint = did_you_mean(check.name, sorted(hooks.checks))
                problems.append(Problem(f"states.{sid}.checks[{i}].name", message, hint=hint, code="unbound_check"))
    if problems:
        raise DefinitionError(problems, source=definition.name)
    return tools


def _bind_subflows(definition: FSMDefinition, hooks: Hooks, settings: TurnSettings) -> dict[int, TurnSettings]:
    """The turn settings of each sub-definition (its own tools), once each is known to load and be bound."""
    if problems := subflows.unattached(definition):
        raise DefinitionError(problems, source=definition.name)
    bound, problems = {}, []
    for sub in subflows.tree(definition):
        try:
            bound[id(sub)] = replace(settings, tools=_check_bindings(sub, hooks))
        except DefinitionError as exc:  # name the sub-definition: its paths are not the root's
            problems += [replace(p, source=p.source or f"subflow '{sub.name}'") for p in exc.problems]
    if problems:
        raise DefinitionError(problems, source=definition.name)
    return bound


def _lists_tools(definition: FSMDefinition) -> bool:
    return any(state.tools for state in definition.states.values())


def _as_snapshot(value: Snapshot | Mapping[str, Any] | str) -> Snapshot:
    if isinstance(value, Snapshot):
        return value
    if not isinstance(value, str | Mapping):
        raise ConversationError(f"not a snapshot: a Snapshot, its dict or its JSON text, not a {type(value).__name__}")
    try:
        if isinstance(value, str):
            return Snapshot.model_validate_json(value)
        return Snapshot.model_validate(dict(value))
    except ValidationError as exc:
        raise ConversationError(f"not a valid snapshot: {validation_summary(exc)}") from None
