"""The public shell: a conversation holds a snapshot and runs render → LLM → parse → decide → commit.

A turn makes one model call when the reply is valid. An invalid reply (unparseable, unknown or
disallowed target, unmet condition) gets up to ``max_corrections`` corrective calls whose prompt
says exactly what was wrong. If the reply is still invalid, the conversation stays where it is,
keeps the context updates that were valid, and answers with ``fallback_message``: a message that
describes a state the conversation did not enter is never returned. A turn that fails (the model
cannot be reached) raises and changes nothing.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Union

from llm_fsm.contract import ReplyFormatError, parse_reply, reply_schema
from llm_fsm.definition import FSMDefinition
from llm_fsm.engine import Decision, Exchange, Rejection, Snapshot, commit, decide, initial_snapshot
from llm_fsm.errors import ConversationEnded, ConversationError, LLMError
from llm_fsm.llm import LLMClient, LLMRequest, LLMResponse, StreamingLLMClient, Usage
from llm_fsm.prompt import PromptBuilder
from llm_fsm.streaming import MessageDelta, MessageReset, MessageWatcher

StreamEvent = Union["MessageDelta", "MessageReset", "TurnResult"]

DEFAULT_FALLBACK = "Sorry, I couldn't take that step yet. Could you tell me a bit more?"

_default_builder: PromptBuilder | None = None


def _shared_builder() -> PromptBuilder:
    # One Jinja environment for every conversation that uses the packaged templates: it caches
    # compiled templates, so only the first conversation of a process pays for compiling them.
    global _default_builder
    if _default_builder is None:
        _default_builder = PromptBuilder()
    return _default_builder


@dataclass(frozen=True)
class TurnResult:
    """What one turn did. ``previous_state`` is None for the opening message."""

    message: str
    state: str
    previous_state: str | None
    user: str | None
    turn: int
    context_updates: dict[str, Any]
    rejected: tuple[Rejection, ...]
    llm_calls: int
    usage: Usage
    latency: float
    ended: bool
    context: dict[str, Any] = field(repr=False)

    @property
    def transitioned(self) -> bool:
        return self.previous_state is not None and self.previous_state != self.state

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the shape ``llm-fsm run`` prints)."""
        return {
            "turn": self.turn,
            "user": self.user,
            "message": self.message,
            "state": self.state,
            "previous_state": self.previous_state,
            "context": self.context,
            "context_updates": self.context_updates,
            "llm_calls": self.llm_calls,
            "rejected": [r.model_dump(exclude_none=True) for r in self.rejected],
            "usage": asdict(self.usage),
            "latency_ms": round(self.latency * 1000, 3),
            "ended": self.ended,
        }


