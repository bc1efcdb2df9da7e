"""The routes: health and readiness, the definitions served, and the conversations (create, read,
send, stream, resume, go on with a workflow's run, record an assistant message, delete), each behind the bearer
token's client (:data:`Client`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from llm_fsm.conversation import Conversation
from llm_fsm.running import last
from llm_fsm.server.auth import client_of
from llm_fsm.server.errors import APIError, not_found
from llm_fsm.server.retries import Key, asked, keyed, mark_replayed
from llm_fsm.server.service import Service
from llm_fsm.server.sse import start_stream
from llm_fsm.server.views import conversation_view, definition_view, history_view, result_view
from llm_fsm.turn.refusals import turn_refusal
from llm_fsm.turn.runner import TurnResult

# -- request bodies ----------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # strict: "start": "yes" is refused, not read as true


class CreateConversation(_Body):
    definition: str | None = Field(None, description="The definition's name (optional when the server serves one).")
    state: str | None = Field(None, description="Start in this state instead of the initial one.")
    context: dict[str, Any] = Field(default_factory=dict, description="The initial context (JSON data).")
    start: bool = Field(
        True,
        description="Make the opening turn (one model call; none when the state has its own opening) and return "
        "its result.",
    )


class SendMessage(_Body):
    message: str = Field(description="The user's message.")


class StreamTurn(_Body):
    message: str | None = Field(None, description="The user's message; null: the opening turn of a new conversation.")


class ResumeTurn(_Body):
    token: str = Field(description="The pending event's token (from the result or the conversation).")
    result: dict[str, Any] = Field(
        default_factory=dict, description='Merged into the context, e.g. {"approved": true}.'
    )


class RecordMessage(_Body):
    message: str = Field(description="The assistant's message, written elsewhere (a person, another system).")
    replace: bool = Field(
        False, description="Write it over the reply of the last exchange instead of adding an exchange."
    )


# -- the client -------------------------------------------------------------------------------------


_bearer = HTTPBearer(auto_error=False, description="A token from the server's tokens file or variable.")


def _authenticate(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """The client the request's bearer token names; 401 when it names none."""
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    client = client_of(header, request.app.state.service.tokens)
    if client is None:
        raise APIError(401, "unauthorized", "a valid bearer token is required (Authorization: Bearer TOKEN)")
    return client


Client = Annotated[str, Depends(_authenticate)]


# -- the routes -------------------------------------------------------------------------------------


def add_routes(app: FastAPI, service: Service) -> None:
    """The routes below on ``app``, answered by ``service``: the server's, the definitions', the conversations'
    and their turns' (in this order, the order of the API's description)."""
    _server_routes(app, service)
    _definition_routes(app, service)
    _conversation_routes(app, service)
    _turn_routes(app, service)


def _server_routes(app: FastAPI, service: Service) -> None:
    """Health and readiness, asked without a token."""

    @app.get("/health", tags=["server"])
    async def health() -> dict[str, str]:
        """Whether the server is up (no token needed)."""
        return {"status": "ok"}

    @app.get("/ready", tags=["server"], responses={503: {"description": "An MCP server is down"}})
    async def ready() -> JSONResponse:
        """Whether every tool can be reached (no token needed): 503 naming the MCP servers that are
        down, after trying to restart them. Names only: the reasons, which quote the servers' own
        error output, go to the server's log."""
        down = await asyncio.to_thread(service.mcp_servers_down)
        body = {"status": "not ready" if down else "ready", "mcp_servers_down": down}
        return JSONResponse(body, status_code=503 if down else 200)


