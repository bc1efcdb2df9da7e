"""Conversation stores: where conversations live between turns, so that any process can take the next one.

=====================  ==================================================================
URL                    store
=====================  ==================================================================
``memory:``            a dict in this process (tests)
``file:///dir``        one JSON file per conversation, atomic writes, file locks
``sqlite:///path.db``  the default (``$LLM_FSM_HOME/conversations.db``): WAL, append-only turns
``redis://host:port``  many stateless workers, one Redis server (``pip install llm-fsm-runtime[redis]``)
=====================  ==================================================================

:func:`advance` runs one turn of a stored conversation: it locks it, loads it (or creates it),
runs the turn and saves the result with a version check, so two turns never interleave.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from llm_fsm.conversation import Conversation
from llm_fsm.definition import FSMDefinition
from llm_fsm.errors import StoreError
from llm_fsm.llm import LLMClient
from llm_fsm.store.base import DEFAULT_WAIT, Info, Record, Store, check_id
from llm_fsm.turn import TurnResult

__all__ = ["DEFAULT_WAIT", "Info", "Record", "Store", "advance", "check_id", "default_url", "home", "open_store"]


def home() -> Path:
    """The user directory: ``$LLM_FSM_HOME``, else ``~/.llm-fsm``."""
    return Path(os.environ.get("LLM_FSM_HOME") or Path.home() / ".llm-fsm")


def default_url() -> str:
    return f"sqlite://{home() / 'conversations.db'}"


def open_store(url: str | None = None) -> Store:
    """The store a URL names (default: :func:`default_url`); :class:`StoreError` for a bad URL."""
    url = url or default_url()
    scheme, _, rest = url.partition(":")
    path = unquote(urlparse(url).path) if rest.startswith("//") else rest
    if scheme == "memory":
        from llm_fsm.store.memory import MemoryStore

        return MemoryStore()
    if scheme == "file" and path:
        from llm_fsm.store.files import FileStore

        return FileStore(path)
    if scheme == "sqlite" and path:
        from llm_fsm.store.sqlite import SQLiteStore

        return SQLiteStore(path)
    if scheme in ("redis", "rediss", "unix"):
        try:
            from llm_fsm.store.redis import RedisStore
        except ImportError:
            raise StoreError("the Redis store needs redis-py: pip install 'llm-fsm-runtime[redis]'") from None
        return RedisStore(url)
    raise StoreError(f"unknown store URL {url!r}: use memory:, file:///dir, sqlite:///path.db or redis://host:port/db")


def advance(
    store: Store,
    conversation_id: str,
    definition: FSMDefinition,
    llm: LLMClient,
    text: str | None,
    *,
    wait: float = DEFAULT_WAIT,
    action: Callable[[Conversation], TurnResult] | None = None,
    **options: Any,
) -> TurnResult:
    """One turn of a stored conversation: lock, load or create, send ``text`` (None: start), save.

    ``action`` replaces the default turn (e.g. ``lambda c: c.resume(token, result)``). A turn that
    fails saves nothing. :class:`ConflictError` if the conversation stays locked for ``wait`` seconds.
    """
    with store.lock(conversation_id, timeout=wait):
        record = store.load(conversation_id)
        if record is None:
            conversation = Conversation(definition, llm, **options)
        else:
            conversation = Conversation.restore(record.snapshot, definition, llm, **options)
        if action is not None:
            result = action(conversation)
        else:
            result = conversation.start() if text is None else conversation.send(text)
        store.save(conversation_id, conversation.snapshot(), expected_version=record.version if record else 0)
    return result
