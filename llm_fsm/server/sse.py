"""A turn as Server-Sent Events: the turn runs in a task of its own, and once it holds the
conversation's lock the response streams its events (:class:`EventStream`, an sse-starlette
``EventSourceResponse``); a client that disconnects cancels the turn, and the response ends only once the
turn's task has.

In a workflow (:mod:`llm_fsm.running`) the turn is a whole run: each step's events, then a ``step`` event with
that step's result as it commits (:class:`Step`), and last the ``result`` event, the run's answer as ``POST
.../messages`` gives it (the last step's result, the earlier ones in its ``steps``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from llm_fsm.conversation import Conversation
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.running import last
from llm_fsm.server.errors import APIError, api_error
from llm_fsm.server.retries import REPLAYED, asked, keyed
from llm_fsm.server.service import Stored
from llm_fsm.server.views import result_view
from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult
from llm_fsm.turn.refusals import turn_refusal
from llm_fsm.turn.runner import TurnResult

T = TypeVar("T")
PING_SECONDS = 15.0  # a ``: ping`` comment this often keeps proxies from closing a quiet stream
SEP = "\n"  # the line ending of every event (sse-starlette's own is CRLF)

STARTED = object()  # the turn holds the lock and may run: the response starts
DONE = object()  # the turn's task ended (its result or error is on the task)


@dataclass(frozen=True)
class Step:
    """A step of a workflow's run that committed (a ``step`` event): its own result."""

    result: TurnResult


def _refusal(conversation: Conversation, text: str | None) -> None:
    """Raise now what the turn would raise at its start (the one rule: :func:`turn_refusal`), so that the
    response carries that error's status rather than the stream's 200."""
    refused = turn_refusal(conversation, text)
    if refused is not None:
        raise refused.error()


async def start_stream(
    item: Stored,
    text: str | None,
    mask_of: Callable[[FSMDefinition], Callable[[dict[str, Any]], dict[str, Any]]],
    key: str | None = None,
) -> Response:
    """Run the turn in a task of its own; once it holds the lock, answer with its events (else raise its error).
    A ``key`` sent before answers with the kept result (see :func:`_replay`)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def turn(conversation: Conversation) -> TurnResult | None:
        _refusal(conversation, text)
        queue.put_nowait(STARTED)
        workflow, results = conversation.definition.is_workflow, list[TurnResult]()
        async for event in conversation.astream(text):
            if isinstance(event, TurnResult):
                results.append(event)
            # in a workflow, one result per step: the run's own comes once it ended
            queue.put_nowait(Step(event) if workflow and isinstance(event, TurnResult) else event)
        if not results:  # pragma: no cover (a stream that ends without its result raised instead)
            return None
        answer = last(results)  # kept for the key: the run's, as POST .../messages answers it
        if workflow:
            queue.put_nowait(answer)
        return answer

    task, first = await launch(queue, item.stored.arun(turn, **keyed(key, *asked(text))))
    encode = functools.partial(_encode, mask=mask_of(item.definition))
    if first is DONE:
        kept = task.result()  # raises the turn's error: a JSON error response
        if item.stored.replayed and isinstance(kept, TurnResult):
            return _replay(kept, task, encode, workflow=item.definition.is_workflow)
        raise APIError(500, "internal_error", "the turn ended before it started")  # pragma: no cover
    return EventStream(queue, task, encode)


async def launch(queue: asyncio.Queue[Any], work: Coroutine[Any, Any, T]) -> tuple[asyncio.Task[T], Any]:
    """``work`` in a task of its own (its end puts :data:`DONE` on ``queue``), and the first event it queues:
    :data:`STARTED` once its turn holds the lock, or :data:`DONE` when it ended first (its error, if any,
    is on the task)."""
    task = asyncio.create_task(work)
    task.add_done_callback(lambda _: queue.put_nowait(DONE))
    try:
        return task, await queue.get()
    except BaseException:  # the request was cancelled while waiting for the lock: so is the turn
        task.cancel()
        raise


def _replay(
    kept: TurnResult, task: asyncio.Task[Any], encode: Callable[[Any], Any], *, workflow: bool = False
) -> Response:
    """A kept turn as a stream: its whole message as one ``delta`` (the deltas still add up to the message),
    then its ``result``; the tool calls it made are in the result (they ran once, in the first attempt). A
    workflow's run: each step's message as one ``delta`` and its ``step``, then the run's ``result``."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for event in (*(_kept_steps(kept) if workflow else [MessageDelta(kept.message)]), kept, DONE):
        queue.put_nowait(event)
    return EventStream(queue, task, encode, headers={REPLAYED: "true"})