class Conversation:
    """One conversation with a definition, driven by ``llm``. Not safe for two turns at once."""

    def __init__(
        self,
        definition: FSMDefinition,
        llm: LLMClient,
        state: str | None = None,
        context: Mapping[str, Any] | None = None,
        *,
        max_corrections: int = 1,
        fallback_message: str = DEFAULT_FALLBACK,
        prompt: PromptBuilder | None = None,
    ) -> None:
        if state is not None and state not in definition.states:
            raise ConversationError(f"unknown state '{state}'", state=state)
        self.definition = definition
        self.llm = llm
        self.max_corrections = max(0, max_corrections)
        self.fallback_message = fallback_message
        self.prompt = prompt or _shared_builder()
        self._snapshot = initial_snapshot(definition, state, dict(context or {}))
        self._busy = False

    # -- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._snapshot.state

    @property
    def context(self) -> dict[str, Any]:
        """A copy of the context: changing it does not change the conversation."""
        return copy.deepcopy(self._snapshot.context)

    @property
    def history(self) -> tuple[Exchange, ...]:
        return self._snapshot.history

    @property
    def ended(self) -> bool:
        return self._snapshot.status == "ended"

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
            raise ConversationError(
                f"the definition '{definition.name}' changed since this snapshot was taken "
                "(pass allow_changed_definition=True to restore anyway)",
                state=snap.state,
            )
        conversation = cls(definition, llm, **options)
        conversation._snapshot = snap
        return conversation

    # -- turns ----------------------------------------------------------------------------------

    def start(self) -> TurnResult:
        """The opening message of the current state, with one model call."""
        turn = self._begin(None)
        return self._run(turn)

    def send(self, text: str) -> TurnResult:
        """Answer the user's ``text``: one model call when the reply is valid."""
        turn = self._begin(text)
        return self._run(turn)

    async def astart(self) -> TurnResult:
        turn = self._begin(None)
        return await self._arun(turn)

    async def asend(self, text: str) -> TurnResult:
        turn = self._begin(text)
        return await self._arun(turn)

    def stream(self, text: str | None = None) -> Generator[StreamEvent, None, None]:
        """Run a turn (``text=None``: the opening) and yield its events as they happen.

        Yields :class:`MessageDelta` for message text whose transition has been checked,
        :class:`MessageReset` if shown text must be discarded, and last the :class:`TurnResult`.
        Closing the iterator early leaves the conversation exactly as it was before the turn.
        """
        turn = self._begin(text)
        self._busy = True
        try:
            request: LLMRequest | None = turn.first_request()
            while request is not None:
                watcher = MessageWatcher(self.definition, turn.snapshot)
                response = None
                for item in _stream_of(self.llm, request):
                    if isinstance(item, LLMResponse):
                        response = item
                    elif delta := watcher.feed(item):
                        yield MessageDelta(delta)
                request = turn.feed(_required(response))
                if watcher.shown and not turn.accepted:
                    yield MessageReset("the reply was not accepted")
            yield self._finish(turn)
        finally:
            self._busy = False

    async def astream(self, text: str | None = None) -> AsyncGenerator[StreamEvent, None]:
        """The async form of :meth:`stream`."""
        turn = self._begin(text)
        self._busy = True
        try:
            request: LLMRequest | None = turn.first_request()
            while request is not None:
                watcher = MessageWatcher(self.definition, turn.snapshot)
                response = None
                async for item in _astream_of(self.llm, request):
                    if isinstance(item, LLMResponse):
                        response = item
                    elif delta := watcher.feed(item):
                        yield MessageDelta(delta)
                request = turn.feed(_required(response))
                if watcher.shown and not turn.accepted:
                    yield MessageReset("the reply was not accepted")
            yield self._finish(turn)
        finally:
            self._busy = False

    def _begin(self, user: str | None) -> _Turn:
        if self.ended:
            raise ConversationEnded(f"the conversation has ended in state '{self.state}'", state=self.state)
        if user is None and self._snapshot.history:
            raise ConversationError("start() was already called; use send()", state=self.state)
        if user is not None and not isinstance(user, str):
            raise TypeError(f"send() takes a str, not {type(user).__name__}")
        if self._busy:
            raise ConversationError("another turn of this conversation is in progress", state=self.state)
        return _Turn(self, user)

    def _run(self, turn: _Turn) -> TurnResult:
        self._busy = True
        try:
            request: LLMRequest | None = turn.first_request()
            while request is not None:
                request = turn.feed(self.llm.complete(request))
            return self._finish(turn)
        finally:
            self._busy = False

    async def _arun(self, turn: _Turn) -> TurnResult:
        self._busy = True
        try:
            request: LLMRequest | None = turn.first_request()
            while request is not None:
                request = turn.feed(await self.llm.acomplete(request))
            return self._finish(turn)
        finally:
            self._busy = False

    def _finish(self, turn: _Turn) -> TurnResult:
        decision, message = turn.outcome()
        before = self._snapshot
        self._snapshot = commit(self.definition, before, decision, user=turn.user, message=message)
        return TurnResult(
            message=message,
            state=decision.state,
            previous_state=None if turn.user is None else before.state,
            user=turn.user,
            turn=self._snapshot.turns,
            context_updates=decision.applied,
            rejected=tuple(turn.rejected),
            llm_calls=turn.calls,
            usage=turn.usage,
            latency=time.perf_counter() - turn.started,
            ended=self.ended,
            context=copy.deepcopy(decision.context),
        )


