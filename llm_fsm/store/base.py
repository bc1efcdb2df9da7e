"""The store protocol shared by every backend, and the helpers they have in common.

A store keeps snapshots by conversation id, each with a version that grows by one per save.
``save(..., expected_version=v)`` is a compare-and-set: it fails with :class:`ConflictError` when
someone else saved first. ``lock(id)`` holds a conversation for a whole turn, across threads and
processes; it waits up to ``timeout`` seconds (0: fail at once) and then raises ``ConflictError``.
Every method has an async twin (``asave``, ``aload``...); backends without a native async client
run the sync method in a worker thread.
"""

from __future__ import annotations

import builtins
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from llm_fsm.engine import Exchange, Snapshot
from llm_fsm.errors import ConflictError, StoreError

T = TypeVar("T")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")
DEFAULT_WAIT = 10.0


def check_id(conversation_id: str) -> str:
    """A conversation id: 1-128 letters, digits, ``_ . @ : -``, not starting with a symbol."""
    if not isinstance(conversation_id, str) or not _ID.match(conversation_id) or ".." in conversation_id:
        raise StoreError(
            f"invalid conversation id {conversation_id!r}: use 1-128 letters, digits and _ . @ : - "
            "(starting with a letter or digit)"
        )
    return conversation_id


@dataclass(frozen=True)
class Record:
    """A stored conversation: its snapshot, its version, and when it was last saved (epoch seconds)."""

    id: str
    snapshot: Snapshot
    version: int
    updated_at: float


@dataclass(frozen=True)
class Info:
    """One line of ``list()``."""

    id: str
    definition_name: str
    state: str
    status: str
    turns: int
    version: int
    updated_at: float


def seconds(older_than: float | timedelta) -> float:
    return older_than.total_seconds() if isinstance(older_than, timedelta) else float(older_than)


def head_json(snapshot: Snapshot) -> str:
    """The snapshot without its history (the history is stored turn by turn)."""
    return snapshot.model_copy(update={"history": ()}).model_dump_json()


def exchange_json(exchange: Exchange) -> str:
    return exchange.model_dump_json()


def assemble(head: str | bytes, exchanges: list[str] | list[bytes]) -> Snapshot:
    """A snapshot from its stored head and history; :class:`StoreError` if the data is damaged."""
    try:
        snapshot = Snapshot.model_validate_json(head)
        history = tuple(Exchange.model_validate_json(e) for e in exchanges)
    except ValueError as exc:
        raise StoreError(f"stored conversation is damaged: {exc}") from exc
    return snapshot.model_copy(update={"history": history})


def conflict(conversation_id: str, expected: int | None, found: int) -> ConflictError:
    return ConflictError(
        f"conversation {conversation_id!r} was saved by someone else (expected version {expected}, found {found})",
        conversation_id=conversation_id,
    )


def busy(conversation_id: str, timeout: float) -> ConflictError:
    return ConflictError(
        f"conversation {conversation_id!r} is in use by another turn (waited {timeout:g} s)",
        conversation_id=conversation_id,
    )


def appended(stored_len: int, stored_last: str | None, history: tuple[Exchange, ...]) -> list[str] | None:
    """The exchanges to append when ``history`` extends what is stored; None when it must be rewritten."""
    if len(history) < stored_len:
        return None
    if stored_len and exchange_json(history[stored_len - 1]) != stored_last:
        return None
    return [exchange_json(e) for e in history[stored_len:]]


def poll(deadline: float, attempt: int) -> None:
    """Sleep a little before trying a lock again (more as the wait goes on), within the deadline."""
    time.sleep(max(0.0, min(0.002 * 2 ** min(attempt, 5), deadline - time.monotonic())))


class Store(ABC):
    """Where conversations live between turns."""

    url: str

    @abstractmethod
    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        """Store ``snapshot``; return the new version. ``expected_version`` (0: must not exist) is checked first."""

    @abstractmethod
    def load(self, conversation_id: str) -> Record | None:
        """The stored conversation, or None."""

    @abstractmethod
    def delete(self, conversation_id: str) -> bool:
        """Remove a conversation; False if there was none."""

    @abstractmethod
    def list(self) -> list[Info]:
        """Every stored conversation, most recently saved first."""

    @abstractmethod
    def prune(self, older_than: float | timedelta) -> int:
        """Delete conversations not saved for ``older_than`` (seconds or a timedelta); return how many."""

    @abstractmethod
    @contextmanager
    def lock(self, conversation_id: str, *, timeout: float = DEFAULT_WAIT) -> Iterator[None]:
        """Hold the conversation for one turn; :class:`ConflictError` after ``timeout`` seconds."""
        yield  # pragma: no cover

    def close(self) -> None:  # noqa: B027 (most stores have nothing to release)
        """Release connections."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- async twins (backends with native async clients override them) -----------------------

    async def asave(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        return await _to_thread(self.save, conversation_id, snapshot, expected_version=expected_version)

    async def aload(self, conversation_id: str) -> Record | None:
        return await _to_thread(self.load, conversation_id)

    async def adelete(self, conversation_id: str) -> bool:
        return await _to_thread(self.delete, conversation_id)

    async def alist(self) -> builtins.list[Info]:
        return await _to_thread(self.list)

    async def aprune(self, older_than: float | timedelta) -> int:
        return await _to_thread(self.prune, older_than)

    @asynccontextmanager
    async def alock(self, conversation_id: str, *, timeout: float = DEFAULT_WAIT) -> AsyncIterator[None]:
        manager = self.lock(conversation_id, timeout=timeout)
        await _to_thread(manager.__enter__)
        try:
            yield
        finally:
            await _to_thread(manager.__exit__, None, None, None)


async def _to_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    import asyncio  # only the async API needs it

    return await asyncio.to_thread(function, *args, **kwargs)


def info_of(conversation_id: str, snapshot: Snapshot, version: int, updated_at: float) -> Info:
    return Info(
        conversation_id, snapshot.definition_name, snapshot.state, snapshot.status, snapshot.turns, version, updated_at
    )


__all__ = ["DEFAULT_WAIT", "Info", "Record", "Store", "check_id"]
