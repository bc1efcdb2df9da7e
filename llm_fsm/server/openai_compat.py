"""OpenAI's chat completions over the served definitions: ``GET /v1/models`` lists them, ``POST
/v1/chat/completions`` takes a turn of one (``model`` is its name), whole or streamed (``stream: true``:
``data: {chunk}`` lines, then ``data: [DONE]``). The same bearer tokens as the native routes; errors in
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``, see :meth:`APIError.openai_body`).

An unmodified client resends the whole message list on every call: the conversation is found from it
(:mod:`llm_fsm.server.openai_index`); a client that can send an id names it (the ``X-Conversation-Id`` header
or ``metadata.conversation_id``). What a chat client cannot show (the state, whether the conversation ended
or paused, the pause's question) comes in the ``llm_fsm`` field of the completion and of a stream's last
chunk, and in ``X-LLM-FSM-*`` headers. A tool call waiting for approval is never approved by a chat message:
someone else decides, through ``POST /conversations/{id}/resume``. A request sent again with its
``Idempotency-Key``, or as an OpenAI SDK's retry (``X-Stainless-Retry-Count`` above 0), gets the answer kept
for it (:mod:`llm_fsm.server.openai_index`); the same list sent again without either is a regeneration.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.texts import runtime_text
from llm_fsm.errors import FSMError
from llm_fsm.server import openai_index as index
from llm_fsm.server import openai_turns as turns
from llm_fsm.server.errors import APIError, api_error
from llm_fsm.server.openai_shapes import (
    DONE_LINE,
    ChatRequest,
    Conversed,
    Head,
    chunk,
    completion,
    headers_of,
    model_card,
    model_list,
    read_messages,
    usage_of,
)
from llm_fsm.server.retries import REPLAYED, Key
from llm_fsm.server.routes import Client
from llm_fsm.server.service import Service
from llm_fsm.server.sse import DONE, EventStream, launch
from llm_fsm.store.idempotency import fingerprint
from llm_fsm.values import blank, clean_text

NamedId = Annotated[
    str | None,
    Header(alias="X-Conversation-Id", description="The conversation to continue (else found from the messages)."),
]
RetryCount = Annotated[
    str | None,
    Header(
        alias="X-Stainless-Retry-Count",
        description="Sent by OpenAI's SDKs: above 0, a retry of a request whose answer may have been lost.",
    ),
]
CONVERSATION_HEADER = "X-LLM-FSM-Conversation-Id"


def add_openai_routes(app: FastAPI, service: Service) -> None:
    @app.get("/v1/models", tags=["openai"])
    async def list_models(client: Client) -> dict[str, Any]:
        """The definitions served, as OpenAI's model list (a model's id is the definition's name)."""
        return model_list(sorted(service.definitions))

    @app.get("/v1/models/{name}", tags=["openai"])
    async def get_model(name: str, client: Client) -> dict[str, Any]:
        return model_card(_definition(service, name).name)

    body_schema = {"content": {"application/json": {"schema": ChatRequest.model_json_schema()}}, "required": True}

    @app.post("/v1/chat/completions", tags=["openai"], openapi_extra={"requestBody": body_schema})
    async def chat_completions(
        request: Request, client: Client, key: Key, named: NamedId = None, retry: RetryCount = None
    ) -> Response:
        """A turn of the conversation the messages (or ``X-Conversation-Id``) lead to, in OpenAI's shape."""
        body = await _body(request)  # read after the client's token: a bad token is a 401 whatever the body
        definition = _definition(service, body.model)
        transcript, text, notes = read_messages(body)
        if blank(text):
            raise APIError(
                400, "empty_message", "the user's message is empty: there is nothing to answer", param="messages"
            )
        asked = turns.Asked(service, client, definition, transcript, text, notes)
        keys = _answer_keys(asked, key, _named(body, named))
        kept = await _kept(asked, keys, key is not None, _retried(retry))
        if kept is not None:
            return _replay(kept, body, key is not None)
        known: list[str] = []  # the conversation an error is about, once known
        try:
            return await _answer(asked, body, _named(body, named), keys, known)
        except (APIError, FSMError) as error:
            failed = api_error(error)
            if known and failed.status != 404:  # a 404: the conversation named is not known
                failed.headers[CONVERSATION_HEADER] = known[0]
            raise failed from error


