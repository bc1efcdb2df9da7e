"""The HTTP API: ``create_app(definitions, llm, ...)`` gives an ASGI app (FastAPI) serving conversations.

Every turn runs as a library user runs one: a :class:`~llm_fsm.store.StoredConversation` holds the
conversation's lock, loads its newest version, runs ``asend``/``astream``/``aresume``/``astart``, and
saves with a version check. A failed turn saves nothing. Two requests on one conversation are
serialised (``busy="queue"``: the second waits up to ``wait`` seconds for the lock, then 409) or
refused at once (``busy="reject"``: 409). A client that disconnects while a turn streams cancels the
turn: the conversation stays as it was, or, when the disconnect comes after the turn committed,
holds the whole turn; never half of one. A request sent again with the ``Idempotency-Key`` of one whose
turn was saved gets that turn's answer, and nothing runs (see :mod:`llm_fsm.store.idempotency`).

Sync handlers and Python checks run in worker threads (the turn awaits them), so a slow one does not
hold the event loop; ``error`` handlers run where the error happens, as everywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llm_fsm.conversation import Conversation, refuse_empty
from llm_fsm.definition import FSMDefinition
from llm_fsm.engine import Snapshot
from llm_fsm.errors import ConversationEnded, ConversationError, ConversationPaused, FSMError
from llm_fsm.hooks import Hooks, is_async
from llm_fsm.llm import LLMClient
from llm_fsm.server.auth import client_of, parse_tokens
from llm_fsm.server.errors import APIError, from_fsm_error, logger, not_found
from llm_fsm.server.page import add_page
from llm_fsm.server.retries import REPLAYED, Key, asked, id_of, keyed, mark_replayed
from llm_fsm.store import Store, StoredConversation, open_store
from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult
from llm_fsm.turn import TurnResult

if TYPE_CHECKING:
    from llm_fsm.tools.mcp import MCPServer

Busy = Literal["queue", "reject"]
DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_WAIT = 30.0
PING_SECONDS = 15.0


# -- request bodies ----------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # strict: "start": "yes" is refused, not read as true


class CreateConversation(_Body):
    definition: str | None = Field(None, description="The definition's name (optional when the server serves one).")
    state: str | None = Field(None, description="Start in this state instead of the initial one.")
    context: dict[str, Any] = Field(default_factory=dict, description="The initial context (JSON data).")
    start: bool = Field(True, description="Make the opening turn (one model call) and return its result.")


class SendMessage(_Body):
    message: str = Field(description="The user's message.")


class StreamTurn(_Body):
    message: str | None = Field(None, description="The user's message; null: the opening turn of a new conversation.")


class ResumeTurn(_Body):
    token: str = Field(description="The pending event's token (from the result or the conversation).")
    result: dict[str, Any] = Field(
        default_factory=dict, description='Merged into the context, e.g. {"approved": true}.'
    )


# -- the service -----------------------------------------------------------------------------------


class Service:
    """What the routes share: the definitions, the model, the hooks, the store and the policies."""

    def __init__(
        self,
        definitions: Mapping[str, FSMDefinition],
        llm: LLMClient,
        hooks: Hooks,
        store: Store,
        *,
        tokens: Mapping[str, str] | None,
        busy: Busy,
        wait: float,
        show_secrets: bool,
        options: Mapping[str, Any],
        mcp_servers: Iterable[MCPServer] = (),
    ) -> None:
        self.definitions = dict(definitions)
        self.llm = llm
        self.hooks = hooks
        self.store = store
        self.tokens = dict(tokens or {})
        self.wait = 0.0 if busy == "reject" else wait
        self.show_secrets = show_secrets
        self.options = dict(options)
        self.mcp_servers = list(mcp_servers)

    def mcp_servers_down(self) -> list[str]:
        """The names of the MCP servers that are down, after trying to bring each back (within its
        backoff): readiness is then the next call of a server no turn calls, and a server taken out
        of rotation for it comes back without traffic. Blocks (a restart): run it in a thread."""
        return [server.name for server in self.mcp_servers if server.revive(block=False) is not None]

    def definition(self, name: str | None) -> FSMDefinition:
        if name is None:
            if len(self.definitions) == 1:
                return next(iter(self.definitions.values()))
            raise APIError(400, "invalid_request", f"name the definition: one of {', '.join(sorted(self.definitions))}")
        found = self.definitions.get(name)
        if found is None:
            raise not_found(f"no definition named {name!r} (served: {', '.join(sorted(self.definitions))})")
        return found

    def new(
        self, client: str, definition: FSMDefinition, state: str | None, context: dict[str, Any], key: str | None
    ) -> Stored:
        """A conversation under a fresh id (128 random bits), built when its first turn runs. With an
        idempotency ``key`` the id is the key's: a creation sent again finds the conversation it made."""
        if state is not None and state not in definition.states:
            known = ", ".join(definition.states)
            raise APIError(400, "invalid_request", f"definition {definition.name!r} has no state {state!r} ({known})")
        conversation_id = secrets.token_hex(16) if key is None else id_of(key)

        def make(snapshot: Snapshot | None) -> Conversation:
            if snapshot is not None and key is not None:  # made by this key before: its answer is in it
                return self._restored(conversation_id, snapshot)
            if snapshot is not None:  # 128 random bits do not collide; refuse rather than take another's
                raise APIError(409, "conversation_conflict", "this conversation id is taken")
            return Conversation(
                definition, self.llm, state, context, hooks=self.hooks, id=conversation_id, **self.options
            )

        key = _key(client, conversation_id)
        return Stored(conversation_id, StoredConversation(self.store, key, make, wait=self.wait))

    def stored(self, client: str, conversation_id: str) -> Stored:
        """The client's stored conversation, read when its turn holds the lock. 404 when there is none (or
        it is another client's: its existence is not revealed); 422 when its definition is not served or
        changed in structure since it began."""
        if not _is_id(conversation_id):
            raise not_found(f"no conversation {conversation_id!r}")

        def make(snapshot: Snapshot | None) -> Conversation:
            if snapshot is None:  # never stored, another client's, or deleted: never start one in its place
                raise not_found(f"no conversation {conversation_id!r}")
            return self._restored(conversation_id, snapshot)

        return Stored(
            conversation_id, StoredConversation(self.store, _key(client, conversation_id), make, wait=self.wait)
        )

    def _restored(self, conversation_id: str, snapshot: Snapshot) -> Conversation:
        """The stored conversation; 422 when its definition is not served or changed in structure."""
        definition = self.definitions.get(snapshot.definition_name)
        if definition is None:
            name = snapshot.definition_name
            raise APIError(
                422,
                "definition_error",
                f"conversation {conversation_id!r} runs definition {name!r}, which this server does not serve",
            )
        try:
            return Conversation.restore(
                snapshot, definition, self.llm, hooks=self.hooks, id=conversation_id, **self.options
            )
        except ConversationError as exc:  # its definition's structure changed since it began
            advice = "serve the version of the definition it began with, or delete the conversation"
            raise APIError(422, "definition_error", f"{_without_api_advice(str(exc))}: {advice}") from None

    async def loaded(self, client: str, conversation_id: str) -> Stored:
        """:meth:`stored`, read now (without the lock: to show it)."""
        item = self.stored(client, conversation_id)
        item.stored._take_up(await self.store.aload(item.stored.id))  # noqa: SLF001 (load() would block the loop)
        return item

    def mask(self, definition: FSMDefinition) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return (lambda context: context) if self.show_secrets else definition.masked


