"""``redis://host:port/db[?prefix=name]``: many stateless workers share conversations through one Redis server.

Per conversation: a hash (version, head, history length, last exchange, where a load starts reading the
history, saved at) and a list of exchanges that each save only appends to, so a save costs the same at
any turn; a load is one script that reads the hash and the list's tail from ``history_start`` on (the
tail a turn needs), so loading does too, and :meth:`RedisStore.history` reads pages with ``LRANGE``. Saves are
optimistic transactions (WATCH/MULTI): a concurrent writer makes the version check fail cleanly.
Turn locks are ``SET NX PX`` keys holding a random token: leases of ``LEASE`` seconds that the
holder's heartbeat renews, released or renewed only by their holder (see :mod:`llm_fsm.store.base`:
a heartbeat rather than a pid check, since workers run on many hosts). The expiry is kept by the
Redis server's clock. The async methods use ``redis.asyncio`` natively.
"""

from __future__ import annotations

import builtins
import time
import uuid
from contextlib import suppress
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from llm_fsm.errors import StoreError
from llm_fsm.snapshot import Snapshot
from llm_fsm.store.base import (
    LEASE,
    Info,
    Record,
    Store,
    assemble,
    check_id,
    failures_as_store_errors,
    head_json,
    public_url,
    seconds,
)
from llm_fsm.store.history import Page, Rows, check_page, head_uid, page_of, rows_to_write

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
# One round trip, atomic (a script runs alone): the hash, and the exchanges from its history_start on (hashes
# saved before history paging have none: the whole list, as they were read then).
LOAD = """
local start = tonumber(redis.call('hget', KEYS[1], 'history_start') or '0')
return {redis.call('hgetall', KEYS[1]), redis.call('lrange', KEYS[2], start, -1)}
"""
# The history's length, the page's first index and its exchanges; nil when no conversation is stored.
PAGE = """
local n = redis.call('hget', KEYS[1], 'history_len')
if not n then return nil end
n = tonumber(n)
local high = n
if ARGV[1] ~= '' then high = math.min(tonumber(ARGV[1]), n) end
local low = math.max(high - tonumber(ARGV[2]), 0)
if high <= low then return {n, low, {}} end
return {n, low, redis.call('lrange', KEYS[2], low, high - 1)}
"""
RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"