async def _body(request: Request) -> ChatRequest:
    """The request's body, its errors answered as FastAPI answers a body it validates."""
    try:
        data = json.loads(await request.body())
    except json.JSONDecodeError as error:
        problem = {"type": "json_invalid", "loc": ("body", error.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**problem, "ctx": {"error": error.msg}}]) from None
    except (ValueError, RecursionError) as error:  # not UTF-8, a number too long: answered as the native routes'
        raise HTTPException(400) from error
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as error:
        problems = [{**problem, "loc": ("body", *problem["loc"])} for problem in error.errors()]
        raise RequestValidationError(problems) from None


def _answer_keys(asked: turns.Asked, key: str | None, named: tuple[str, str] | None) -> dict[str, str | None]:
    """Where a request's answer is kept: under its messages (and the conversation it names: two named
    conversations' short lists may be equal), and under its ``Idempotency-Key``, with what it asked (the key
    with another request is refused)."""
    name = asked.definition.name
    messages = [list(said) for said in asked.transcript]
    named_id = named[0] if named else None
    keys: dict[str, str | None] = {index.asked_digest(name, named_id, asked.transcript, asked.text): None}
    if key is not None:
        keys[index.key_digest(name, key)] = fingerprint("openai", [name, named_id, messages, asked.text])
    return keys


def _retried(retry: str | None) -> bool:
    """Whether an OpenAI SDK sends the request again (it numbers its retries from 1)."""
    return retry is not None and retry.strip().isdigit() and int(retry) > 0


async def _kept(asked: turns.Asked, keys: dict[str, Any], keyed: bool, retried: bool) -> dict[str, Any] | None:
    """The kept answer a request sent again gets: with an ``Idempotency-Key``, the key's (422 when it came
    with another request); else, for an SDK's retry, the answer to the same messages. None: the turn runs."""
    (messages, _), *by_key = keys.items()
    if keyed:
        digest, asked_for = by_key[0]
        return await index.kept_answer(asked.service.store, asked.client, digest, asked_for)
    if retried:
        return await index.kept_answer(asked.service.store, asked.client, messages, None)
    return None


def _replay(kept: dict[str, Any], body: ChatRequest, keyed: bool) -> Response:
    """The kept answer, whole or as a stream (its text in one chunk), marked as a replay: the same completion,
    its ``id`` and ``created`` the first answer's (a client that keeps completions by id keeps it once)."""
    head = Head.kept(kept, body.model)
    extension = Conversed.model_validate(kept["llm_fsm"])
    headers = {**headers_of(extension), REPLAYED: "true"}
    if not body.stream:
        answer = completion(head, kept["content"], None, extension)
        answer["usage"] = kept.get("usage")
        return JSONResponse(answer, headers=headers)
    lines = [
        chunk(head, {"role": "assistant", "content": ""}),
        chunk(head, {"content": kept["content"]}),
        chunk(head, {}, "stop", llm_fsm=extension.model_dump()),
    ]
    if (body.stream_options or {}).get("include_usage"):
        lines.append(chunk(head, {}, usage=kept.get("usage")))
    return StreamingResponse(iter([*lines, DONE_LINE]), media_type="text/event-stream", headers=headers)


async def _answer(
    asked: turns.Asked, body: ChatRequest, named: tuple[str, str] | None, keys: dict[str, Any], known: list[str]
) -> Response:
    first = await turns.plan(asked, named)
    if first.mark is not None or named is not None:
        known.append(first.item.id)  # a stored conversation (not a new one, nothing stored when it fails)
    head = Head.new(asked.definition.name)
    if body.stream:
        return await _stream(asked, first, head, body, keys)
    make = functools.partial(_turn, queue=None, head=head, asked=asked)
    turn, _ = await turns.run(asked, first, make, _whole)
    extension = await _finish(asked, turn, keys, head)
    answer = completion(head, turn.reply.text, turn.usage if turn.ran else None, extension)
    return JSONResponse(answer, headers=headers_of(extension))