@dataclasses.dataclass
class Stored:
    id: str
    stored: StoredConversation

    @property
    def definition(self) -> FSMDefinition:
        """The conversation's definition (once it was read)."""
        return self.stored.conversation.definition


def _key(client: str, conversation_id: str) -> str:
    """Where a client's conversation is stored: another client's key for the same id is another key."""
    return f"{client}@{conversation_id}"


def _is_id(text: str) -> bool:
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


# -- what responses hold ---------------------------------------------------------------------------


def result_view(result: TurnResult, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A turn's result as ``llm-fsm run`` prints it, with secret-looking values masked unless asked."""
    from llm_fsm.secrets import mask_pending, mask_run

    data = result.to_dict()
    data["context"], data["context_updates"] = mask(data["context"]), mask(data["context_updates"])
    data["pending"] = mask_pending(data["pending"], mask)
    data["tool_calls"] = [mask_run(run, mask) for run in data["tool_calls"]]
    return data


def conversation_view(item: Stored, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    from llm_fsm.secrets import mask_pending

    conversation = item.stored.conversation
    snapshot = conversation.snapshot()
    pending = conversation.pending.model_dump() if conversation.pending else None
    return {
        "id": item.id,
        "definition": item.definition.name,
        "state": conversation.state,
        "stack": conversation.frames,  # root first; the last one talks (subflows)
        "status": conversation.status,
        "ended": conversation.ended,
        "turns": snapshot.turns,
        "version": item.stored.version,
        "context": mask(conversation.context),
        "provenance": conversation.provenance,
        "memory": mask(conversation.memory),
        "summary": snapshot.summary.model_dump(),
        "pending": mask_pending(pending, mask),
        "history": [exchange.model_dump() for exchange in conversation.history],
    }


def definition_view(definition: FSMDefinition) -> dict[str, Any]:
    from llm_fsm.authoring.diagram import mermaid_ids, to_mermaid

    return {
        "name": definition.name,
        "description": definition.description,
        "version": definition.version,
        "initial_state": definition.initial_state,
        "states": {
            sid: {
                "purpose": state.purpose,
                "terminal": state.terminal,
                "transitions": [t.target_state for t in state.transitions],
            }
            for sid, state in definition.states.items()
        },
        "global_transitions": [
            {"target_state": g.target_state, "except_states": list(g.except_states)}
            for g in definition.global_transitions
        ],
        "mermaid": to_mermaid(definition),
        "mermaid_ids": mermaid_ids(definition),
    }


# -- streaming a turn ------------------------------------------------------------------------------

_STARTED = object()  # the turn holds the lock and may run: the response starts
_DONE = object()  # the turn's task ended (its result or error is on the task)


def _refusal(conversation: Conversation, text: str | None) -> None:
    """Raise now what the turn would raise at its start, so that the response carries the right status."""
    if conversation.ended:
        raise ConversationEnded(f"the conversation has ended in state '{conversation.state}'", state=conversation.state)
    if conversation.paused:
        reason = conversation.pending.reason if conversation.pending else "paused"
        raise ConversationPaused(
            f"the conversation is paused ({reason}); resume it with its token", state=conversation.state
        )
    if text is None and conversation.history:
        raise ConversationError("the opening turn was already made: send a message", state=conversation.state)
    if text is not None:
        refuse_empty(text)


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
        queue.put_nowait(_STARTED)
        last = None
        async for event in conversation.astream(text):
            queue.put_nowait(event)
            last = event
        return last if isinstance(last, TurnResult) else None  # the result, kept for the key

    task = asyncio.create_task(item.stored.arun(turn, **keyed(key, *asked(text))))
    task.add_done_callback(lambda _: queue.put_nowait(_DONE))
    try:
        first = await queue.get()
    except BaseException:
        task.cancel()
        raise
    encode = functools.partial(_encode, mask=mask_of(item.definition))
    if first is _DONE:
        kept = task.result()  # raises the turn's error: a JSON error response
        if item.stored.replayed and isinstance(kept, TurnResult):
            return _replay(kept, task, encode)
        raise APIError(500, "internal_error", "the turn ended before it started")  # pragma: no cover
    return EventStream(queue, task, encode)


def _replay(kept: TurnResult, task: asyncio.Task[Any], encode: Callable[[Any], bytes]) -> Response:
    """A kept turn as a stream: its whole message as one ``delta`` (the deltas still add up to the message),
    then its ``result``; the tool calls it made are in the result (they ran once, in the first attempt)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for event in (MessageDelta(kept.message), kept, _DONE):
        queue.put_nowait(event)
    return EventStream(queue, task, encode, headers={REPLAYED: "true"})


def _encode(event: Any, *, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
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
    elif isinstance(event, APIError):
        name, data = "error", event.body()
    else:  # pragma: no cover (every event of a turn is one of the above)
        raise TypeError(f"unexpected event {event!r}")
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def api_error(error: BaseException) -> APIError:
    if isinstance(error, APIError):
        return error
    if isinstance(error, FSMError):
        return from_fsm_error(error)
    logger.error("unexpected error in a turn: %s", error, exc_info=error)
    return APIError(500, "internal_error", "internal error")


class EventStream(Response):
    """Server-Sent Events of one turn: ``delta``, ``reset``, ``tool_call``, ``tool_result``, then ``result``
    or ``error``. A disconnect cancels the turn (a cancelled turn changes nothing), and the response
    ends only once the turn's task has: the conversation is saved whole or not at all by then."""

    media_type = "text/event-stream"

    def __init__(
        self,
        queue: asyncio.Queue[Any],
        task: asyncio.Task[Any],
        encode: Callable[[Any], bytes],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status_code, self.background = 200, None
        # no body: no Content-Length
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})
        self.queue, self.task, self.encode = queue, task, encode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch, receive, group.cancel_scope)
                await self._events(send)
                group.cancel_scope.cancel()
        except* OSError:  # the client went away while we wrote (the task group may wrap it)
            pass
        finally:
            if not self.task.done():
                self.task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([self.task])

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async def _events(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        while True:
            try:
                event = await asyncio.wait_for(self.queue.get(), PING_SECONDS)
            except TimeoutError:
                await send({"type": "http.response.body", "body": b": ping\n\n", "more_body": True})
                continue
            if event is _DONE:
                if not self.task.cancelled() and (error := self.task.exception()) is not None:
                    await send({"type": "http.response.body", "body": self.encode(api_error(error)), "more_body": True})
                break
            await send({"type": "http.response.body", "body": self.encode(event), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


# -- request size ----------------------------------------------------------------------------------


class BodyLimit:
    """Refuse a request body longer than ``limit`` bytes (413), whether it says its length or not."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        error = APIError(413, "request_too_large", f"the request body is longer than {self.limit} bytes")
        await JSONResponse(error.body(), status_code=413)({"type": "http"}, _nothing, send)


async def _nothing() -> Message:  # pragma: no cover (a JSON response reads nothing)
    return {"type": "http.disconnect"}


# -- sync hooks off the event loop -----------------------------------------------------------------


def off_the_loop(hooks: Hooks) -> Hooks:
    """A copy of ``hooks`` whose sync handlers and checks run in worker threads, awaited by the turn.

    ``error`` handlers stay as they are: the runtime calls them where the error happens, synchronously.
    """
    copy = hooks.copy()
    copy.handlers = [
        h if h.is_async or "error" in h.timings else dataclasses.replace(h, function=_in_thread(h.function))
        for h in hooks.handlers
    ]
    copy.checks = {name: f if is_async(f) else _in_thread(f) for name, f in hooks.checks.items()}
    return copy


def _in_thread(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)  # keeps the signature: the runtime passes only the arguments it declares
    def in_thread(**arguments: Any) -> Any:
        return asyncio.to_thread(function, **arguments)

    return in_thread


# -- the app ---------------------------------------------------------------------------------------


def create_app(
    definitions: Iterable[FSMDefinition] | FSMDefinition,
    llm: LLMClient,
    *,
    hooks: Hooks | None = None,
    store: Store | str | None = None,
    tokens: Mapping[str, str] | None = None,
    busy: Busy = "queue",
    wait: float = DEFAULT_WAIT,
    max_body: int = DEFAULT_MAX_BODY,
    cors_origins: Iterable[str] = (),
    show_secrets: bool = False,
    conversation_options: Mapping[str, Any] | None = None,
    mcp_servers: Iterable[MCPServer] = (),
) -> FastAPI:
    """The ASGI app serving ``definitions`` (each under its ``name``) with ``llm``.

    ``store``: a :class:`Store` or its URL (default: SQLite under ``$LLM_FSM_HOME``). ``tokens``:
    ``{token: client name}`` (see :mod:`llm_fsm.server.auth`); None or empty: no authentication, so
    bind the server to a loopback address. ``busy``: what a request finds when another turn holds its
    conversation (``queue``: wait up to ``wait`` seconds, then 409; ``reject``: 409 at once).
    ``max_body``: the largest request body, in bytes. ``cors_origins``: origins allowed by CORS
    (none: CORS is off). ``show_secrets``: return secret-looking context values unmasked.
    ``conversation_options`` go to each :class:`Conversation` (``max_corrections``, ``prompt``...).
    ``mcp_servers``: the MCP servers whose tools ``hooks`` holds, for ``GET /ready`` to report.
    Raises :class:`~llm_fsm.errors.DefinitionError` when a definition cannot run with ``hooks``
    (a handler, check or tool it names is not registered), and ``ValueError`` for two definitions
    under one name, an unknown ``busy`` policy, or a token shorter than 16 characters or a client
    name that is not 1-64 letters, digits, ``_ . -`` (``TokenError``).
    """
    if busy not in ("queue", "reject"):
        raise ValueError(f"busy must be 'queue' or 'reject', not {busy!r}")
    served = _by_name([definitions] if isinstance(definitions, FSMDefinition) else definitions)
    clients = parse_tokens(
        (f"create_app(tokens=...) entry {name!r}", f"{name}:{token}") for token, name in (tokens or {}).items()
    )
    registry = off_the_loop(hooks if hooks is not None else Hooks())
    options = dict(conversation_options or {})
    for definition in served.values():  # every handler, check and tool each names is registered
        Conversation(definition, llm, hooks=registry, **options)
    the_store = store if isinstance(store, Store) else open_store(store)
    service = Service(
        served,
        llm,
        registry,
        the_store,
        tokens=clients,
        busy=busy,
        wait=wait,
        show_secrets=show_secrets,
        options=options,
        mcp_servers=mcp_servers,
    )
    app = FastAPI(
        title="llm-fsm",
        summary="Conversational state machines defined in JSON, driven by an LLM.",
        version=_version(),
        debug=False,
    )
    app.state.service = service
    _routes(app, service)
    add_page(app)
    _error_handlers(app)
    app.add_middleware(BodyLimit, limit=max_body)
    origins = list(cors_origins)
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            expose_headers=[REPLAYED, "Location"],
        )
    return app


def _version() -> str:
    import llm_fsm

    return llm_fsm.__version__


def _by_name(definitions: Iterable[FSMDefinition]) -> dict[str, FSMDefinition]:
    served: dict[str, FSMDefinition] = {}
    for definition in definitions:
        if definition.name in served:
            raise ValueError(
                f"two definitions are named {definition.name!r}: each served definition needs its own name"
            )
        served[definition.name] = definition
    if not served:
        raise ValueError("no definition to serve")
    return served


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


def _routes(app: FastAPI, service: Service) -> None:
    views = {name: definition_view(definition) for name, definition in service.definitions.items()}  # drawn once

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

    @app.get("/definitions", tags=["definitions"])
    async def list_definitions(client: Client) -> dict[str, Any]:
        """The definitions served, each with its states and its graph (Mermaid ``stateDiagram-v2``)."""
        return {"definitions": list(views.values())}

    @app.get("/definitions/{name}", tags=["definitions"])
    async def get_definition(name: str, client: Client) -> dict[str, Any]:
        """One definition, with its states and its graph (Mermaid)."""
        return views[service.definition(name).name]

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

    @app.post("/conversations/{conversation_id}/messages", tags=["conversations"])
    async def send_message(
        conversation_id: str, body: SendMessage, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """One turn: the user's message in, the turn's result out (as ``llm-fsm run`` prints it)."""
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
        ``tool_call`` and ``tool_result``, then ``result`` (the turn's result) or ``error``. A client
        that disconnects cancels the turn: the conversation is left as it was (or, if the turn had
        committed, with the whole turn)."""
        return await start_stream(service.stored(client, conversation_id), body.message, service.mask, key)

    @app.post("/conversations/{conversation_id}/resume", tags=["conversations"])
    async def resume(
        conversation_id: str, body: ResumeTurn, client: Client, response: Response, key: Key
    ) -> dict[str, Any]:
        """Continue a paused conversation with its pending event's token, exactly once per token."""
        item = service.stored(client, conversation_id)
        asked = keyed(key, "resume", body.model_dump())
        result = await item.stored.arun(lambda c: c.aresume(body.token, body.result), **asked)
        mark_replayed(response, item.stored)
        return result_view(result, service.mask(item.definition))

    @app.delete("/conversations/{conversation_id}", status_code=204, tags=["conversations"])
    async def delete_conversation(conversation_id: str, client: Client) -> Response:
        """Delete the conversation (after any turn running on it)."""
        key = service.stored(client, conversation_id).stored.id
        async with service.store.alock(key, timeout=service.wait):
            if not await service.store.adelete(key):
                raise not_found(f"no conversation {conversation_id!r}")
        return Response(status_code=204)


def _error_handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, APIError)
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return JSONResponse(error.body(), status_code=error.status, headers=headers)

    async def on_fsm_error(request: Request, error: Exception) -> JSONResponse:
        return await on_api_error(request, api_error(error))

    async def on_invalid(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = [_problem(e) for e in error.errors()]
        summary = "; ".join(f"{p['where']}: {p['message']}" if p["where"] else p["message"] for p in problems)
        return await on_api_error(
            request, APIError(400, "invalid_request", f"invalid request: {summary}", errors=problems)
        )

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        status = error.status_code
        if status == 400:  # a body FastAPI could not parse: not UTF-8, JSON nested too deeply, a number too long...
            problem = {"where": "body", "message": _unparsed(error.__cause__)}
            invalid = APIError(400, "invalid_request", f"invalid request: body: {problem['message']}", errors=[problem])
            return await on_api_error(request, invalid)
        kinds = {404: "not_found", 405: "method_not_allowed"}
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return await on_api_error(
            request, APIError(status, kinds.get(status, "http_error"), message.get(status, str(error.detail)))
        )

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=error)
        return JSONResponse(APIError(500, "internal_error", "internal error").body(), status_code=500)

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(FSMError, on_fsm_error)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


def _unparsed(cause: BaseException | None) -> str:
    """Why FastAPI could not read a body (it says only "There was an error parsing the body")."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not UTF-8 text at byte {cause.start}: send JSON encoded as UTF-8"
    return "the body cannot be read as JSON (nested too deeply, or a number too long?)"


def _without_api_advice(message: str) -> str:
    """A runtime message without its advice to Python callers (``pass allow_changed_definition=True``), which
    a client of the HTTP API cannot follow."""
    return re.sub(
        r" \((?:pass allow_changed_definition=True|refused because of strict_definition=True)[^)]*\)", "", message
    )


def _problem(error: Mapping[str, Any]) -> dict[str, str]:
    """One problem of a request, where it is (``body.message``) and what is wrong; never the value sent."""
    location = [str(part) for part in error["loc"]]
    if error.get("type") == "json_invalid":  # ("body", position)
        reason = (error.get("ctx") or {}).get("error", "")
        where = f" at character {location[1]}" if len(location) > 1 else ""
        return {"where": "body", "message": f"the body is not valid JSON{where}" + (f" ({reason})" if reason else "")}
    return {"where": ".".join(location), "message": str(error["msg"])}