def _split_prefix(url: str) -> tuple[str, str | None]:
    """``redis://host/0?prefix=app`` → the server URL and the key prefix (several apps, one server)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    prefix = next((v for k, v in query if k == "prefix"), None)
    rest = urlencode([(k, v) for k, v in query if k != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


class _Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.index = f"{prefix}:index"

    def conversation(self, cid: str) -> str:
        return f"{self.prefix}:c:{cid}"

    def turns(self, cid: str) -> str:
        return f"{self.prefix}:t:{cid}"

    def lock(self, cid: str) -> str:
        return f"{self.prefix}:lock:{cid}"


def _plan(
    cid: str, snapshot: Snapshot, fields: dict[bytes, bytes], expected: int | None, tail: int
) -> tuple[int, Rows]:
    """The new version, and the rows to write."""
    from llm_fsm.store.base import conflict

    found = int(fields.get(b"version", 0))
    if expected is not None and expected != found:
        raise conflict(cid, expected, found)
    last = fields.get(b"last_exchange")
    stored_len = int(fields.get(b"history_len", 0))
    uid = head_uid(fields.get(b"head"))  # of the stored conversation: another's tail is refused
    return found + 1, rows_to_write(cid, stored_len, last.decode() if last else None, snapshot, tail, uid)


def _mapping(snapshot: Snapshot, rows: Rows, version: int, now: float, tail: int) -> dict[str, Any]:
    return {
        "version": version,
        "head": head_json(snapshot, tail),
        "history_len": rows.length,
        "history_start": rows.carried,
        "last_exchange": rows.last or "",
        "updated_at": now,
        "definition_name": snapshot.definition_name,
        "state": snapshot.state,
        "status": snapshot.status,
        "turns": snapshot.turns,
    }


def _info(cid: str, fields: dict[bytes, bytes]) -> Info:
    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode()

    return Info(cid, text("definition_name"), text("state"), text("status"), int(text("turns") or 0),
                int(text("version") or 0), float(text("updated_at") or 0))  # fmt: skip


class RedisStore(Store):
    lease: float

    def __init__(self, url: str, *, prefix: str | None = None, lease: float = LEASE) -> None:
        import redis

        super().__init__()
        self.url = url
        self.lease = lease
        server_url, from_url = _split_prefix(url)
        self.keys = _Keys(prefix or from_url or "llm_fsm")
        self._server_url = server_url
        self._redis = redis
        self.client: Any = redis.Redis.from_url(server_url)
        self._scripts = {name: self.client.register_script(text) for name, text in (("load", LOAD), ("page", PAGE))}
        self._async: Any = None
        self._ascripts: dict[str, Any] = {}
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise StoreError(f"cannot reach Redis at {public_url(url)}: {exc}") from exc

    # -- sync -----------------------------------------------------------------------------------

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        cid = check_id(conversation_id)
        while True:  # until no other save came between our read and our write (WATCH fails then)
            with self.client.pipeline() as pipe, suppress(self._redis.WatchError):
                pipe.watch(self.keys.conversation(cid))
                fields = pipe.hgetall(self.keys.conversation(cid))
                version = self._queue_save(pipe, cid, snapshot, fields, expected_version)
                pipe.execute()
                return version

    def load(self, conversation_id: str) -> Record | None:
        cid = check_id(conversation_id)
        return self._record(cid, self._scripts["load"](keys=self._both(cid)))

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        cid = check_id(conversation_id)
        check_page(before, limit)
        return _page(self._scripts["page"](keys=self._both(cid), args=["" if before is None else before, limit]))

    def delete(self, conversation_id: str) -> bool:
        cid = check_id(conversation_id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.conversation(cid), self.keys.turns(cid))
            pipe.zrem(self.keys.index, cid)
            pipe.delete(self.keys.lock(cid))
            deleted, _, _ = pipe.execute()
        return bool(deleted)

    def list(self) -> list[Info]:
        ids = [i.decode() for i in self.client.zrevrange(self.keys.index, 0, -1)]
        with self.client.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hgetall(self.keys.conversation(cid))
            rows = pipe.execute()
        return [_info(cid, fields) for cid, fields in zip(ids, rows, strict=True) if fields]

    def ids_ending(self, suffix: str) -> builtins.list[str]:
        ids = (i.decode() for i in self.client.zrevrange(self.keys.index, 0, -1))  # the index: ids only
        return [cid for cid in ids if cid.endswith(suffix)]

    def prune(self, older_than: float | timedelta) -> int:
        cutoff = time.time() - seconds(older_than)
        old = [i.decode() for i in self.client.zrangebyscore(self.keys.index, "-inf", f"({cutoff}")]
        return sum(self.delete(cid) for cid in old)

    def unlock(self, conversation_id: str) -> bool:
        return bool(self.client.delete(self.keys.lock(check_id(conversation_id))))

    def _try_lock(self, conversation_id: str) -> str | None:
        token = uuid.uuid4().hex
        taken = self.client.set(self.keys.lock(conversation_id), token, nx=True, px=self._ms())
        return token if taken else None

    def _renew(self, conversation_id: str, token: str) -> bool:
        return bool(self.client.eval(RENEW, 1, self.keys.lock(conversation_id), token, self._ms()))

    def _release(self, conversation_id: str, token: str) -> None:
        self.client.eval(RELEASE, 1, self.keys.lock(conversation_id), token)

    def _ms(self) -> int:
        return max(1, round(self.lease * 1000))

    def close(self) -> None:
        self.client.close()

    # -- async (redis.asyncio) ------------------------------------------------------------------

    def _aclient(self) -> Any:
        if self._async is None:
            import redis.asyncio

            self._async = redis.asyncio.Redis.from_url(self._server_url)
            self._ascripts = {
                name: self._async.register_script(text) for name, text in (("load", LOAD), ("page", PAGE))
            }
        return self._async

    async def asave(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        cid = check_id(conversation_id)
        while True:
            async with self._aclient().pipeline() as pipe:
                with suppress(self._redis.WatchError):
                    await pipe.watch(self.keys.conversation(cid))
                    fields = await pipe.hgetall(self.keys.conversation(cid))
                    version = self._queue_save(pipe, cid, snapshot, fields, expected_version)
                    await pipe.execute()
                    return version

    async def aload(self, conversation_id: str) -> Record | None:
        cid = check_id(conversation_id)
        self._aclient()
        return self._record(cid, await self._ascripts["load"](keys=self._both(cid)))

    async def ahistory(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        cid = check_id(conversation_id)
        check_page(before, limit)
        self._aclient()
        args = ["" if before is None else before, limit]
        return _page(await self._ascripts["page"](keys=self._both(cid), args=args))

    # -- shared by the sync and async forms -----------------------------------------------------

    def _queue_save(
        self, pipe: Any, cid: str, snapshot: Snapshot, fields: dict[bytes, bytes], expected: int | None
    ) -> int:
        """Queue the writes of a save on a watching pipeline; the new version (ConflictError if stale)."""
        version, rows = _plan(cid, snapshot, fields, expected, self.tail)
        now = time.time()
        pipe.multi()
        if rows.rewrites:  # the history was rewound (undo) or replaced: cut the list there
            if rows.first:
                pipe.ltrim(self.keys.turns(cid), 0, rows.first - 1)
            else:
                pipe.delete(self.keys.turns(cid))
        if rows.exchanges:
            pipe.rpush(self.keys.turns(cid), *rows.exchanges)
        pipe.hset(self.keys.conversation(cid), mapping=_mapping(snapshot, rows, version, now, self.tail))
        pipe.zadd(self.keys.index, {cid: now})
        return version

    def _both(self, cid: str) -> builtins.list[str]:
        return [self.keys.conversation(cid), self.keys.turns(cid)]

    def _record(self, cid: str, reply: builtins.list[Any]) -> Record | None:  # "list" here is the method
        flat, exchanges = reply
        fields = dict(zip(flat[::2], flat[1::2], strict=True))  # HGETALL's flat reply, from a script
        if not fields:
            return None
        start = int(fields.get(b"history_start", 0))
        snapshot = assemble(fields[b"head"], exchanges, start)
        return Record(cid, snapshot, int(fields[b"version"]), float(fields[b"updated_at"]))

    async def _atry_lock(self, conversation_id: str) -> str | None:
        token = uuid.uuid4().hex
        taken = await self._aclient().set(self.keys.lock(conversation_id), token, nx=True, px=self._ms())
        return token if taken else None

    async def _arenew(self, conversation_id: str, token: str) -> bool:
        return bool(await self._aclient().eval(RENEW, 1, self.keys.lock(conversation_id), token, self._ms()))

    async def _arelease(self, conversation_id: str, token: str) -> None:
        await self._aclient().eval(RELEASE, 1, self.keys.lock(conversation_id), token)

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None


def _page(reply: Any) -> Page | None:
    """A page from the PAGE script's reply (None: no conversation)."""
    if reply is None:
        return None
    total, low, exchanges = reply
    return page_of(((int(low) + i, e) for i, e in enumerate(exchanges)), int(total))


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis  # this module is imported only when a redis:// store is opened

    return (redis.RedisError,)


failures_as_store_errors(RedisStore, _redis_errors())  # a Redis gone mid-turn: StoreError, never redis' own error