async def _finish(asked: turns.Asked, turn: turns.ChatTurn, keys: dict[str, Any], head: Head) -> Conversed:
    """After the turn's save: its transcript's mark, and its answer (with its completion's id and time) kept
    for a request sent again."""
    await turns.keep_mark(asked, turn)
    extension = turns.extension(turn, asked)
    answer: dict[str, Any] = {"content": turn.reply.text, "usage": usage_of(turn.usage if turn.ran else None)}
    answer |= {"llm_fsm": extension.model_dump(), "id": head.id, "created": head.created}
    saved = turn.plan.item.stored.conversation.snapshot()
    for digest, asked_for in keys.items():
        await index.keep_answer(asked.service.store, asked.client, digest, asked_for, saved, answer)
    return extension


def _definition(service: Service, name: str) -> FSMDefinition:
    found = service.definitions.get(name)
    if found is None:
        served = ", ".join(sorted(service.definitions))
        raise APIError(404, "not_found", f"the model {name!r} does not exist: the models are {served}", param="model")
    return found


def _named(body: ChatRequest, header: str | None) -> tuple[str, str] | None:
    """The conversation id the request names and where: its header, else ``metadata.conversation_id``."""
    if header is not None:
        return header, "X-Conversation-Id"
    given = (body.metadata or {}).get("conversation_id")
    if given is None:
        return None
    if not isinstance(given, str):
        raise APIError(400, "invalid_request", "metadata.conversation_id must be text", param="metadata")
    return clean_text(given), "metadata.conversation_id"


def _turn(plan: turns.Plan, *, queue: asyncio.Queue[Any] | None, head: Head, asked: turns.Asked) -> turns.ChatTurn:
    approval = runtime_text(asked.definition, "approval")
    return turns.ChatTurn(plan, asked.text, turns.Reply(queue, lambda delta: chunk(head, delta)), approval)


async def _whole(turn: turns.ChatTurn) -> None:
    await turn.plan.item.stored.arun(turn)


async def _stream(
    asked: turns.Asked, first: turns.Plan, head: Head, body: ChatRequest, keys: dict[str, Any]
) -> Response:
    """The turn as chunks: the role's, the message's deltas, the last (``finish_reason`` and ``llm_fsm``), the
    usage's when ``stream_options.include_usage`` asks, then ``[DONE]``. Errors before the turn starts are
    answered with their status; one after is a ``data: {"error": ...}`` line, as OpenAI's streams carry them."""
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def work(turn: turns.ChatTurn) -> None:
        await turn.plan.item.stored.arun(turn)
        extension = await _finish(asked, turn, keys, head)
        queue.put_nowait(chunk(head, {}, "stop", llm_fsm=extension.model_dump()))
        if include_usage:
            queue.put_nowait(chunk(head, {}, usage=usage_of(turn.usage if turn.ran else None)))
        queue.put_nowait(DONE_LINE)

    async def started(turn: turns.ChatTurn) -> asyncio.Task[None]:
        task, event = await launch(queue, work(turn))
        if event is DONE:
            task.result()  # the turn's error (or Moved): raised before the stream's 200
        return task

    make = functools.partial(_turn, queue=queue, head=head, asked=asked)
    turn, task = await turns.run(asked, first, make, started)
    conversed = Conversed(conversation_id=turn.plan.item.id, state="", status="", ended=False, paused=False)
    return EventStream(queue, task, _encode, headers=headers_of(conversed, final=False))


def _encode(event: Any) -> bytes:
    """A queued chunk as it is; an error as OpenAI's streams carry one, then the stream's end (a client
    reading up to ``[DONE]`` would otherwise wait for it)."""
    if isinstance(event, bytes):
        return event
    return f"data: {json.dumps(api_error(event).openai_body(), ensure_ascii=False)}\n\n".encode() + DONE_LINE
