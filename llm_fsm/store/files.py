"""``file:///dir``: one JSON file per conversation, written atomically under a file lock.

Each save writes a temporary file in the same folder, fsyncs it, renames it over the old one and
fsyncs the folder, so a crash at any moment leaves either the previous or the new version, whole.
The file holds the whole history, so a save and a load cost time in proportion to the history's
length (each reads and parses the file; a save writes it all again): fine for the short conversations
of a terminal chat and for tests, not for long ones (use SQLite). A load still returns only the tail a
turn needs, like every store (:func:`~llm_fsm.store.base.bounded`), and a save takes such a snapshot
and keeps the exchanges before its tail from the file.

Turn locks are ``flock`` locks on ``.<id>.lock``: the kernel releases one when its holder's process
dies, however it dies (SIGKILL included), so they need no lease and no heartbeat.
"""

from __future__ import annotations

import builtins
import glob
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from filelock import FileLock, Timeout

from llm_fsm.engine import Snapshot
from llm_fsm.errors import StoreError
from llm_fsm.jsonfiles import private_folders
from llm_fsm.store.base import (
    Info,
    Record,
    Store,
    check_id,
    conflict,
    failures_as_store_errors,
    info_of,
    seconds,
)
from llm_fsm.store.history import Page, bounded, check_page, exchange_json, page_window, rows_to_write

SUFFIX = ".json"


class FileStore(Store):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self._held: dict[str, FileLock] = {}  # token -> the lock a turn of this process holds
        self.url = f"file://{self.directory.resolve()}"
        try:
            private_folders(self.directory)
        except OSError as exc:
            raise StoreError(f"cannot create the store folder {self.directory}: {exc.strerror or exc}") from exc

    def _path(self, conversation_id: str) -> Path:
        return self.directory / f"{check_id(conversation_id)}{SUFFIX}"

    def _write_lock(self, conversation_id: str) -> FileLock:
        # Held only while reading the version and replacing the file (not for a whole turn).
        # "~" is never in an id: conversation "x.write" must not share the turn lock file ".x.write.lock"
        return FileLock(str(self.directory / f".{conversation_id}~write.lock"), thread_local=False, mode=0o600)

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        path = self._path(conversation_id)
        with self._write_lock(conversation_id):
            # the version check and the replace under one lock: two saves that expect the same version
            # cannot both pass
            current = self._read(path)
            found = current.version if current else 0
            if expected_version is not None and expected_version != found:
                raise conflict(conversation_id, expected_version, found)
            whole = self._whole(conversation_id, current.snapshot if current else None, snapshot)
            document = {"version": found + 1, "updated_at": time.time(), "snapshot": whole.model_dump(mode="json")}
            self._replace(path, json.dumps(document, ensure_ascii=False))
        return found + 1

    def _whole(self, conversation_id: str, stored: Snapshot | None, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the whole history: the stored exchanges before the ones it carries, then those."""
        if snapshot.history_start == 0:
            return snapshot
        before = stored.history if stored is not None else ()
        last = exchange_json(before[-1]) if before else None
        uid = stored.uid if stored is not None else None
        # refuses a gap, and another conversation's tail
        rows = rows_to_write(conversation_id, len(before), last, snapshot, self.tail, uid)
        history = (*before[: rows.first], *snapshot.history[rows.first - snapshot.history_start :])
        return snapshot.model_copy(update={"history": history, "history_start": 0})

    def _replace(self, path: Path, text: str) -> None:
        # in the same folder: os.replace is atomic only within one file system
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        folder = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename itself must survive a crash
        finally:
            os.close(folder)

    def load(self, conversation_id: str) -> Record | None:
        record = self._read(self._path(conversation_id))
        if record is None:
            return None
        return Record(record.id, bounded(record.snapshot, self.tail), record.version, record.updated_at)

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        check_page(before, limit)
        record = self._read(self._path(conversation_id))
        if record is None:
            return None
        exchanges = record.snapshot.history
        low, high = page_window(before, limit, len(exchanges))
        return Page(tuple((low + i, e) for i, e in enumerate(exchanges[low:high])), low or None, len(exchanges))

    def _read(self, path: Path) -> Record | None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            snapshot = Snapshot.model_validate(document["snapshot"])
            return Record(path.stem, snapshot, int(document["version"]), float(document["updated_at"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"stored conversation {path} is unreadable: {exc}") from exc

    def delete(self, conversation_id: str) -> bool:
        path = self._path(conversation_id)
        with self._write_lock(conversation_id):
            existed = path.exists()
            path.unlink(missing_ok=True)
        self.unlock(conversation_id)
        return existed

    def _records(self) -> Iterator[Record]:
        for path in self.directory.glob(f"*{SUFFIX}"):
            record = self._read(path)
            if record is not None:
                yield record

    def list(self) -> list[Info]:
        records = sorted(self._records(), key=lambda r: r.updated_at, reverse=True)
        return [info_of(r.id, r.snapshot, r.version, r.updated_at) for r in records]

    def ids_ending(self, suffix: str) -> builtins.list[str]:  # builtins: "list" is the method above
        return [path.stem for path in self.directory.glob(f"*{glob.escape(suffix)}{SUFFIX}")]  # the names only

    def prune(self, older_than: float | timedelta) -> int:
        cutoff = time.time() - seconds(older_than)
        old = [r.id for r in self._records() if r.updated_at < cutoff]
        return sum(self.delete(cid) for cid in old)

    def _lock_file(self, conversation_id: str) -> Path:
        return self.directory / f".{check_id(conversation_id)}.lock"

    def unlock(self, conversation_id: str) -> bool:
        """Remove the lock file: a holder keeps its flock on a file no one opens again, the next turn locks anew."""
        path = self._lock_file(conversation_id)
        if not path.exists():
            return False
        token = self._try_lock(conversation_id)
        if token is not None:  # nobody held it
            self._release(conversation_id, token)
        path.unlink(missing_ok=True)
        return token is None

    def _try_lock(self, conversation_id: str) -> str | None:
        # thread_local=False: the async API takes and gives back a lock in worker threads, not always the
        # same one
        lock = FileLock(str(self._lock_file(conversation_id)), thread_local=False, mode=0o600)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            return None
        token = uuid.uuid4().hex
        self._held[token] = lock
        return token

    def _release(self, conversation_id: str, token: str) -> None:
        self._held.pop(token).release()  # after unlock or delete: of a file no one opens any more, harmless


failures_as_store_errors(FileStore, (OSError,))  # a folder gone or unwritable: StoreError, never a bare OSError
