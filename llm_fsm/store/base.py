"""The store protocol shared by every backend, and the helpers they have in common.

A store keeps snapshots by conversation id, each with a version that grows by one per save.
``save(..., expected_version=v)`` is a compare-and-set: it fails with :class:`ConflictError` when
someone else saved first. Every method has an async twin (``asave``, ``aload``...); backends without
a native async client run the sync method in a worker thread.

Turn locks: ``lock(id)`` holds a conversation for a whole turn, across threads and processes; it
waits up to ``timeout`` seconds (0: fail at once), then raises ``ConflictError``. A backend supplies
three primitives (take the lock without waiting, renew it, give it back, each by a token that names
the turn holding it) and this module builds ``lock`` and ``alock`` on them:

- Waiting. ``lock`` retries with growing pauses. ``alock`` holds no thread while it waits: the tasks
  of one event loop queue for a conversation on an ``asyncio.Lock`` (first come, first served), and
  only the task at the head tries the shared lock, with ``await asyncio.sleep`` between tries; a try
  that does blocking I/O runs in a worker thread and returns at once.
- Holders that die. Where a lock is a record in shared storage (SQLite, Redis), it is a lease of a
  few seconds that a heartbeat renews while the turn runs (a daemon thread for ``lock``, an asyncio
  task for ``alock``), so the lock of a killed process is free again a lease later. We chose this
  over checking whether the owner's pid is alive: a pid means nothing on another host (Redis serves
  many) or in another container on the same volume, and pids are reused. A renewal extends only its
  own token, never takes a lock back, and the heartbeat stops before the lock is given back. A
  holder that stalls for longer than a lease loses its lock; its save then fails the version check
  rather than overwrite the next turn. File locks (``flock``) and memory locks die with their
  process, so they need no lease.
- ``unlock(id)`` force-releases a lock (for an operator, e.g. when a process hangs), and ``delete``
  drops the conversation's lock too, so a new conversation can start at once under the same id.
"""

from __future__ import annotations

import builtins
import itertools
import logging
import re
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from llm_fsm.errors import ConflictError, StoreError
from llm_fsm.snapshot import Exchange, Snapshot
from llm_fsm.store.history import TAIL, Page, frames_bounded

if TYPE_CHECKING:
    import asyncio


# seconds a lock (SQLite, Redis, Postgres) outlives its holder's last heartbeat: how long a killed turn blocks its
# conversation
LEASE = 5.0
T = TypeVar("T")
logger = logging.getLogger("llm_fsm")
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


def head_json(snapshot: Snapshot, tail: int = 0) -> str:
    """The snapshot without its history (the history is stored turn by turn), its sub-conversations' own
    histories cut to their last ``tail`` exchanges (0: kept whole); see :func:`frames_bounded`."""
    head = frames_bounded(snapshot, tail) if tail else snapshot
    return head.model_copy(update={"history": (), "history_start": 0}).model_dump_json()


def assemble(head: str | bytes, exchanges: list[str] | list[bytes], start: int = 0) -> Snapshot:
    """A snapshot from its stored head and the exchanges from index ``start`` on; :class:`StoreError` if the
    data is damaged."""
    try:
        snapshot = Snapshot.model_validate_json(head)
        history = tuple(Exchange.model_validate_json(e) for e in exchanges)
    # pydantic's ValidationError is a ValueError: damaged JSON and a wrong shape are caught alike
    except ValueError as exc:
        raise StoreError(f"stored conversation is damaged: {exc}") from exc
    return snapshot.model_copy(update={"history": history, "history_start": start})


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


