"""Conversation stores: where conversations live between turns, so that any process can take the next one.

=====================================  ==========================================================
URL                                    store
=====================================  ==========================================================
``memory:``                            a dict in this process (tests)
``file:DIR``, ``file:///DIR``          one JSON file per conversation, atomic writes, file locks
``sqlite:PATH``, ``sqlite:///PATH``    the default (``$LLM_FSM_HOME/conversations.db``): WAL, append-only turns
``redis://host:port/db``               many stateless workers, one Redis server (``pip install llm-fsm-runtime[redis]``)
``postgresql://user@host:port/db``     many stateless workers, one PostgreSQL database (also ``postgres://``;
                                       ``pip install llm-fsm-runtime[postgres]``)
=====================================  ==========================================================

Paths in ``sqlite:`` and ``file:`` URLs follow one rule. After three slashes the path is absolute,
as in the standard: ``sqlite:///var/bots/c.db`` is ``/var/bots/c.db``. Without slashes it is
relative to the current folder: ``sqlite:c.db``, ``file:data/conversations``. ``file://data/x`` is
refused, since ``data`` would be a host; the error shows both spellings. The path is
percent-decoded (``%20`` is a space); a ``?`` or ``#`` is refused (write ``%3F``, ``%23``). Every bad
URL (unknown scheme, no path, a Redis port that is not a number...) raises :class:`StoreError`.

:func:`advance` (or ``await`` :func:`aadvance`) runs one turn of a stored conversation: it locks it,
loads it (or creates it), runs the turn and saves the result with a version check, so two turns never interleave.
:class:`StoredConversation` runs that same turn for a conversation object kept between turns
(the terminal commands keep theirs so).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

from llm_fsm.errors import StoreError
from llm_fsm.store.base import DEFAULT_WAIT, Info, Page, Record, Store, check_id, public_url
from llm_fsm.store.stored import StoredConversation, aadvance, advance

__all__ = [
    "DEFAULT_WAIT",
    "KINDS",
    "Info",
    "Kind",
    "Page",
    "Record",
    "Store",
    "StoredConversation",
    "aadvance",
    "advance",
    "check_id",
    "default_url",
    "forms",
    "home",
    "open_store",
]


def home() -> Path:
    """The user directory: ``$LLM_FSM_HOME``, else ``~/.llm-fsm``."""
    return Path(os.environ.get("LLM_FSM_HOME") or Path.home() / ".llm-fsm")


def default_url() -> str:
    """``sqlite:///...`` naming ``conversations.db`` in :func:`home`, as an absolute, percent-encoded URL."""
    return "sqlite:" + (home() / "conversations.db").absolute().as_uri().removeprefix("file:")


@dataclass(frozen=True)
class Kind:
    """A kind of store, as :func:`open_store` reads its URL: the ``schemes`` that name it, how its URLs are
    written (``forms``, for errors and help), what ``opens`` a store from a URL, and whether it is a ``local`` path
    (``create=False`` then checks that something is there)."""

    schemes: tuple[str, ...]
    forms: str
    opens: Callable[[str], Store]
    local: bool = False


def _memory(url: str) -> Store:
    if url.partition(":")[2]:
        raise StoreError(f"unknown store URL {public_url(url)!r}: use {forms()}")
    from llm_fsm.store.in_process import MemoryStore

    return MemoryStore()


def _file(url: str) -> Store:
    from llm_fsm.store.files import FileStore

    return FileStore(_local_path(url))


def _sqlite(url: str) -> Store:
    from llm_fsm.store.sqlite import SQLiteStore

    return SQLiteStore(_local_path(url))


def _redis(url: str) -> Store:
    """A Redis store; :class:`StoreError` for a URL redis-py would refuse, before any connection is tried."""
    _check_redis_url(url)
    try:
        from llm_fsm.store.redis import RedisStore
    except ImportError:
        raise StoreError("the Redis store needs redis-py: pip install 'llm-fsm-runtime[redis]'") from None
    try:
        return RedisStore(url)
    except (ValueError, TypeError) as exc:  # what redis-py itself refuses in a URL
        raise StoreError(f"store URL {public_url(url)!r} is not a Redis URL: {exc}") from None


