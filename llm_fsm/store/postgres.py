"""``postgresql://user:password@host:port/db[?schema=name]``: many workers on many hosts share one PostgreSQL.

Needs psycopg 3 (``pip install 'llm-fsm-runtime[postgres]'``). The layout mirrors the SQLite store:
a row per conversation (its head, version, history length and last exchange) and a row per turn in
``turns``, which a save only appends to, so a save costs the same at turn 5 and at turn 500. Tables
live in the schema ``llm_fsm`` (``?schema=`` picks another: several apps or test runs, one
database) and are created on first use when missing, under a transaction-scoped advisory lock so
that workers starting together do not race; when they all exist nothing is created, so the role
the workers use needs no CREATE right once they do. JSON is kept as ``text``, not ``jsonb``: the
last exchange is compared byte for byte, and ``jsonb`` refuses ``\\u0000`` where ``text`` keeps it.

Saves are one transaction that reads the version with ``SELECT ... FOR UPDATE`` and refuses a stale
one (:class:`~llm_fsm.errors.ConflictError`); two first saves of one id meet on the primary key and
the loser reads again. A load is one statement, so it sees one committed version of both tables.

Turn locks are rows of ``locks`` (id, token, expiry): leases of ``LEASE`` seconds that the holder's
heartbeat renews, as in :mod:`llm_fsm.store.base`. Expiries use the server's clock, so workers whose
clocks disagree still agree on them. We chose rows over PostgreSQL's advisory locks, which die with
the session that holds them: that would pin a pooled connection to each turn for its whole length
(a model call: one connection per turn in flight, against ``max_connections``), a hung holder would
keep its lock as long as its connection lives, a holder cut off by the network would keep it until
TCP keepalive notices (hours by default), ``unlock`` would have to kill another session, and behind
a transaction-mode pooler (PgBouncer) session locks do not work at all. ``locks`` is UNLOGGED: taking,
renewing and releasing a lock then costs no WAL flush. After a server crash the table comes back
empty, which frees every lock as a lapsed lease would: a holder still running finds at its next
renewal that its lock is gone, and its save is checked by the version, as always.

Connections come from small pools (``pool_size`` connections in use at most): one for the sync
methods and one per event loop for the async ones, which use psycopg's native async connections. A
connection that sat idle for over a second is checked before it is reused (an empty statement), so
one the server dropped meanwhile (a restart, a failover, an idle timeout) is replaced instead of
failing a turn; busy connections skip the round trip. A server that cannot be used raises
:class:`~llm_fsm.errors.StoreError` at once, naming the URL without its password and giving libpq's
reason.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import re
import threading
import uuid
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from llm_fsm.errors import StoreError
from llm_fsm.snapshot import Snapshot
from llm_fsm.store.base import LEASE, Info, Record, Store, assemble, check_id, conflict, head_json, public_url, seconds
from llm_fsm.store.history import Page, check_page, page_of, rows_to_write
from llm_fsm.store.postgres_pool import AsyncPool, Pool, PoolBusy

SCHEMA = "llm_fsm"
POOL_SIZE = 10  # connections in use at most per pool: one pool for the sync calls, one per event loop
CONNECT_TIMEOUT = 10  # seconds to reach the server, unless the URL says (libpq alone would wait for TCP)
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
T = TypeVar("T")

DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.conversations (
    id text PRIMARY KEY,
    version bigint NOT NULL,
    definition_name text NOT NULL,
    state text NOT NULL,
    status text NOT NULL,
    turns integer NOT NULL,
    head text NOT NULL,
    history_len integer NOT NULL,
    last_exchange text,
    updated_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON {s}.conversations (updated_at);
CREATE TABLE IF NOT EXISTS {s}.turns (
    conversation_id text NOT NULL,
    idx integer NOT NULL,
    exchange text NOT NULL,
    PRIMARY KEY (conversation_id, idx)
);
CREATE UNLOGGED TABLE IF NOT EXISTS {s}.locks (
    id text PRIMARY KEY,
    token text NOT NULL,
    expires_at timestamptz NOT NULL
);
ALTER TABLE {s}.conversations ADD COLUMN IF NOT EXISTS history_start integer NOT NULL DEFAULT 0;
"""
# history_start (added by history paging) is the first turn a load reads: conversations saved before it get 0,
# so their first load reads the whole history, as it did; their next save sets it. A constant default makes
# the ALTER a change of the catalogue only, whatever the table holds.
TABLES = ("conversations", "turns", "locks")

