"""OpenAI's chat completions over the served definitions: ``GET /v1/models`` lists them, ``POST
/v1/chat/completions`` takes a turn of one (``model`` is its name), whole or streamed (``stream: true``:
``data: {chunk}`` lines, then ``data: [DONE]``). The same bearer tokens as the native routes; errors in
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``, see :meth:`APIError.openai_body`).

An unmodified client resends the whole message list on every call: the conversation is found from it
(:mod:`llm_fsm.server.openai_index`); a client that can send an id names it (the ``X-Conversation-Id`` header
or ``metadata.conversation_id``). What a chat client cannot show (the state, whether the conversation ended
or paused, the pause's question) comes in the ``llm_fsm`` field of the completion and of a stream's last
chunk, and in ``X-LLM-FSM-*`` headers.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from typing import Annotated, Any

from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse, Response

from llm_fsm.definition import FSMDefinition
from llm_fsm.server import openai_turns as turns
from llm_fsm.server.errors import APIError, api_error
from llm_fsm.server.openai_shapes import (
    DONE_LINE,
    ChatRequest,
    Conversed,
    chunk,
    completion,
    headers_of,
    model_card,
    model_list,
    read_messages,
    usage_of,
)
from llm_fsm.server.routes import Client
from llm_fsm.server.service import Service
from llm_fsm.server.sse import DONE, EventStream, launch
from llm_fsm.values import blank

NamedId = Annotated[
    str | None,
    Header(alias="X-Conversation-Id", description="The conversation to continue (else found from the messages)."),
]


def add_openai_routes(app: FastAPI, service: Service) -> None:
    @app.get("/v1/models", tags=["openai"])
    async def list_models(client: Client) -> dict[str, Any]:
        """The definitions served, as OpenAI's model list (a model's id is the definition's name)."""
        return model_list(sorted(service.definitions))

    @app.get("/v1/models/{name}", tags=["openai"])
    async def get_model(name: str, client: Client) -> dict[str, Any]:
        return model_card(_definition(service, name).name)

    @app.post("/v1/chat/completions", tags=["openai"])
    async def chat_completions(body: ChatRequest, client: Client, named: NamedId = None) -> Response:
        """A turn of the conversation the messages (or ``X-Conversation-Id``) lead to, in OpenAI's shape."""
        definition = _definition(service, body.model)
        transcript, text, notes = read_messages(body)
        if blank(text):
            raise APIError(
                400, "empty_message", "the user's message is empty: there is nothing to answer", param="messages"
            )
        asked = turns.Asked(service, client, definition, transcript, text, notes)
        first = await turns.plan(asked, _named(body, named))
        ident = "chatcmpl-" + secrets.token_hex(12)
        if body.stream:
            return await _stream(asked, first, ident, body)
        make = functools.partial(_turn, queue=None, ident=ident, asked=asked)
        turn, _ = await turns.run(asked, first, make, _whole)
        await turns.keep_mark(asked, turn)
        extension = turns.extension(turn, asked)
        answer = completion(ident, definition.name, turn.reply.text, turn.usage if turn.ran else None, extension)
        return JSONResponse(answer, headers=headers_of(extension))


def _definition(service: Service, name: str) -> FSMDefinition:
    found = service.definitions.get(name)
    if found is None:
        served = ", ".join(sorted(service.definitions))
        raise APIError(404, "not_found", f"the model {name!r} does not exist: the models are {served}", param="model")
    return found


def _named(body: ChatRequest, header: str | None) -> str | None:
    """The conversation id the request names: its header, else ``metadata.conversation_id``."""
    given = header if header is not None else (body.metadata or {}).get("conversation_id")
    if given is not None and not isinstance(given, str):
        raise APIError(400, "invalid_request", "metadata.conversation_id must be text", param="metadata")
    return given


def _turn(plan: turns.Plan, *, queue: asyncio.Queue[Any] | None, ident: str, asked: turns.Asked) -> turns.ChatTurn:
    model, mask = asked.definition.name, asked.service.mask(asked.definition)
    return turns.ChatTurn(plan, asked.text, turns.Reply(queue, lambda delta: chunk(ident, model, delta)), mask)


async def _whole(turn: turns.ChatTurn) -> None:
    await turn.plan.item.stored.arun(turn)


async def _stream(asked: turns.Asked, first: turns.Plan, ident: str, body: ChatRequest) -> Response:
    """The turn as chunks: the role's, the message's deltas, the last (``finish_reason`` and ``llm_fsm``), the
    usage's when ``stream_options.include_usage`` asks, then ``[DONE]``. Errors before the turn starts are
    answered with their status; one after is a ``data: {"error": ...}`` line, as OpenAI's streams carry them."""
    model = asked.definition.name
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def work(turn: turns.ChatTurn) -> None:
        await turn.plan.item.stored.arun(turn)
        await turns.keep_mark(asked, turn)
        extension = turns.extension(turn, asked)
        queue.put_nowait(chunk(ident, model, {}, "stop", llm_fsm=extension.model_dump()))
        if include_usage:
            queue.put_nowait(chunk(ident, model, {}, usage=usage_of(turn.usage if turn.ran else None)))
        queue.put_nowait(DONE_LINE)

    async def started(turn: turns.ChatTurn) -> asyncio.Task[None]:
        task, event = await launch(queue, work(turn))
        if event is DONE:
            task.result()  # the turn's error (or Moved): raised before the stream's 200
        return task

    make = functools.partial(_turn, queue=queue, ident=ident, asked=asked)
    turn, task = await turns.run(asked, first, make, started)
    conversed = Conversed(conversation_id=turn.plan.item.id, state="", status="", ended=False, paused=False)
    return EventStream(queue, task, _encode, headers=headers_of(conversed, final=False))


def _encode(event: Any) -> bytes:
    """A queued chunk as it is; an error as OpenAI's streams carry one."""
    if isinstance(event, bytes):
        return event
    return f"data: {json.dumps(api_error(event).openai_body(), ensure_ascii=False)}\n\n".encode()