def _postgres(url: str) -> Store:
    """A PostgreSQL store; :class:`StoreError` for a bad URL or a server that cannot be used."""
    _check_port(url)
    try:
        from llm_fsm.store.postgres import PostgresStore
    except ImportError:
        raise StoreError("the PostgreSQL store needs psycopg: pip install 'llm-fsm-runtime[postgres]'") from None
    return PostgresStore(url)


# Every kind of store, each imported only when a URL names it. A new store is a module and a row here.
KINDS: tuple[Kind, ...] = (
    Kind(("memory",), "memory:", _memory),
    Kind(("sqlite",), "sqlite:PATH.db, sqlite:///ABSOLUTE/PATH.db", _sqlite, local=True),
    Kind(("file",), "file:DIR, file:///ABSOLUTE/DIR", _file, local=True),
    Kind(("redis", "rediss", "unix"), "redis://host:port/db", _redis),
    Kind(("postgresql", "postgres"), "postgresql://user@host:port/db", _postgres),
)
_BY_SCHEME = {scheme: kind for kind in KINDS for scheme in kind.schemes}


def forms() -> str:
    """How store URLs are written, every kind's, for an error or a help text."""
    written = [kind.forms for kind in KINDS]
    return ", ".join(written[:-1]) + " or " + written[-1]


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """The store a URL names (default: :func:`default_url`); :class:`StoreError` for a bad URL (see above).
    ``create=False``: a ``sqlite:`` or ``file:`` store that does not exist yet is a :class:`StoreError` too, not
    made (a mistyped path where a store is only looked at)."""
    url = default_url() if url is None else url
    scheme, colon, _ = url.partition(":")
    if not colon or not scheme:
        raise StoreError(f"{public_url(url)!r} is not a store URL: use {forms()}")
    kind = _BY_SCHEME.get(scheme)
    if kind is None:
        raise StoreError(f"unknown store URL {public_url(url)!r}: use {forms()}")
    if not create and kind.local and not Path(_local_path(url)).exists():
        raise StoreError(
            f"no store at {public_url(url)}: nothing is at {_local_path(url)} (run, chat and serve make one)"
        )
    return kind.opens(url)


def _local_path(url: str) -> str:
    """The path a ``sqlite:`` or ``file:`` URL names: absolute after ``///``, else relative to the current folder."""
    scheme, _, rest = url.partition(":")
    if "?" in rest or "#" in rest:
        raise StoreError(
            f"store URL {public_url(url)!r} has a query or a fragment: a {scheme}: URL is a path "
            "(write ? as %3F, # as %23)"
        )
    if rest.startswith("//"):
        rest = rest[2:]
        host = rest.partition("/")[0]
        if host:  # "file://data/x": the standard reads "data" as a host, which a store on this machine cannot be
            shown = public_url(url).partition(":")[2][2:]  # the rest, with any password masked
            raise StoreError(
                f"store URL {public_url(url)!r} names a host, {shown.partition('/')[0]!r}: write {scheme}:{shown} for "
                f"a path relative to the current folder, or {scheme}://{Path.cwd() / unquote(shown)} for an "
                "absolute one"
            )
    if not rest:
        raise StoreError(
            f"store URL {public_url(url)!r} has no path: write {scheme}:PATH (relative) or {scheme}:///ABSOLUTE/PATH"
        )
    return unquote(rest)


def _check_port(url: str) -> SplitResult:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number from 0 to 65535)
    except ValueError:
        raise StoreError(f"store URL {public_url(url)!r}: the port is not a number from 0 to 65535") from None
    return parts


def _check_redis_url(url: str) -> None:
    """Refuse, in words that name the fault, what redis-py would refuse with a bare ValueError or read wrongly."""
    parts = _check_port(url)
    if parts.scheme == "unix":
        if not parts.path:
            raise StoreError(f"store URL {public_url(url)!r} names no socket: write unix:///PATH/TO/redis.sock")
        return
    if not parts.hostname:
        raise StoreError(f"store URL {public_url(url)!r} names no host: write {parts.scheme}://HOST:PORT/DB")
    if parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise StoreError(
            f"store URL {public_url(url)!r}: the database must be a number, as in {parts.scheme}://HOST:6379/0"
        )