STATEMENTS = {
    # the head's uid (see history.HEAD_UID) by a regular expression: head is text, and a cast to json would fail on
    # an escaped NUL anywhere in it
    "read_for_save": """
        SELECT version, history_len, last_exchange, substring(head from '"uid":"([^"\\\\]*)"')
        FROM {s}.conversations WHERE id = %s FOR UPDATE""",
    "delete_turns": "DELETE FROM {s}.turns WHERE conversation_id = %s",
    "delete_turns_from": "DELETE FROM {s}.turns WHERE conversation_id = %s AND idx >= %s",
    "append_turns": "INSERT INTO {s}.turns SELECT %s, %s + n - 1, e FROM unnest(%s::text[]) WITH ORDINALITY AS t(e, n)",
    "write": """
        INSERT INTO {s}.conversations (id, version, definition_name, state, status, turns, head, history_len,
            last_exchange, updated_at, history_start) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now(), %s)
        ON CONFLICT (id) DO UPDATE SET version = excluded.version, definition_name = excluded.definition_name,
            state = excluded.state, status = excluded.status, turns = excluded.turns, head = excluded.head,
            history_len = excluded.history_len, last_exchange = excluded.last_exchange, updated_at = now(),
            history_start = excluded.history_start
    """,
    "load": """
        SELECT head, version, extract(epoch FROM updated_at)::float8, history_start,
            ARRAY(SELECT exchange FROM {s}.turns WHERE conversation_id = c.id AND idx >= c.history_start ORDER BY idx)
        FROM {s}.conversations c WHERE id = %s
    """,
    "page": """
        SELECT c.history_len, t.idx, t.exchange FROM {s}.conversations c
        LEFT JOIN LATERAL (
            SELECT idx, exchange FROM {s}.turns WHERE conversation_id = c.id
                AND idx < LEAST(COALESCE(%s::integer, c.history_len), c.history_len)
            ORDER BY idx DESC LIMIT %s
        ) t ON true
        WHERE c.id = %s
    """,
    "delete": "DELETE FROM {s}.conversations WHERE id = %s",
    "drop_lock": "DELETE FROM {s}.locks WHERE id = %s",
    "list": """
        SELECT id, definition_name, state, status, turns, version, extract(epoch FROM updated_at)::float8
        FROM {s}.conversations ORDER BY updated_at DESC
    """,
    # right(), not LIKE: LIKE takes _ for any character
    "ids_ending": "SELECT id FROM {s}.conversations WHERE right(id, %s::integer) = %s",
    "prune": """
        WITH old AS (DELETE FROM {s}.conversations WHERE updated_at < now() - make_interval(secs => %s) RETURNING id),
            old_turns AS (DELETE FROM {s}.turns WHERE conversation_id IN (SELECT id FROM old)),
            old_locks AS (DELETE FROM {s}.locks WHERE id IN (SELECT id FROM old))
        SELECT count(*) FROM old
    """,
    "unlock": "DELETE FROM {s}.locks WHERE id = %s RETURNING expires_at > clock_timestamp()",
    "try_lock": """
        INSERT INTO {s}.locks AS held VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s))
        ON CONFLICT (id) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
        WHERE held.expires_at <= clock_timestamp()
    """,
    "renew": """
        UPDATE {s}.locks SET expires_at = clock_timestamp() + make_interval(secs => %s) WHERE id = %s AND token = %s
    """,
    "release": "DELETE FROM {s}.locks WHERE id = %s AND token = %s",
}