class Store(ABC):
    """Where conversations live between turns."""

    url: str
    lease: float | None = None
    """Seconds a turn lock lasts unless its heartbeat renews it; None: the lock dies with its holder."""
    shared: bool = True
    """Whether other processes see the same conversations (``serve --workers`` needs it; ``memory:`` is not)."""
    tail: int = TAIL
    """Exchanges a loaded snapshot carries at least (its history's tail; all of it when shorter), besides those
    waiting for a summary: it must cover the prompt's ``history_window`` (plus the summary ``batch``), which
    :class:`~llm_fsm.store.stored.StoredConversation` sees to for the conversations it keeps."""

    def __init__(self) -> None:
        self._gates = _Gates()

    @abstractmethod
    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        """Store ``snapshot``; return the new version. ``expected_version`` (0: must not exist) is checked first."""

    @abstractmethod
    def load(self, conversation_id: str) -> Record | None:
        """The stored conversation, or None."""

    @abstractmethod
    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        """The ``limit`` exchanges of the stored history before index ``before`` (None: its end), or None when
        no conversation is stored under the id. Pages read the append-only rows, never the whole history."""

    @abstractmethod
    def delete(self, conversation_id: str) -> bool:
        """Remove a conversation and its lock; False if there was no conversation."""

    @abstractmethod
    def list(self) -> list[Info]:
        """Every stored conversation, most recently saved first."""

    def ids_ending(self, suffix: str) -> builtins.list[str]:
        """The ids of the stored conversations that end with ``suffix``, in no set order, read without the
        conversations (backends override this default, which lists them)."""
        return [info.id for info in self.list() if info.id.endswith(suffix)]

    @abstractmethod
    def prune(self, older_than: float | timedelta) -> int:
        """Delete conversations not saved for ``older_than`` (seconds or a timedelta); return how many."""

    @abstractmethod
    def unlock(self, conversation_id: str) -> bool:
        """Force-release the conversation's lock, whoever holds it (for an operator); whether one was held."""

    def close(self) -> None:  # noqa: B027 (most stores have nothing to release)
        """Release connections."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- turn locks, built on three primitives --------------------------------------------------

    @abstractmethod
    def _try_lock(self, conversation_id: str) -> str | None:
        """Take the lock if it is free or its lease ran out, without waiting: the holder's token, else None."""

    @abstractmethod
    def _release(self, conversation_id: str, token: str) -> None:
        """Give the lock back if ``token`` still holds it (after ``unlock`` it may be another turn's)."""

    def _renew(self, conversation_id: str, token: str) -> bool:
        """Extend the lease if ``token`` still holds it, else False (never take it back). Leased stores override."""
        return True

    @contextmanager
    def lock(self, conversation_id: str, *, timeout: float = DEFAULT_WAIT) -> Iterator[None]:
        """Hold the conversation for one turn; :class:`ConflictError` after ``timeout`` seconds."""
        pauses = _pauses(check_id(conversation_id), timeout, time.monotonic() + max(0.0, timeout))
        while (token := self._try_lock(conversation_id)) is None:
            time.sleep(next(pauses))
        try:
            with self._heartbeat(conversation_id, token):
                yield
        finally:
            self._release(conversation_id, token)

    @contextmanager
    def _heartbeat(self, conversation_id: str, token: str) -> Iterator[None]:
        """Renew the lease every third of it while the turn runs, in a daemon thread (a lease only)."""
        if self.lease is None:
            yield
            return
        stop = threading.Event()
        name = f"llm-fsm lease {conversation_id}"
        beat = threading.Thread(target=self._beat, args=(conversation_id, token, stop), name=name, daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()  # no renewal after this: the lock is given back next

    def _beat(self, conversation_id: str, token: str, stop: threading.Event) -> None:
        assert self.lease is not None
        while not stop.wait(self.lease / 3):
            try:
                if not self._renew(conversation_id, token):
                    _lost(conversation_id)
                    return
            except Exception as exc:  # the lease outlasts two more beats: one may get through
                logger.warning("could not renew the lock of conversation %r: %s", conversation_id, exc)

    # -- async twins (backends with native async clients override them) -----------------------

    async def asave(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        return await _to_thread(self.save, conversation_id, snapshot, expected_version=expected_version)

    async def aload(self, conversation_id: str) -> Record | None:
        return await _to_thread(self.load, conversation_id)

    async def ahistory(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        return await _to_thread(self.history, conversation_id, before=before, limit=limit)

    async def adelete(self, conversation_id: str) -> bool:
        return await _to_thread(self.delete, conversation_id)

    async def alist(self) -> builtins.list[Info]:
        return await _to_thread(self.list)

    async def aids_ending(self, suffix: str) -> builtins.list[str]:
        return await _to_thread(self.ids_ending, suffix)

    async def aprune(self, older_than: float | timedelta) -> int:
        return await _to_thread(self.prune, older_than)

    async def aunlock(self, conversation_id: str) -> bool:
        return await _to_thread(self.unlock, conversation_id)

    async def _atry_lock(self, conversation_id: str) -> str | None:
        return await _to_thread(self._try_lock, conversation_id)

    async def _arelease(self, conversation_id: str, token: str) -> None:
        await _to_thread(self._release, conversation_id, token)

    async def _arenew(self, conversation_id: str, token: str) -> bool:
        return await _to_thread(self._renew, conversation_id, token)

    @asynccontextmanager
    async def alock(self, conversation_id: str, *, timeout: float = DEFAULT_WAIT) -> AsyncIterator[None]:
        """Hold the conversation for one turn; :class:`ConflictError` after ``timeout`` seconds.

        Waiting holds no thread: tasks queue first come, first served, and the first tries the shared lock.
        """
        import asyncio

        deadline = time.monotonic() + max(0.0, timeout)
        async with self._gates.enter(check_id(conversation_id), timeout, deadline):
            token = await self._await_lock(conversation_id, timeout, deadline)
            try:
                async with self._aheartbeat(conversation_id, token):
                    yield
            finally:
                await asyncio.shield(self._arelease(conversation_id, token))  # even if we are cancelled again

    async def _await_lock(self, conversation_id: str, timeout: float, deadline: float) -> str:
        import asyncio

        pauses = _pauses(conversation_id, timeout, deadline)
        while (token := await self._one_try(conversation_id)) is None:
            await asyncio.sleep(next(pauses))
        return token

    async def _one_try(self, conversation_id: str) -> str | None:
        """One try of the shared lock, which ends even if our task is cancelled: a lock it took is given back."""
        import asyncio

        attempt = asyncio.ensure_future(self._atry_lock(conversation_id))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            token = await attempt  # one try is short
            if token is not None:
                await self._arelease(conversation_id, token)
            raise

    @asynccontextmanager
    async def _aheartbeat(self, conversation_id: str, token: str) -> AsyncIterator[None]:
        """Renew the lease every third of it while the turn runs, in an asyncio task (a lease only)."""
        if self.lease is None:
            yield
            return
        import asyncio

        name = f"llm-fsm lease {conversation_id}"  # as the sync heartbeat's thread
        beat = asyncio.get_running_loop().create_task(self._abeat(conversation_id, token), name=name)
        try:
            yield
        finally:
            # A renewal already running in a thread may still land: harmless, it extends only its own token.
            beat.cancel()
            await asyncio.wait([beat])

    async def _abeat(self, conversation_id: str, token: str) -> None:
        import asyncio

        assert self.lease is not None
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                if not await self._arenew(conversation_id, token):
                    _lost(conversation_id)
                    return
            except Exception as exc:  # the lease outlasts two more beats: one may get through
                logger.warning("could not renew the lock of conversation %r: %s", conversation_id, exc)


def _pauses(conversation_id: str, timeout: float, deadline: float) -> Iterator[float]:
    """The pauses between tries of a lock, growing from 2 to 64 ms; :func:`busy` once the deadline passes."""
    for attempt in itertools.count():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise busy(conversation_id, timeout)
        yield min(0.002 * 2 ** min(attempt, 5), remaining)


def _lost(conversation_id: str) -> None:
    logger.warning(
        "the lock of conversation %r was taken from its turn (its lease ran out, or unlock): "
        "the turn's save fails if another turn saved first",
        conversation_id,
    )


class _Gate:
    """Where the tasks of one event loop queue for a conversation, and how many hold or await it."""

    def __init__(self) -> None:
        import asyncio

        self.lock = asyncio.Lock()
        self.users = 0


class _Gates:
    """A :class:`_Gate` per conversation per event loop, dropped when no task holds or awaits it.

    ``asyncio.Lock`` serves its waiters in order, so same-process turns run first come, first served,
    and only the task at the head of the queue tries the shared lock.
    """

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Gate]]
        self._by_loop = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()  # event loops in several threads may share a store

    @asynccontextmanager
    async def enter(self, conversation_id: str, timeout: float, deadline: float) -> AsyncIterator[None]:
        """Wait for this conversation's turn in this loop; :func:`busy` at the deadline."""
        import asyncio

        with self._guard:
            # only the map of loops is shared between threads: a loop's own gates are used by its thread alone
            gates = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        gate = gates.get(conversation_id)
        if gate is None:
            gate = gates[conversation_id] = _Gate()
        gate.users += 1
        try:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await gate.lock.acquire()
            except TimeoutError:
                raise busy(conversation_id, timeout) from None
            try:
                yield
            finally:
                gate.lock.release()
        finally:
            gate.users -= 1
            # dropped when unused, so that a long-lived process keeps no gate for every conversation it has seen
            if not gate.users:
                del gates[conversation_id]


async def _to_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    import asyncio  # only the async API needs it

    return await asyncio.to_thread(function, *args, **kwargs)


STORE_METHODS = (
    "save", "load", "history", "delete", "list", "ids_ending", "prune", "unlock", "_try_lock", "_renew", "_release",
    "asave", "aload", "ahistory", "adelete", "alist", "aids_ending", "aprune", "aunlock", "_atry_lock", "_arenew",
    "_arelease",
)  # fmt: skip


def failures_as_store_errors(cls: type[Store], errors: tuple[type[BaseException], ...]) -> None:
    """Make the backend's own ``errors`` (a server gone, a broken file) raised by any method of ``cls`` that
    reads or writes a :class:`StoreError` naming the store (its URL without a password) and the reason:
    what callers (``serve``: 503 ``store_unavailable``) handle, instead of a driver's exception."""
    import functools
    import inspect

    def failure(store: Store, exc: BaseException) -> StoreError:
        where = public_url(str(getattr(store, "url", type(store).__name__)))
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(f"the store {where} failed: {reason}")

    def guard(method: Any) -> Any:
        if inspect.iscoroutinefunction(method):

            async def guarded_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await method(self, *args, **kwargs)
                except errors as exc:
                    raise failure(self, exc) from exc

            return functools.wraps(method)(guarded_async)

        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except errors as exc:
                raise failure(self, exc) from exc

        return functools.wraps(method)(guarded)

    for name in STORE_METHODS:
        # only the methods the class defines itself: the inherited async twins call its sync methods,
        # which are wrapped
        if name in cls.__dict__:
            setattr(cls, name, guard(cls.__dict__[name]))


def public_url(url: str) -> str:
    """``url`` with its password (in the user part or the query) replaced by ``***``: for messages.

    A URL without a password comes back as it was written."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    name, colon, _ = user.partition(":")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not (at and colon) and all(k != "password" for k, _ in query):
        return url
    netloc = f"{name}:***@{host}" if at and colon else parts.netloc
    query = [(k, "***" if k == "password" else v) for k, v in query]
    # safe="*": the mask reads *** in a query too, not %2A%2A%2A
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*/")))


def info_of(conversation_id: str, snapshot: Snapshot, version: int, updated_at: float) -> Info:
    return Info(
        conversation_id, snapshot.definition_name, snapshot.state, snapshot.status, snapshot.turns, version, updated_at
    )


__all__ = ["DEFAULT_WAIT", "Info", "Page", "Record", "Store", "check_id"]
