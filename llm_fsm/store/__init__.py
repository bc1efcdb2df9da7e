"""Conversation stores: where conversations live between turns, so that any process can take the next one.

=====================  ==================================================================
URL                    store
=====================  ==================================================================
``memory:``            a dict in this process (tests)
``file:///dir``        one JSON file per conversation, atomic writes, file locks
``sqlite:///path.db``  the default (``$LLM_FSM_HOME/conversations.db``): WAL, append-only turns
``redis://host:port``  many stateless workers, one Redis server (``pip install llm-fsm-runtime[redis]``)
=====================  ==================================================================

:func:`advance` (or ``await`` :func:`aadvance`) runs one turn of a stored conversation: it locks it,
loads it (or creates it), runs the turn and saves the result with a version check, so two turns never interleave.
:class:`StoredConversation` runs that same turn for a conversation object kept between turns
(the terminal commands keep theirs so).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from llm_fsm.errors import StoreError
from llm_fsm.store.base import DEFAULT_WAIT, Info, Record, Store, check_id
from llm_fsm.store.stored import StoredConversation, aadvance, advance

__all__ = [
    "DEFAULT_WAIT",
    "Info",
    "Record",
    "Store",
    "StoredConversation",
    "aadvance",
    "advance",
    "check_id",
    "default_url",
    "home",
    "open_store",
]


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
