"""``memory:``: conversations in a dict of this process, for tests and single-process experiments.

The module is named for where the conversations live (in this process), not for its URL scheme, so
that it is not taken for working memory (:mod:`llm_fsm.memory`).
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

from llm_fsm.engine import Snapshot
from llm_fsm.store.base import Info, Record, Store, check_id, conflict, info_of, seconds


class MemoryStore(Store):
    """Turn locks are tokens in a dict: they die with the process, so they need no lease."""

    shared = False

    def __init__(self) -> None:
        super().__init__()
        self.url = "memory:"
        self._records: dict[str, Record] = {}
        self._guard = threading.Lock()
        self._holders: dict[str, str] = {}  # conversation id -> the token of the turn holding it

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        check_id(conversation_id)
        with self._guard:
            current = self._records.get(conversation_id)
            found = current.version if current else 0
            if expected_version is not None and expected_version != found:
                raise conflict(conversation_id, expected_version, found)
            self._records[conversation_id] = Record(conversation_id, snapshot, found + 1, time.time())
            return found + 1

    def load(self, conversation_id: str) -> Record | None:
        return self._records.get(check_id(conversation_id))

    def delete(self, conversation_id: str) -> bool:
        with self._guard:
            self._holders.pop(check_id(conversation_id), None)
            return self._records.pop(conversation_id, None) is not None

    def list(self) -> list[Info]:
        records = sorted(self._records.values(), key=lambda r: r.updated_at, reverse=True)
        return [info_of(r.id, r.snapshot, r.version, r.updated_at) for r in records]

    def prune(self, older_than: float | timedelta) -> int:
        cutoff = time.time() - seconds(older_than)
        with self._guard:
            old = [cid for cid, r in self._records.items() if r.updated_at < cutoff]
            for cid in old:
                del self._records[cid]
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