class _Turn:
    """The bookkeeping of one turn in progress; the conversation's snapshot is untouched until it ends."""

    def __init__(self, conversation: Conversation, user: str | None) -> None:
        self.conversation = conversation
        self.user = user
        self.snapshot = conversation._snapshot
        self.started = time.perf_counter()
        self.calls = 0
        self.usage = Usage()
        self.rejected: list[Rejection] = []
        self._accepted: tuple[Decision, str] | None = None
        self._last_valid: Decision | None = None
        self._messages: list[dict[str, str]] = []

    def first_request(self) -> LLMRequest:
        c = self.conversation
        self._messages = c.prompt.messages(c.definition, self.snapshot, self.user)
        return self._request(self._messages)

    def _request(self, messages: list[dict[str, str]]) -> LLMRequest:
        schema, strict = _reply_schemas(self.conversation.definition, self.snapshot.state)
        return LLMRequest(messages, schema, strict)

    def feed(self, response: LLMResponse) -> LLMRequest | None:
        """Take one model response; return the corrective request, or None when the turn is decided."""
        self.calls += 1
        self.usage += response.usage
        c = self.conversation
        try:
            reply = parse_reply(response.text)
        except ReplyFormatError as exc:
            problems: tuple[Rejection, ...] = (Rejection(kind="format", reason=str(exc), attempt=self.calls),)
        else:
            decision = decide(c.definition, self.snapshot, reply, attempt=self.calls)
            self.rejected.extend(decision.rejected)
            if decision.accepted:
                self._accepted = (decision, reply.message)
                return None
            self._last_valid = decision
            problems = tuple(r for r in decision.rejected if r.kind != "context_key")
        if problems[0].kind == "format":
            self.rejected.extend(problems)
        if self.calls > c.max_corrections:
            return None
        correction = c.prompt.correction(problems, self.snapshot.state)
        extra = [{"role": "assistant", "content": response.text}, {"role": "user", "content": correction}]
        return self._request([*self._messages, *extra])

    @property
    def accepted(self) -> bool:
        return self._accepted is not None

    def outcome(self) -> tuple[Decision, str]:
        """The accepted decision and message, or the fallback: stay, keep the valid updates."""
        if self._accepted is not None:
            return self._accepted
        c = self.conversation
        kept = self._last_valid
        context = kept.context if kept else self.snapshot.context
        applied = kept.applied if kept else {}
        return Decision(False, self.snapshot.state, context, applied, ()), c.fallback_message


_schemas: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
_schemas_lock = threading.Lock()


def _reply_schemas(definition: FSMDefinition, state_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of a state, computed once per (definition, state)."""
    key = (definition.content_hash, state_id)
    schemas = _schemas.get(key)
    if schemas is None:
        state, protected = definition.states[state_id], definition.handler_only_keys
        schemas = (reply_schema(state, strict=False), reply_schema(state, strict=True, protected=protected))
        with _schemas_lock:
            if len(_schemas) >= 1024:
                _schemas.pop(next(iter(_schemas)))
            _schemas[key] = schemas
    return schemas


def _stream_of(llm: LLMClient, request: LLMRequest) -> Iterator[str | LLMResponse]:
    if isinstance(llm, StreamingLLMClient):
        return llm.stream_complete(request)
    return iter([llm.complete(request)])  # a client that cannot stream answers in one piece


async def _astream_of(llm: LLMClient, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
    if isinstance(llm, StreamingLLMClient):
        async for item in llm.astream_complete(request):
            yield item
    else:
        yield await llm.acomplete(request)


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
