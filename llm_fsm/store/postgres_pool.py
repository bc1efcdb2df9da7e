"""The PostgreSQL store's connection pools (:mod:`llm_fsm.store.postgres`): one for the sync methods, one
per event loop for the async ones, each with at most ``size`` connections in use.

Ours rather than psycopg_pool's: a server that is down fails the call at once with libpq's reason
(psycopg_pool's callers wait for its background reconnection, then get a timeout without a cause), and
no background thread or task outlives its use.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg

__all__ = ["CHECK_IDLE", "WAIT_FOR_CONNECTION", "AsyncPool", "Pool", "PoolBusy"]

CHECK_IDLE = 1.0  # seconds idle after which a pooled connection is checked (one round trip) before it is reused
WAIT_FOR_CONNECTION = 30.0  # seconds a call waits while all of its pool's connections are in use


class PoolBusy(Exception):
    """Every connection of a pool stayed in use for ``WAIT_FOR_CONNECTION`` seconds."""


def reusable(connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a connection given back may serve the next call (not closed, broken or inside a transaction)."""
    return not connection.closed and connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class Pool:
    """Connections for the sync methods: at most ``size`` in use; idle ones are reused, checked first."""

    def __init__(self, conninfo: str, size: int) -> None:
        self._conninfo, self._size = conninfo, size
        self._idle: list[tuple[psycopg.Connection[Any], float]] = []  # and when each was given back
        self._slots = threading.BoundedSemaphore(size)
        self._guard = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if not self._slots.acquire(timeout=WAIT_FOR_CONNECTION):
            raise PoolBusy(f"all {self._size} connections stayed in use for {WAIT_FOR_CONNECTION:g} s")
        try:
            connection = self._reuse() or psycopg.connect(self._conninfo, autocommit=True)
            try:
                yield connection
            finally:
                self._give_back(connection)
        finally:
            self._slots.release()

    def _reuse(self) -> psycopg.Connection[Any] | None:
        while True:
            with self._guard:
                if not self._idle:
                    return None
                connection, since = self._idle.pop()
            try:  # one the server dropped while it was idle (a restart, a timeout) fails here, not in a turn
                if time.monotonic() - since > CHECK_IDLE:
                    connection.execute("")
                return connection
            except psycopg.Error:
                connection.close()

    def _give_back(self, connection: psycopg.Connection[Any]) -> None:
        if not reusable(connection):
            connection.close()
            return
        with self._guard:
            self._idle.append((connection, time.monotonic()))

    def close(self) -> None:
        with self._guard:
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()


class AsyncPool:
    """:class:`Pool` for one event loop, of psycopg's async connections."""

    def __init__(self, conninfo: str, size: int) -> None:
        self._conninfo, self._size = conninfo, size
        self._idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        self._slots = asyncio.Semaphore(size)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        try:
            async with asyncio.timeout(WAIT_FOR_CONNECTION):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolBusy(f"all {self._size} connections stayed in use for {WAIT_FOR_CONNECTION:g} s") from None
        try:
            connection = await self._reuse() or await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            try:
                yield connection
            finally:
                await self._give_back(connection)
        finally:
            self._slots.release()

    async def _reuse(self) -> psycopg.AsyncConnection[Any] | None:
        while self._idle:
            connection, since = self._idle.pop()
            try:
                if time.monotonic() - since > CHECK_IDLE:
                    await connection.execute("")
                return connection
            except psycopg.Error:
                await connection.close()
        return None

    async def _give_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if reusable(connection):
            self._idle.append((connection, time.monotonic()))
        else:
            await connection.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await connection.close()
