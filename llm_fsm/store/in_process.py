"""``memory:``: conversations in a dict of this process, for tests and single-process experiments.

The module is named for where the conversations live (in this process), not for its URL scheme, so
that it is not taken for working memory (:mod:`llm_fsm.memory`).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from llm_fsm.snapshot import Exchange, Snapshot
from llm_fsm.store.base import Info, Record, Store, check_id, conflict, info_of, seconds
from llm_fsm.store.history import Page, check_page, frames_bounded, page_window, rows_to_write


@dataclass
class _Kept:
    """A conversation as this store keeps it: its head (a snapshot without history), every exchange, and what a
    load carries from."""

    head: Snapshot
    exchanges: list[Exchange]
    last: str | None
    carried: int
    version: int
    updated_at: float


class MemoryStore(Store):
    """Turn locks are tokens in a dict: they die with the process, so they need no lease. The history is kept
    whole, as a list that saves append to; a load copies only its tail (see :func:`carried_from`)."""

    shared = False

    def __init__(self) -> None:
        super().__init__()
        self.url = "memory:"
        self._kept: dict[str, _Kept] = {}
        self._guard = threading.Lock()
        self._holders: dict[str, str] = {}  # conversation id -> the token of the turn holding it

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        check_id(conversation_id)
        with self._guard:
            current = self._kept.get(conversation_id)
            found = current.version if current else 0
            if expected_version is not None and expected_version != found:
                raise conflict(conversation_id, expected_version, found)
            stored = current.exchanges if current else []
            last, uid = (current.last, current.head.uid) if current else (None, None)
            rows = rows_to_write(conversation_id, len(stored), last, snapshot, self.tail, uid)
            new = snapshot.history[rows.first - snapshot.history_start :]
            # a new list, never the old one changed: a history page read meanwhile keeps what it read
            exchanges = [*stored[: rows.first], *new] if rows.rewrites else stored + list(new)
            head = frames_bounded(snapshot, self.tail).model_copy(update={"history": (), "history_start": 0})
            self._kept[conversation_id] = _Kept(head, exchanges, rows.last, rows.carried, found + 1, time.time())
            return found + 1

    def load(self, conversation_id: str) -> Record | None:
        kept = self._kept.get(check_id(conversation_id))
        if kept is None:
            return None
        tail = tuple(kept.exchanges[kept.carried :])
        snapshot = kept.head.model_copy(update={"history": tail, "history_start": kept.carried})
        return Record(conversation_id, snapshot, kept.version, kept.updated_at)

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        check_page(before, limit)
        kept = self._kept.get(check_id(conversation_id))
        if kept is None:
            return None
        exchanges = kept.exchanges  # the list a save replaces, never changes: read it once
        low, high = page_window(before, limit, len(exchanges))
        page = tuple((low + i, e) for i, e in enumerate(exchanges[low:high]))
        return Page(page, low if low > 0 else None, len(exchanges))

    def delete(self, conversation_id: str) -> bool:
        with self._guard:
            self._holders.pop(check_id(conversation_id), None)
            return self._kept.pop(conversation_id, None) is not None

    def list(self) -> list[Info]:
        kept = sorted(self._kept.items(), key=lambda item: item[1].updated_at, reverse=True)
        return [info_of(cid, k.head, k.version, k.updated_at) for cid, k in kept]

    def prune(self, older_than: float | timedelta) -> int:
        cutoff = time.time() - seconds(older_than)
        with self._guard:
            old = [cid for cid, k in self._kept.items() if k.updated_at < cutoff]
            for cid in old:
                del self._kept[cid]
                self._holders.pop(cid, None)
        return len(old)

    def unlock(self, conversation_id: str) -> bool:
        with self._guard:
            return self._holders.pop(check_id(conversation_id), None) is not None

    def _try_lock(self, conversation_id: str) -> str | None:
        token = uuid.uuid4().hex
        with self._guard:
            return token if self._holders.setdefault(conversation_id, token) == token else None

    def _release(self, conversation_id: str, token: str) -> None:
        with self._guard:
            if self._holders.get(conversation_id) == token:
                del self._holders[conversation_id]

    # A try and a release touch only a dict: no worker thread for them.

    async def _atry_lock(self, conversation_id: str) -> str | None:
        return self._try_lock(conversation_id)

    async def _arelease(self, conversation_id: str, token: str) -> None:
        self._release(conversation_id, token)
