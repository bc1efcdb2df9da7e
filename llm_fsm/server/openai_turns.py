"""One chat-completions turn: which stored conversation it runs on (:func:`plan`, from the messages or a named
id; see :mod:`llm_fsm.server.openai_index`), and the turn itself (:class:`ChatTurn`): the opening first when the
conversation is new (not when its first state acts on its own: the message is then its task), a pause answered
by the person's message where the pause allows it, else the message sent.

The turn runs as every turn of ``serve`` does, in :meth:`StoredConversation.arun`: under the conversation's
lock, saved with a version check, nothing saved when it fails. Its reply is what the client will resend, so the
text is gathered as the client receives it (:class:`Reply`), and the transcript's mark is kept from it.

In a workflow (:mod:`llm_fsm.running`) a turn is a whole run, and its reply is the report of the last step that
said something (:func:`said`; an automatic move says nothing): a stream sends it whole once the run ended,
since which step speaks last is known only then and a chat client cannot take text back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llm_fsm.conversation import Conversation
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.llm import Usage
from llm_fsm.running import last
from llm_fsm.server import openai_index as index
from llm_fsm.server.errors import APIError
from llm_fsm.server.openai_shapes import Conversed, answer_of, question_of
from llm_fsm.server.service import Service, Stored
from llm_fsm.server.sse import STARTED
from llm_fsm.snapshot import Snapshot
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.turn.refusals import turn_refusal
from llm_fsm.turn.runner import TurnResult

T = TypeVar("T")
SHOWN_ID = 64  # characters of a named conversation id an error echoes (the id is the client's text)
SEPARATOR = "\n\n"  # between the opening and the reply, and before a pause's question


class Moved(Exception):  # noqa: N818 (a signal: the conversation went on past the mark)
    """The conversation a mark was taken from is no longer at the mark's point: branch from the mark instead."""


@dataclass(frozen=True)
class Asked:
    """What a request asks: whose conversation (``client``), of which definition, after which transcript (the
    messages before the last user message), the person's ``text``, and the notes on what was left out."""

    service: Service
    client: str
    definition: FSMDefinition
    transcript: list[index.Said]
    text: str
    notes: list[str]


@dataclass
class Plan:
    """Where a turn runs: the stored conversation, the mark it must still be at (None: no condition), and
    the conversation it branches from."""

    item: Stored
    mark: index.Mark | None = None
    branched_from: str | None = None
    notes: list[str] = field(default_factory=list)


async def plan(asked: Asked, named: tuple[str, str] | None) -> Plan:
    """The conversation a request names (``(id, param)``: where the id came from), else the one its
    transcript's mark points to (or a branch of it, or a new one: see :mod:`llm_fsm.server.openai_index`)."""
    service, client, transcript = asked.service, asked.client, asked.transcript
    if named is not None:
        return Plan(_named(asked, *named))
    mark = await index.find(service.store, client, asked.definition.name, transcript)
    if mark is None:
        notes = ["no conversation holds these messages: a new one started"] if transcript else []
        return Plan(service.new(client, asked.definition, None, {}, None), notes=notes)
    if mark.length < len(transcript):
        return branch(service, client, mark, [f"the messages after the first {mark.length} are not the conversation's"])
    return Plan(service.at(client, mark.conversation_id, _continued(service, mark)), mark)


def _named(asked: Asked, conversation_id: str, param: str) -> Stored:
    """The client's conversation ``conversation_id``: 404 naming ``param`` when there is none, 400 when it runs
    another definition than the request's ``model``."""
    service, model = asked.service, asked.definition.name
    shown = conversation_id if len(conversation_id) <= SHOWN_ID else conversation_id[:SHOWN_ID] + "..."
    missing = APIError(404, "not_found", f"no conversation {shown!r}", param=param)
    if not index.is_id(conversation_id):
        raise missing

    def make(snapshot: Snapshot | None) -> Conversation:
        if snapshot is None:  # never stored, another client's, or deleted
            raise missing
        if snapshot.definition_name != model:
            raise APIError(
                400,
                "invalid_request",
                f"conversation {conversation_id} runs the definition {snapshot.definition_name!r}, not the model "
                f"{model!r} the request names",
                param="model",
            )
        return service.restored(conversation_id, snapshot)

    return service.at(asked.client, conversation_id, make)