def _definition_routes(app: FastAPI, service: Service) -> None:
    """The definitions served, each drawn once."""
    views = {name: definition_view(definition) for name, definition in service.definitions.items()}  # drawn once

    @app.get("/definitions", tags=["definitions"])
    async def list_definitions(client: Client) -> dict[str, Any]:
        """The definitions served, each with its states and its graph (Mermaid ``stateDiagram-v2``)."""
        return {"definitions": list(views.values())}

    @app.get("/definitions/{name}", tags=["definitions"])
    async def get_definition(name: str, client: Client) -> dict[str, Any]:
        """One definition, with its states and its graph (Mermaid)."""
        return views[service.definition(name).name]


def _conversation_routes(app: FastAPI, service: Service) -> None:
    """A conversation made, read (whole, or its history a page at a time) and deleted."""

    @app.post("/conversations", status_code=201, tags=["conversations"])
    async def create_conversation(
        body: CreateConversation, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """A new conversation (optionally in ``state`` with ``context``), with its opening turn unless
        ``start`` is false. Nothing is stored when the opening turn fails. With an ``Idempotency-Key``
        the conversation's id is the key's: sent again, the request gets the same conversation and result."""
        definition = service.definition(body.definition)
        item, mask = service.new(client, definition, body.state, body.context, key), service.mask(definition)

        async def opening(conversation: Conversation) -> TurnResult | None:
            if not item.stored.is_new:  # the key's conversation, whose answer is no longer kept
                raise APIError(
                    409, "conversation_conflict", "a conversation was made with this Idempotency-Key: use a new key"
                )
            return await conversation.astart() if body.start else None

        result = await item.stored.arun(opening, **keyed(key, "create", body.model_dump()))
        mark_replayed(response, item.stored)
        response.headers["Location"] = f"/conversations/{item.id}"
        return {
            "id": item.id,
            "conversation": conversation_view(item, mask),
            "result": None if result is None else result_view(result, mask),
        }

    @app.get("/conversations/{conversation_id}", tags=["conversations"])
    async def get_conversation(conversation_id: str, client: Client) -> dict[str, Any]:
        """The conversation: state, status, context with each key's provenance, pending event, history."""
        item = await service.loaded(client, conversation_id)
        return conversation_view(item, service.mask(item.definition))

    @app.get("/conversations/{conversation_id}/history", tags=["conversations"])
    async def get_history(
        conversation_id: str, client: Client, before: str | None = None, limit: str | None = None
    ) -> dict[str, Any]:
        """A page of the conversation's history, oldest first: the ``limit`` exchanges (default 50, at most
        1000) before index ``before`` (default: the end), each with its ``index``. ``next_before`` is the cursor
        of the page before this one (pass it as ``before``), null when this page starts at the first exchange.
        Read from the store's rows, never the whole history."""
        where = _page_bounds(before, limit)
        item = service.stored(client, conversation_id)
        page = await service.store.ahistory(item.stored.id, before=where[0], limit=where[1])
        if page is None:
            raise not_found(f"no conversation {conversation_id!r}")
        return history_view(page)

    @app.delete("/conversations/{conversation_id}", status_code=204, tags=["conversations"])
    async def delete_conversation(conversation_id: str, client: Client) -> Response:
        """Delete the conversation (after any turn running on it)."""
        key = service.stored(client, conversation_id).stored.id
        async with service.store.alock(key, timeout=service.wait):
            if not await service.store.adelete(key):
                raise not_found(f"no conversation {conversation_id!r}")
        return Response(status_code=204)


def _turn_routes(app: FastAPI, service: Service) -> None:
    """A conversation's turns: a message sent (answered whole or streamed), a pause resumed, and an assistant's
    message written elsewhere recorded."""

    @app.post("/conversations/{conversation_id}/messages", tags=["conversations"])
    async def send_message(
        conversation_id: str, body: SendMessage, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """One turn: the user's message in, the turn's result out (as ``llm-fsm run`` prints it). In a workflow,
        the whole run, under the conversation's lock: the last step's result, the earlier ones in ``steps``."""
        item = service.stored(client, conversation_id)
        result = await item.stored.arun(lambda c: c.asend(body.message), **keyed(key, *asked(body.message)))
        mark_replayed(response, item.stored)
        return result_view(result, service.mask(item.definition))

    @app.post(
        "/conversations/{conversation_id}/stream",
        tags=["conversations"],
        responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events of the turn."}},
    )
    async def stream_turn(conversation_id: str, body: StreamTurn, client: Client, key: Key) -> Response:
        """One turn as Server-Sent Events: ``delta`` (message text), ``reset`` (discard the text shown),
        ``tool_call`` and ``tool_result``, then ``result`` (the turn's result) or ``error``. In a workflow,
        the whole run: each step's events then a ``step`` (that step's result), and last the ``result`` (as
        ``/messages`` answers). A client that disconnects cancels the turn: the conversation is left as it
        was (or, if the turn had committed, with the whole turn; in a workflow, with the steps that had)."""
        return await start_stream(service.stored(client, conversation_id), body.message, service.mask, key)

    @app.post("/conversations/{conversation_id}/resume", tags=["conversations"])
    async def resume(
        conversation_id: str, body: ResumeTurn, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """Continue a paused conversation with its pending event's token, exactly once per token (in a workflow,
        with the rest of its run, answered as a message's run)."""
        item = service.stored(client, conversation_id)
        asked = keyed(key, "resume", body.model_dump())
        result = await item.stored.arun(lambda c: c.aresume(body.token, body.result), **asked)
        mark_replayed(response, item.stored)
        return result_view(result, service.mask(item.definition))

    @app.post("/conversations/{conversation_id}/run", tags=["conversations"])
    async def go_on(conversation_id: str, client: Client, response: Response, key: Key) -> dict[str, Any]:
        """A workflow's run from where the conversation stands, with no message: the steps its state takes on
        its own (after a run stopped at its ``max_run_steps``, or one a failure or a stopped server cut short),
        answered as a message's run is. 409 ``conversation_conflict`` when it waits for a person."""
        item = service.stored(client, conversation_id)

        async def run(conversation: Conversation) -> TurnResult:
            refused = turn_refusal(conversation, None, going_on=True)  # ended or paused: that error
            if refused is not None:
                raise refused.error()
            results = [result async for result in conversation.arun()]
            if not results:
                raise APIError(
                    409, "conversation_conflict", f"nothing to run: state {conversation.state!r} waits for a person"
                )
            return last(results)

        result = await item.stored.arun(run, **keyed(key, "run"))
        mark_replayed(response, item.stored)
        return result_view(result, service.mask(item.definition))

    @app.post("/conversations/{conversation_id}/assistant", tags=["conversations"])
    async def record_message(
        conversation_id: str, body: RecordMessage, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """Record a message written elsewhere (a person who took over, another system) as the assistant's turn:
        a new exchange with no user words, or with ``replace`` written over the last exchange's reply. No model
        call, not a turn; answered with the conversation, as ``GET`` gives it."""
        item = service.stored(client, conversation_id)
        await item.stored.arecord(body.message, replace=body.replace, idempotency_key=key)
        mark_replayed(response, item.stored)
        return conversation_view(item, service.mask(item.definition))


def _page_bounds(before: str | None, limit: str | None) -> tuple[int | None, int]:
    """``before`` and ``limit`` of a history page, from the query; 400 ``invalid_request`` saying what is wrong."""
    from llm_fsm.store.history import MAX_PAGE

    def number(name: str, text: str, low: int, high: int | None) -> int:
        if not text.isdigit() or not low <= int(text) <= (high if high is not None else int(text)):
            bounds = f"from {low} to {high}" if high is not None else f"from {low} on"
            raise APIError(
                400, "invalid_request", f"invalid request: {name} must be a whole number {bounds}, not {text!r}"
            )
        return int(text)

    return (
        None if before is None else number("before", before, 0, None),
        50 if limit is None else number("limit", limit, 1, MAX_PAGE),
    )