# An operation is a generator of statements: it yields (name, parameters), receives the rows and row
# count of each, and returns its result. One plan serves the sync and the async methods alike.
Rows = tuple[list[tuple[Any, ...]], int]
Plan = Generator[tuple[str, tuple[Any, ...]], Rows, T]


def _split_schema(url: str) -> tuple[str, str | None]:
    """``postgresql://host/db?schema=app`` → the libpq URL and the schema (libpq knows no ``schema``)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


class PostgresStore(Store):
    lease: float

    def __init__(
        self, url: str, *, schema: str | None = None, lease: float = LEASE, pool_size: int = POOL_SIZE
    ) -> None:
        super().__init__()
        self.url = public_url(url)
        self.lease = lease
        conninfo, from_url = _split_schema(url)
        self.schema = schema or from_url or SCHEMA
        if not _SCHEMA_NAME.match(self.schema):
            raise StoreError(
                f"store URL {self.url!r}: schema {self.schema!r} is not a plain name (letters, digits, _; at most 63)"
            )
        try:
            options = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"store URL {self.url!r} is not a PostgreSQL URL: {_first_line(exc)}") from None
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        self._conninfo = psycopg.conninfo.make_conninfo("", **options)
        self._pool_size = pool_size
        self._pool = Pool(self._conninfo, pool_size)
        self._apools: dict[asyncio.AbstractEventLoop, AsyncPool] = {}
        self._guard = threading.Lock()
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as connection:
                self._sql = {name: self._render(connection, text) for name, text in STATEMENTS.items()}
                self._create_tables(connection)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot reach PostgreSQL at {self.url}: {_first_line(exc)}") from None
        except psycopg.Error as exc:
            raise StoreError(f"cannot use PostgreSQL at {self.url}: {_first_line(exc)}") from None

    def _render(self, connection: psycopg.Connection[Any], text: str) -> str:
        return sql.SQL(text).format(s=sql.Identifier(self.schema)).as_string(connection)

    def _create_tables(self, connection: psycopg.Connection[Any]) -> None:
        """Create (or add) what is missing; nothing (and no CREATE right needed) when everything exists."""
        names = [f"{sql.Identifier(self.schema).as_string(connection)}.{table}" for table in TABLES]
        column = "EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'history_start')"
        found = connection.execute(
            "SELECT " + ", ".join(["to_regclass(%s)"] * len(names)) + ", " + column, [*names, names[0]]
        ).fetchone()
        if found is not None and all(found):
            return
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"llm_fsm tables {self.schema}",))
            connection.execute(sql.SQL(DDL).format(s=sql.Identifier(self.schema)))

    # -- the operations, as plans -----------------------------------------------------------------

    def _save(self, cid: str, snapshot: Snapshot, expected: int | None) -> Plan[int]:
        rows, _ = yield "read_for_save", (cid,)
        found, stored_len, stored_last, stored_uid = rows[0] if rows else (0, 0, None, None)
        if expected is not None and expected != found:
            raise conflict(cid, expected, found)
        plan = rows_to_write(cid, stored_len, stored_last, snapshot, self.tail, stored_uid)
        if plan.rewrites:  # the history was rewound (undo) or replaced: rewrite it from there
            yield "delete_turns_from", (cid, plan.first)
        if plan.exchanges:
            yield "append_turns", (cid, plan.first, plan.exchanges)
        yield "write", (cid, found + 1, snapshot.definition_name, snapshot.state, snapshot.status, snapshot.turns,
                        head_json(snapshot, self.tail), plan.length, plan.last, plan.carried)  # fmt: skip
        return int(found) + 1

    def _load(self, cid: str) -> Plan[Record | None]:
        rows, _ = yield "load", (cid,)
        if not rows:
            return None
        head, version, updated_at, start, exchanges = rows[0]
        return Record(cid, assemble(head, exchanges, int(start)), int(version), float(updated_at))

    def _history(self, cid: str, before: int | None, limit: int) -> Plan[Page | None]:
        rows, _ = yield "page", (before, limit, cid)
        if not rows:
            return None
        return page_of([(idx, exchange) for _, idx, exchange in rows if idx is not None], int(rows[0][0]))

    def _delete(self, cid: str) -> Plan[bool]:
        yield "delete_turns", (cid,)
        yield "drop_lock", (cid,)
        _, deleted = yield "delete", (cid,)
        return deleted > 0

    def _list(self) -> Plan[list[Info]]:
        rows, _ = yield "list", ()
        return [Info(*row) for row in rows]

    def _ids_ending(self, suffix: str) -> Plan[list[str]]:
        rows, _ = yield "ids_ending", (len(suffix), suffix)
        return [row[0] for row in rows]

    def _prune(self, older_than: float | timedelta) -> Plan[int]:
        rows, _ = yield "prune", (seconds(older_than),)
        return int(rows[0][0])

    def _unlock(self, cid: str) -> Plan[bool]:
        rows, _ = yield "unlock", (cid,)
        return any(row[0] for row in rows)

    def _take(self, cid: str) -> Plan[str | None]:
        token = uuid.uuid4().hex
        _, taken = yield "try_lock", (cid, token, float(self.lease))
        return token if taken else None

    def _extend(self, cid: str, token: str) -> Plan[bool]:
        _, renewed = yield "renew", (float(self.lease), cid, token)
        return renewed == 1

    def _give_back(self, cid: str, token: str) -> Plan[None]:
        yield "release", (cid, token)

    # -- sync -----------------------------------------------------------------------------------

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        cid = check_id(conversation_id)
        return self._run(lambda: self._save(cid, snapshot, expected_version), transaction=True)

    def load(self, conversation_id: str) -> Record | None:
        return self._run(lambda: self._load(check_id(conversation_id)))

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        cid = check_id(conversation_id)
        check_page(before, limit)
        return self._run(lambda: self._history(cid, before, limit))

    def delete(self, conversation_id: str) -> bool:
        cid = check_id(conversation_id)
        return self._run(lambda: self._delete(cid), transaction=True)

    def list(self) -> list[Info]:
        return self._run(self._list)

    def ids_ending(self, suffix: str) -> builtins.list[str]:
        return self._run(lambda: self._ids_ending(suffix))

    def prune(self, older_than: float | timedelta) -> int:
        return self._run(lambda: self._prune(older_than))

    def unlock(self, conversation_id: str) -> bool:
        return self._run(lambda: self._unlock(check_id(conversation_id)))

    def _try_lock(self, conversation_id: str) -> str | None:
        return self._run(lambda: self._take(conversation_id))

    def _renew(self, conversation_id: str, token: str) -> bool:
        return self._run(lambda: self._extend(conversation_id, token))

    def _release(self, conversation_id: str, token: str) -> None:
        self._run(lambda: self._give_back(conversation_id, token))

    def _run(self, plan: Callable[[], Plan[T]], *, transaction: bool = False) -> T:
        """Carry out a plan on a pooled connection (in one transaction if asked); StoreError if the server fails."""
        for attempt in itertools.count():
            try:
                with self._pool.connection() as connection:
                    scope: AbstractContextManager[Any] = connection.transaction() if transaction else nullcontext()
                    with scope, connection.cursor() as cursor:
                        return _carry_out(plan(), cursor, self._sql)
            except psycopg.errors.UniqueViolation as exc:
                if attempt >= 2:  # two first saves met on the primary key: the loser reads again
                    raise self._failure(exc) from exc
            except (psycopg.Error, PoolBusy) as exc:
                raise self._failure(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _failure(self, exc: Exception) -> StoreError:
        if isinstance(exc, PoolBusy):
            return StoreError(f"PostgreSQL at {self.url}: {exc}")
        return StoreError(f"PostgreSQL at {self.url} failed: {_first_line(exc)}")

    def close(self) -> None:
        self._pool.close()
        with self._guard:  # the connections of event loops that have ended go with them
            self._apools = {loop: pool for loop, pool in self._apools.items() if not loop.is_closed()}

    # -- async (psycopg's AsyncConnection, one pool per event loop) ----------------------------

    async def asave(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        cid = check_id(conversation_id)
        return await self._arun(lambda: self._save(cid, snapshot, expected_version), transaction=True)

    async def ahistory(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        cid = check_id(conversation_id)
        check_page(before, limit)
        return await self._arun(lambda: self._history(cid, before, limit))

    async def aload(self, conversation_id: str) -> Record | None:
        return await self._arun(lambda: self._load(check_id(conversation_id)))

    async def adelete(self, conversation_id: str) -> bool:
        cid = check_id(conversation_id)
        return await self._arun(lambda: self._delete(cid), transaction=True)

    async def alist(self) -> builtins.list[Info]:  # builtins: "list" here is the method above
        return await self._arun(self._list)

    async def aids_ending(self, suffix: str) -> builtins.list[str]:
        return await self._arun(lambda: self._ids_ending(suffix))

    async def aprune(self, older_than: float | timedelta) -> int:
        return await self._arun(lambda: self._prune(older_than))

    async def aunlock(self, conversation_id: str) -> bool:
        return await self._arun(lambda: self._unlock(check_id(conversation_id)))

    async def _atry_lock(self, conversation_id: str) -> str | None:
        return await self._arun(lambda: self._take(conversation_id))

    async def _arenew(self, conversation_id: str, token: str) -> bool:
        return await self._arun(lambda: self._extend(conversation_id, token))

    async def _arelease(self, conversation_id: str, token: str) -> None:
        await self._arun(lambda: self._give_back(conversation_id, token))

    async def _arun(self, plan: Callable[[], Plan[T]], *, transaction: bool = False) -> T:
        for attempt in itertools.count():
            try:
                async with self._async_pool().connection() as connection:
                    if not transaction:
                        async with connection.cursor() as cursor:
                            return await _acarry_out(plan(), cursor, self._sql)
                    async with connection.transaction(), connection.cursor() as cursor:
                        return await _acarry_out(plan(), cursor, self._sql)
            except psycopg.errors.UniqueViolation as exc:
                if attempt >= 2:
                    raise self._failure(exc) from exc
            except (psycopg.Error, PoolBusy) as exc:
                raise self._failure(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _async_pool(self) -> AsyncPool:
        loop = asyncio.get_running_loop()
        pool = self._apools.get(loop)
        if pool is None:
            with self._guard:
                self._apools = {done: p for done, p in self._apools.items() if not done.is_closed()}
                pool = self._apools[loop] = AsyncPool(self._conninfo, self._pool_size)
        return pool

    async def aclose(self) -> None:
        """Close this event loop's connections (the sync ones: :meth:`close`)."""
        with self._guard:
            pool = self._apools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()


def _carry_out(plan: Plan[T], cursor: psycopg.Cursor[Any], statements: dict[str, str]) -> T:
    rows: Rows | None = None
    while True:
        try:
            name, parameters = plan.send(rows)  # type: ignore[arg-type]  # the first send is None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped
        cursor.execute(statements[name], parameters)
        rows = (cursor.fetchall() if cursor.description else [], cursor.rowcount)


async def _acarry_out(plan: Plan[T], cursor: psycopg.AsyncCursor[Any], statements: dict[str, str]) -> T:
    rows: Rows | None = None
    while True:
        try:
            name, parameters = plan.send(rows)  # type: ignore[arg-type]  # the first send is None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]  # StopIteration.value is untyped
        await cursor.execute(statements[name], parameters)
        rows = (await cursor.fetchall() if cursor.description else [], cursor.rowcount)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


__all__ = ["PostgresStore"]
