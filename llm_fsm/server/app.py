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

This module assembles the app; each concern has a module of its own:

==============  ======================================================================================
``service``     what the routes share (definitions, model, hooks, store, policies); stored conversations
``routes``      the routes and their request bodies; the bearer token's client
``sse``         a turn as Server-Sent Events (and the check that it may start, before the stream's 200)
``views``       what responses hold: results, conversations, definitions
``errors``      the JSON error bodies, the status of each runtime error, the app's exception handlers
``limits``      the request body's size limit
``auth``        bearer tokens; ``retries``: the ``Idempotency-Key`` header; ``page``: the web page at ``/``
``openai_*``    OpenAI's chat completions (``/v1``): ``compat`` the routes, ``turns`` a turn, ``index`` the
                conversation a message list leads to, ``shapes`` the bodies
==============  ======================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from llm_fsm.conversation import Conversation
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LLMClient
from llm_fsm.server.auth import parse_tokens
from llm_fsm.server.errors import add_error_handlers
from llm_fsm.server.limits import DEFAULT_MAX_BODY, BodyLimit
from llm_fsm.server.openai_compat import add_openai_routes
from llm_fsm.server.openai_shapes import OPENAI_HEADERS
from llm_fsm.server.page import add_page
from llm_fsm.server.retries import REPLAYED
from llm_fsm.server.routes import add_routes
from llm_fsm.server.service import DEFAULT_WAIT, Busy, Service, off_the_loop
from llm_fsm.store import Store, open_store

if TYPE_CHECKING:
    from llm_fsm.tools.mcp import MCPServer

__all__ = ["create_app"]


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
    add_routes(app, service)
    add_openai_routes(app, service)
    add_page(app)
    add_error_handlers(app)
    app.add_middleware(BodyLimit, limit=max_body)
    origins = list(cors_origins)
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Conversation-Id"],
            expose_headers=[REPLAYED, "Location", *OPENAI_HEADERS],
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