def branch(service: Service, client: str, mark: index.Mark, notes: list[str] | None = None) -> Plan:
    """A new conversation restored from ``mark``'s snapshot (the one it was taken from stays as it was)."""
    conversation_id = index.new_id()
    start = index.branch_of(mark, conversation_id)

    def make(snapshot: Snapshot | None) -> Conversation:
        return service.restored(conversation_id, snapshot or start)

    return Plan(service.at(client, conversation_id, make), mark, mark.conversation_id, notes or [])


def _continued(service: Service, mark: index.Mark) -> Callable[[Snapshot | None], Conversation]:
    def make(snapshot: Snapshot | None) -> Conversation:
        if snapshot is None:  # deleted since the mark was kept: the mark still holds that point
            raise Moved
        return service.restored(mark.conversation_id, snapshot)

    return make


def _position(snapshot: Snapshot) -> tuple[Any, ...]:
    """Where a conversation stands: two snapshots of one conversation at one point have the same."""
    return (snapshot.history_len, snapshot.turns, snapshot.status, snapshot.pending)


def _at_mark(live: Snapshot, mark: Snapshot) -> bool:
    """Whether the live conversation is where the chat client left it: at the mark's point, or, when the mark
    is a pause, just past it: resumed with the pause's token (through the native route, which the chat client
    does not see) and no further (paused again, it answers the new pause's 409)."""
    if _position(live) == _position(mark):
        return True
    pause = mark.pending
    return (
        pause is not None
        and pause.token in live.used_tokens
        and live.turns <= mark.turns + 1
        and live.history_len <= mark.history_len + 1
    )


class Reply:
    """The assistant message as the client receives it: streamed as chunks into ``queue`` (None: whole)."""

    def __init__(self, queue: asyncio.Queue[Any] | None, chunk: Callable[[dict[str, Any]], bytes]) -> None:
        self.text = ""
        self.queue, self.chunk = queue, chunk

    def start(self) -> None:
        """The turn holds its conversation and may run: a stream's response starts, with the role's chunk."""
        if self.queue is not None:
            self.queue.put_nowait(STARTED)
            self.queue.put_nowait(self.chunk({"role": "assistant", "content": ""}))

    def add(self, text: str) -> None:
        if text:
            self.text += text
            if self.queue is not None:
                self.queue.put_nowait(self.chunk({"content": text}))

    def part(self, message: str, since: int) -> None:
        """After a turn whose deltas were added from ``since`` on: the client then holds ``message`` (the rest
        of it is added), or, when what it was sent is not the start of it (text the turn discarded), the
        discarded text and ``message`` after it: what the client holds is what it will resend."""
        sent = self.text[since:]
        self.add(message[len(sent) :] if message.startswith(sent) else SEPARATOR + message)

    def next_part(self) -> int:
        self.add(SEPARATOR if self.text else "")
        return len(self.text)


class ChatTurn:
    """The turn of one request on ``plan``'s conversation: ``text`` is the person's message."""

    def __init__(self, plan: Plan, text: str, reply: Reply, approval: str) -> None:
        self.plan, self.text, self.reply, self.approval = plan, text, reply, approval
        self.streamed = reply.queue is not None
        self.usage = Usage()
        self.ran = False  # whether a turn ran (a message that does not answer a pause runs none)

    async def __call__(self, conversation: Conversation) -> None:
        if self.plan.mark is not None and not _at_mark(conversation.snapshot(), self.plan.mark.snapshot):
            raise Moved
        pending = conversation.pending
        # 409 when the pause takes no chat message (a tool's approval among them)
        answer = answer_of(pending, self.text, self.plan.item.id) if pending is not None else None
        if pending is None and conversation.status != "new":
            _refuse(conversation, self.text)  # ended, or an empty message: the error's status, before any 200
        self.reply.start()
        if conversation.status == "new" and not _takes_task(conversation):
            await self._run(conversation, None)
        if pending is not None and answer is not None:
            self._took(await conversation.aresume(pending.token, answer), self.reply.next_part())
        else:
            await self._run(conversation, self.text)
        question = question_of(conversation.pending, self.approval)
        if question is not None and question not in self.reply.text:
            self.reply.add(SEPARATOR + question)

    async def _run(self, conversation: Conversation, text: str | None) -> None:
        since = self.reply.next_part()
        if not self.streamed:
            self._took(await (conversation.astart() if text is None else conversation.asend(text)), since)
            return
        # a workflow's reply is its last report, known once the run ended: it comes whole, then
        results, discarded = [], conversation.definition.is_workflow
        async for event in conversation.astream(text):
            if isinstance(event, MessageReset):
                discarded = True  # a chat client cannot take text back: the rest comes whole, after what it has
            elif isinstance(event, MessageDelta) and not discarded:
                self.reply.add(event.text)
            elif isinstance(event, TurnResult):
                results.append(event)
        assert results  # a stream that ends without its result raised instead
        self._took(last(results), since)

    def _took(self, result: TurnResult, since: int) -> None:
        self.reply.part(said(result), since)
        for step in (*result.steps, result):  # a run's result carries its own step's usage only
            self.usage += step.usage
        self.ran = True


