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

import copy
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import Any, Union

from llm_fsm.contract import reply_schema
from llm_fsm.definition import FSMDefinition, State
from llm_fsm.engine import Exchange, PendingEvent, Snapshot, apply_delta, initial_snapshot, merge, record
from llm_fsm.errors import (
    ConversationEnded,
    ConversationError,
    ConversationPaused,
    DefinitionError,
    LLMError,
    Problem,
    ResumeError,
)
from llm_fsm.hooks import Hooks, Invocation, call, logger, selected
from llm_fsm.llm import LLMClient, LLMResponse, StreamingLLMClient
from llm_fsm.loader import did_you_mean
from llm_fsm.prompt import PromptBuilder
from llm_fsm.streaming import MessageDelta, MessageReset, MessageWatcher
from llm_fsm.turn import Call, TurnResult, TurnRunner

StreamEvent = Union["MessageDelta", "MessageReset", "TurnResult"]
Steps = Generator[Call, LLMResponse, tuple[Snapshot, TurnResult]]

DEFAULT_FALLBACK = "Sorry, I couldn't take that step yet. Could you tell me a bit more?"

_default_builder: PromptBuilder | None = None


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
    ) -> None:
        if state is not None and state not in definition.states:
            raise ConversationError(f"unknown state '{state}'", state=state)
        self.definition = definition
        self.llm = llm
        self.hooks = hooks if hooks is not None else Hooks()
        _check_bindings(definition, self.hooks)
        self.max_corrections = max(0, max_corrections)
        self.max_calls_per_turn = max(1, max_calls_per_turn)
        self.fallback_message = fallback_message
        self.prompt = prompt or _shared_builder()
        self._snapshot = initial_snapshot(definition, state, dict(context or {}))
        self._busy = False

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

    def snapshot(self) -> Snapshot:
        """The whole conversation as an immutable, JSON-serialisable model."""
        return self._snapshot

    @classmethod
    def restore(
        cls,
        snapshot: Snapshot | Mapping[str, Any] | str,
        definition: FSMDefinition,
        llm: LLMClient,
        *,
        allow_changed_definition: bool = False,
        **options: Any,
    ) -> Conversation:
        """A conversation continuing from ``snapshot`` (the model, its dict, or its JSON text)."""
        snap = _as_snapshot(snapshot)
        if snap.state not in definition.states:
            raise ConversationError(
                f"snapshot state '{snap.state}' is not in definition '{definition.name}'", state=snap.state
            )
        if snap.definition_hash != definition.content_hash and not allow_changed_definition:
            changes = definition.changes_since(snap.definition_outline) or ["its content changed"]
            raise ConversationError(
                f"the definition '{definition.name}' changed since this snapshot was taken: "
                f"{'; '.join(changes)} (pass allow_changed_definition=True to restore anyway)",
                state=snap.state,
            )
        if allow_changed_definition:
            snap = snap.model_copy(
                update={"definition_hash": definition.content_hash, "definition_outline": definition.outline}
            )
        conversation = cls(definition, llm, **options)
        conversation._snapshot = snap
        return conversation

    def update_context(self, delta: Mapping[str, Any]) -> None:
        """Set (or, with None, delete) context keys from code, outside any turn (provenance ``user_code``)."""
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)
        snap = self._snapshot
        context = apply_delta(snap.context, dict(delta))
        deleted = [k for k, v in delta.items() if v is None]
        provenance = record(
            snap.provenance, [k for k, v in delta.items() if v is not None], "user_code", snap.turns, deleted
        )
        self._snapshot = snap.model_copy(update={"context": context, "provenance": provenance})

    # -- turns ----------------------------------------------------------------------------------

    def start(self) -> TurnResult:
        """The opening message of the current state, with one model call."""
        return self._run(self._steps(None))

    def send(self, text: str) -> TurnResult:
        """Answer the user's ``text``: one model call when the reply is valid."""
        return self._run(self._steps(text))

    async def astart(self) -> TurnResult:
        return await self._arun(self._steps(None))

    async def asend(self, text: str) -> TurnResult:
        return await self._arun(self._steps(text))

    def resume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        """Continue a paused conversation: merge ``result`` into the context, then one model call.

        Works once per token: a second call with the same token raises :class:`ResumeError` and
        changes nothing. If the model call fails, nothing changes and the token stays valid.
        """
        return self._run(self._resume_steps(token, result))

    async def aresume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        return await self._arun(self._resume_steps(token, result))

    def stream(self, text: str | None = None) -> Generator[StreamEvent, None, None]:
        """Run a turn (``text=None``: the opening) and yield its events as they happen.

        Yields :class:`MessageDelta` for message text whose transition has been checked,
        :class:`MessageReset` if shown text must be discarded, and last the :class:`TurnResult`.
        Closing the iterator early leaves the conversation exactly as it was before the turn.
        """
        steps = self._steps(text)
        self._busy = True
        try:
            shown, call = "", next(steps)
            while True:
                watcher = self._watcher(call)
                response = None
                for item in _stream_of(self.llm, call) if watcher else [self._complete(call)]:
                    if isinstance(item, LLMResponse):
                        response = item
                    elif delta := watcher.feed(item):  # type: ignore[union-attr]
                        shown += delta
                        yield MessageDelta(delta)
                if watcher and (rest := watcher.flush()):
                    shown += rest
                    yield MessageDelta(rest)
                try:
                    call = steps.send(_required(response))
                except StopIteration as done:
                    result = self._commit(done.value)
                    break
                if shown and call.kind == "reply":
                    shown = ""
                    yield MessageReset("the reply was not accepted")
            if shown and shown != result.message:
                yield MessageReset("the turn ended with another message")
            yield result
        except BaseException as exc:
            self._fire_error(exc)
            raise
        finally:
            steps.close()
            self._busy = False

    async def astream(self, text: str | None = None) -> AsyncGenerator[StreamEvent, None]:
        """The async form of :meth:`stream`."""
        steps = self._steps(text)
        self._busy = True
        try:
            shown, call = "", next(steps)
            while True:
                watcher = self._watcher(call)
                response = None
                if watcher:
                    async for item in _astream_of(self.llm, call):
                        if isinstance(item, LLMResponse):
                            response = item
                        elif delta := watcher.feed(item):
                            shown += delta
                            yield MessageDelta(delta)
                    if rest := watcher.flush():
                        shown += rest
                        yield MessageDelta(rest)
                else:
                    response = await self.llm.acomplete(call.request)
                try:
                    call = steps.send(_required(response))
                except StopIteration as done:
                    result = self._commit(done.value)
                    break
                if shown and call.kind == "reply":
                    shown = ""
                    yield MessageReset("the reply was not accepted")
            if shown and shown != result.message:
                yield MessageReset("the turn ended with another message")
            yield result
        except BaseException as exc:
            self._fire_error(exc)
            raise
        finally:
            steps.close()
            self._busy = False

    # -- running turns --------------------------------------------------------------------------

    def _steps(self, user: str | None) -> Steps:
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
        if self._busy:
            raise ConversationError("another turn of this conversation is in progress", state=self.state)
        return TurnRunner(self, user, base=self._snapshot).run()

    def _resume_steps(self, token: str, result: Mapping[str, Any] | None) -> Steps:
        snap = self._snapshot
        if token in snap.used_tokens:
            raise ResumeError("this resume token was already used: a pause is resumed exactly once", state=self.state)
        if snap.pending is None:
            raise ResumeError("the conversation is not paused: there is nothing to resume", state=self.state)
        if token != snap.pending.token:
            raise ResumeError("this is not the token of the pending event", state=self.state)
        if self._busy:
            raise ConversationError("another turn of this conversation is in progress", state=self.state)
        delta = dict(result or {})
        provenance = record(snap.provenance, list(delta), "resume", snap.turns + 1)  # the resume is a turn
        status = "ended" if self.definition.states[snap.state].terminal else "active"
        base = snap.model_copy(
            update={
                "context": merge(snap.context, delta),
                "provenance": provenance,
                "pending": None,
                "status": status,
                "used_tokens": (*snap.used_tokens, token),
            }
        )
        note = self.prompt.resume_note(snap.pending.reason, delta)
        return TurnRunner(self, None, base=base, note=note).run()

    def _run(self, steps: Steps) -> TurnResult:
        self._busy = True
        try:
            call = _advance(steps, None)
            while isinstance(call, Call):
                # The model is called outside the generator's send(): a StopIteration it raises is
                # its own error, not the end of the turn.
                call = _advance(steps, self._complete(call))
            return self._commit(call)
        except BaseException as exc:
            self._fire_error(exc)
            raise
        finally:
            self._busy = False

    async def _arun(self, steps: Steps) -> TurnResult:
        self._busy = True
        try:
            call = _advance(steps, None)
            while isinstance(call, Call):
                call = _advance(steps, await self.llm.acomplete(call.request))
            return self._commit(call)
        except BaseException as exc:
            self._fire_error(exc)
            raise
        finally:
            self._busy = False

    def _complete(self, call: Call) -> LLMResponse:
        return self.llm.complete(call.request)

    def _commit(self, outcome: tuple[Snapshot, TurnResult]) -> TurnResult:
        self._snapshot, result = outcome
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "turn %d: %s -> %s, %d call(s), %d rejected, context %s",
                result.turn, result.previous_state, result.state, result.llm_calls, len(result.rejected),
                self.definition.masked(result.context),
            )  # fmt: skip
        return result

    def _watcher(self, call: Call) -> MessageWatcher | None:
        """Watch reply calls in states without checks (with checks, text shows once it passed them)."""
        if call.kind != "reply" or self.definition.states[self.state].checks:
            return None
        return MessageWatcher(self.definition, self._snapshot)

    def _fire_error(self, exc: BaseException) -> None:
        """Run ``error`` handlers; their own failures are logged, never raised over the original."""
        if not isinstance(exc, Exception):
            return
        listed = frozenset(self.definition.states[self.state].handlers)
        for handler in selected(self.hooks, Invocation("error", self.state, listed=listed)):
            arguments = {"conversation": self, "timing": "error", "state": self.state, "error": exc}
            try:
                call(handler, arguments)
            except BaseException as failure:  # noqa: BLE001 (an error handler must not mask the error)
                logger.warning("error handler %r failed: %s", handler.name, failure)

    def reply_schemas(self, state_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return _reply_schemas(self.definition, state_id)


def _check_bindings(definition: FSMDefinition, hooks: Hooks) -> None:
    """Every handler and Python check the definition names must be registered."""
    problems = []
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


def _reply_schemas(definition: FSMDefinition, state_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of a state, computed once per definition and state."""

    def compute(state: State) -> tuple[dict[str, Any], dict[str, Any]]:
        strict = reply_schema(state, strict=True, protected=definition.handler_only_keys)
        return reply_schema(state, strict=False), strict

    return definition.derived("reply_schemas", state_id, compute)


def _advance(steps: Steps, response: LLMResponse | None) -> Call | tuple[Snapshot, TurnResult]:
    """The turn's next model call, or its outcome when it has finished."""
    try:
        return next(steps) if response is None else steps.send(response)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _stream_of(llm: LLMClient, call: Call) -> Iterator[str | LLMResponse]:
    if isinstance(llm, StreamingLLMClient):
        return llm.stream_complete(call.request)
    return iter([llm.complete(call.request)])  # a client that cannot stream answers in one piece


async def _astream_of(llm: LLMClient, call: Call) -> AsyncIterator[str | LLMResponse]:
    if isinstance(llm, StreamingLLMClient):
        async for item in llm.astream_complete(call.request):
            yield item
    else:
        yield await llm.acomplete(call.request)


def _required(response: LLMResponse | None) -> LLMResponse:
    if response is None:
        raise LLMError("the model's stream ended without a response")
    return response


def _as_snapshot(value: Snapshot | Mapping[str, Any] | str) -> Snapshot:
    if isinstance(value, Snapshot):
        return value
    try:
        if isinstance(value, str):
            return Snapshot.model_validate_json(value)
        return Snapshot.model_validate(dict(value))
    except ValueError as exc:
        raise ConversationError(f"not a valid snapshot: {exc}") from None