def _kept_steps(kept: TurnResult) -> Iterator[Any]:
    """The events of a kept run's steps, as its stream sent them (the deltas of each in one)."""
    for step in (*kept.steps, replace(kept, steps=())):
        if step.message:
            yield MessageDelta(step.message)
        yield Step(step)


def _encode(event: Any, *, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> ServerSentEvent:
    from llm_fsm.secrets import mask_run

    data: dict[str, Any]  # the event's JSON object
    if isinstance(event, MessageDelta):
        name, data = "delta", {"text": event.text}
    elif isinstance(event, MessageReset):
        name, data = "reset", {"reason": event.reason}
    elif isinstance(event, ToolCall):
        arguments = mask(event.arguments) if isinstance(event.arguments, dict) else event.arguments
        name, data = "tool_call", {"id": event.id, "name": event.name, "arguments": arguments}
    elif isinstance(event, ToolResult):
        name, data = "tool_result", mask_run(event.run.model_dump(), mask)
    elif isinstance(event, TurnResult):
        name, data = "result", result_view(event, mask)
    elif isinstance(event, Step):
        name, data = "step", result_view(event.result, mask)
    elif isinstance(event, APIError):
        name, data = "error", event.body()
    else:  # pragma: no cover (every event of a turn is one of the above)
        raise TypeError(f"unexpected event {event!r}")
    return ServerSentEvent(json.dumps(data, ensure_ascii=False, default=str), event=name, sep=SEP)


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep=SEP)


async def _events(
    queue: asyncio.Queue[Any], task: asyncio.Task[Any], encode: Callable[[Any], Any]
) -> AsyncIterator[Any]:
    """The queued events, encoded, up to :data:`DONE`; then the turn's error as one more event, if it failed."""
    while (event := await queue.get()) is not DONE:
        yield encode(event)
    if not task.cancelled() and (error := task.exception()) is not None:
        yield encode(api_error(error))


class EventStream(EventSourceResponse):
    """Server-Sent Events of one turn: ``delta``, ``reset``, ``tool_call``, ``tool_result`` (and in a workflow
    ``step`` after each step), then ``result`` or ``error`` (``encode`` gives each event's bytes or
    :class:`ServerSentEvent`), with a ``: ping`` comment every ``ping`` seconds. A disconnect cancels the turn
    (a cancelled turn changes nothing; in a workflow, the steps that committed stay), and the response ends
    only once the turn's task has: the conversation is saved whole or not at all by then. A server shutting
    down lets the stream run to its end (``shutdown_grace_period``: no limit but the server's own), as any
    request in flight."""

    def __init__(
        self,
        queue: asyncio.Queue[Any],
        task: asyncio.Task[Any],
        encode: Callable[[Any], Any],
        headers: Mapping[str, str] | None = None,
        ping: float = PING_SECONDS,
    ) -> None:
        super().__init__(
            _events(queue, task, encode),
            headers={"Cache-Control": "no-cache", **(headers or {})},
            ping=ping,
            sep=SEP,
            ping_message_factory=_ping,
            shutdown_grace_period=math.inf,
        )
        self.task = task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except* OSError:  # the client went away while we wrote
            pass
        finally:
            if not self.task.done():
                self.task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([self.task])
