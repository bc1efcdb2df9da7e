"""A FastAPI app that embeds the runtime: one conversation per user id, kept in a store.

Run it offline (the simulated model answers, no key needed; ``pip install 'llm-fsm-runtime[server]'``)::

    uvicorn fastapi_app:app --app-dir examples          # or: python examples/fastapi_app.py
    curl -X POST localhost:8000/users/ann/messages -H 'content-type: application/json' -d '{"text": null}'
    curl -X POST localhost:8000/users/ann/messages -H 'content-type: application/json' -d '{"text": "I am Ann"}'
    curl localhost:8000/users/ann

Settings, from the environment:

- ``LLM_FSM_MODEL``: a real model, any litellm name (``openai/gpt-4o-mini``; its key in the provider's usual
  variable, ``OPENAI_API_KEY``). Unset: the simulated model of ``llm_fsm.testing``.
- ``HELPDESK_STORE``: where conversations live (default ``memory:``, lost when the app stops). With
  ``sqlite:helpdesk.db``, ``redis://...`` or ``postgresql://...`` they survive restarts, and several
  worker processes share them: each turn runs under the conversation's lock.

``llm-fsm serve`` is the ready-made server (auth, streaming, a web page); this is the shape of an app of
your own, with its own routes around the same runtime.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException  # noqa: TID251 (the package keeps FastAPI to its server; an app uses it)
from pydantic import BaseModel

import llm_fsm
from llm_fsm.store import aadvance, open_store
from llm_fsm.testing import SimulatedLLM

DEFINITION = Path(__file__).with_name("helpdesk.json")


class Message(BaseModel):
    text: str | None = None  # None: the conversation's opening ("Hello, I'm Pat ...")


def model(definition: llm_fsm.FSMDefinition) -> llm_fsm.LLMClient:
    """``LLM_FSM_MODEL`` if set, else the simulated model (valid replies along the graph, offline)."""
    name = os.environ.get("LLM_FSM_MODEL")
    # keep=100: a long-running simulated model holds only its last requests, not every one
    return llm_fsm.LiteLLMClient(name) if name else SimulatedLLM(definition, keep=100)


# The HTTP status of each error a turn may raise, the first that fits (a ConflictError is a StoreError too).
STATUSES: list[tuple[type[Exception], int]] = [
    (llm_fsm.ConflictError, 409),  # still locked by another turn after `wait` seconds
    (llm_fsm.StoreError, 400),  # a user id the store refuses as a conversation id
    (llm_fsm.ConversationError, 409),  # it ended, or it waits for a pause to be resumed
    (llm_fsm.EmptyMessageError, 422),  # no text: only spaces
    (llm_fsm.LLMError, 502),  # the provider failed, after its retries: nothing was saved
]
TURN_ERRORS = tuple(kind for kind, _ in STATUSES)


def http_error(exc: Exception) -> HTTPException:
    """The HTTP error a turn's ``exc`` answers with (:data:`STATUSES`)."""
    return HTTPException(next(status for kind, status in STATUSES if isinstance(exc, kind)), str(exc))


def create_app(store_url: str | None = None) -> FastAPI:
    # Loaded once and shared by every conversation: a definition is immutable, and so is its use here.
    definition = llm_fsm.load(DEFINITION)
    llm = model(definition)
    hooks = llm_fsm.Hooks()  # handlers, checks and tools go here; one object serves every conversation
    store = open_store(store_url or os.environ.get("HELPDESK_STORE", "memory:"))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        store.close()

    app = FastAPI(title="helpdesk", lifespan=lifespan)

    @app.post("/users/{user_id}/messages")
    async def send(user_id: str, message: Message) -> dict[str, Any]:
        try:
            # Lock this user's conversation, load it (or create it), run one turn, save it. Two requests
            # of one user wait for each other; other users' turns run meanwhile.
            result = await aadvance(store, user_id, definition, llm, message.text, hooks=hooks)
        except TURN_ERRORS as exc:
            raise http_error(exc) from exc
        return {"reply": result.message, "state": result.state}

    @app.get("/users/{user_id}")
    async def show(user_id: str) -> dict[str, Any]:
        try:
            record = await store.aload(user_id)  # a Record (id, snapshot, version, updated_at), or None
        except llm_fsm.StoreError as exc:
            raise HTTPException(400, str(exc)) from exc
        if record is None:
            raise HTTPException(404, f"no conversation for {user_id!r}")
        snapshot = record.snapshot  # the conversation as saved: a pydantic model
        return {
            "state": snapshot.state,
            "status": snapshot.status,
            "context": snapshot.context,
            "version": record.version,  # one more per saved turn
            # the history's tail the snapshot carries; store.history(user_id) pages through all of it
            "history": [{"user": e.user, "assistant": e.assistant} for e in snapshot.history],
        }

    return app


app = create_app()

if __name__ == "__main__":
    import uvicorn  # noqa: TID251 (see the fastapi import)

    uvicorn.run(app)