def said(result: TurnResult) -> str:
    """What a turn said: in a workflow's run (``result.steps``), the message of the last step that said
    something; else its message."""
    return next((step.message for step in (result, *result.steps[::-1]) if step.message), result.message)


def _takes_task(conversation: Conversation) -> bool:
    """Whether a new conversation's first state acts on its own: the person's first message is then the run's
    input (its task), with no opening run before it (which would run the workflow with no task)."""
    return conversation.definition.states[conversation.state].acts


def _refuse(conversation: Conversation, text: str) -> None:
    refused = turn_refusal(conversation, text)
    if refused is not None:
        raise refused.error()


async def run(
    asked: Asked, first: Plan, make_turn: Callable[[Plan], ChatTurn], launch: Callable[[ChatTurn], Awaitable[T]]
) -> tuple[ChatTurn, T]:
    """Run the turn on ``first``'s conversation, or, when that one went on past its mark, on a branch of it.
    ``launch`` runs the turn's coroutine (awaits it, or starts a stream's task); returns the turn and what
    ``launch`` gave."""
    try:
        turn = make_turn(first)
        return turn, await launch(turn)
    except Moved:
        assert first.mark is not None  # only a mark's conversation can have moved
        notes = [f"conversation {first.mark.conversation_id} went on from here: this turn branched from it"]
        turn = make_turn(branch(asked.service, asked.client, first.mark, first.notes + notes))
        return turn, await launch(turn)


def extension(turn: ChatTurn, asked: Asked) -> Conversed:
    conversation = turn.plan.item.stored.conversation
    return Conversed(
        conversation_id=turn.plan.item.id,
        state=conversation.state,
        status=conversation.status,
        ended=conversation.ended,
        paused=conversation.paused,
        question=question_of(conversation.pending, turn.approval),
        branched_from=turn.plan.branched_from,
        notes=asked.notes + turn.plan.notes + _awaiting(conversation, turn.plan.item.id),
    )


def _awaiting(conversation: Conversation, conversation_id: str) -> list[str]:
    pending = conversation.pending
    if pending is None or pending.kind != "tool_approval":
        return []
    tool = pending.payload.get("tool")
    return [
        f"a call of the tool {tool!r} waits for a person's approval: approve or refuse it with "
        f"POST /conversations/{conversation_id}/resume (a chat message cannot)"
    ]


async def keep_mark(asked: Asked, turn: ChatTurn) -> None:
    """Keep the mark of the transcript the client now holds: its messages, the user's, the reply it got."""
    stored = turn.plan.item.stored
    saved = stored.conversation.snapshot()
    whole = saved if not saved.history_start else None
    if whole is None and turn.plan.mark is not None:
        whole = index.extended(turn.plan.mark.snapshot, saved)
    if whole is None:
        whole = await index.whole(asked.service.store, stored.id, saved)
    after = [*asked.transcript, ("user", asked.text), ("assistant", turn.reply.text)]
    await index.keep(asked.service.store, asked.client, asked.definition.name, after, turn.plan.item.id, whole)
