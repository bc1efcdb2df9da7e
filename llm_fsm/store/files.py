"""``file:///dir``: one JSON file per conversation, written atomically under a file lock.

Each save writes a temporary file in the same folder, fsyncs it, renames it over the old one and
fsyncs the folder, so a crash at any moment leaves either the previous or the new version, whole.
The file holds the whole history, so a save and a load cost time in proportion to the history's
length (each reads and parses the file; a save writes it all again): fine for the short conversations
of a terminal chat and for tests, not for long ones (use SQLite). A load still returns only the tail a
turn needs, like every store (:func:`~llm_fsm.store.base.bounded`), and a save takes such a snapshot
and keeps the exchanges before its tail from the file.

Turn locks are ``flock`` locks on ``.<id>.lock``: the kernel releases one when its holder's process
dies, however it dies (SIGKILL included), so they need no lease and no heartbeat. A save holds
``.<id>~write.lock`` while it writes ``.<id>~save.tmp`` and renames it into place.

Nothing is left behind for good. A save killed between writing its temporary file and renaming it
leaves that file, which the next save of the conversation writes over; opening the store and
``prune`` remove every such file whose conversation no save holds (and the lock files of conversations
that do not exist), and ``delete`` removes the conversation's files with it. Lock files are removed
only under their lock (:mod:`~llm_fsm.store.flocks`), so that removing one never lets two processes
hold it.
"""

from __future__ import annotations

import builtins
import glob
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path

from llm_fsm.errors import StoreError
from llm_fsm.jsonfiles import private_folders
from llm_fsm.snapshot import Snapshot
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
from llm_fsm.store.flocks import Flock
from llm_fsm.store.history import Page, bounded, check_page, exchange_json, page_window, rows_to_write

SUFFIX = ".json"
# "~" is never in an id: conversation "x.write" must not share a file with conversation "x"
WRITE_LOCK = "~write.lock"
TEMPORARY = "~save.tmp"


class FileStore(Store):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self._held: dict[str, Flock] = {}  # token -> the lock a turn of this process holds
        self.url = f"file://{self.directory.resolve()}"
        try:
            private_folders(self.directory)
        except OSError as exc:
            raise StoreError(f"cannot create the store folder {self.directory}: {exc.strerror or exc}") from exc
        self._sweep()

    def _path(self, conversation_id: str) -> Path:
        return self.directory / f"{check_id(conversation_id)}{SUFFIX}"

    def _hidden(self, conversation_id: str, suffix: str) -> Path:
        return self.directory / f".{conversation_id}{suffix}"

    @contextmanager
    def _write_lock(self, conversation_id: str) -> Iterator[Flock]:
        # Held only while reading the version and replacing the file (not for a whole turn).
        lock = Flock(self._hidden(check_id(conversation_id), WRITE_LOCK))
        lock.acquire(blocking=True)
        try:
            yield lock
        finally:
            lock.release()

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
            self._replace(conversation_id, json.dumps(document, ensure_ascii=False))
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

    def _replace(self, conversation_id: str, text: str) -> None:
        """Replace the conversation's file with ``text``, under its write lock."""
        # In the same folder: os.replace is atomic only within one file system. One name per conversation,
        # written over (O_TRUNC): the file a save killed here left is the next save's, never a second one.
        temporary = self._hidden(conversation_id, TEMPORARY)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with os.fdopen(os.open(temporary, flags, 0o600), "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self._path(conversation_id))
        except BaseException:  # SystemExit of a SIGTERM (the CLI's) included
            temporary.unlink(missing_ok=True)
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
        with self._write_lock(conversation_id) as lock:
            existed = path.exists()
            path.unlink(missing_ok=True)
            self._hidden(conversation_id, TEMPORARY).unlink(missing_ok=True)
            lock.remove()  # under the lock: a save waiting for it locks a new file
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
        pruned = sum(self.delete(cid) for cid in old)
        self._sweep()
        return pruned

    def _sweep(self) -> None:
        """Remove what saves and turns that died left: temporary files, and the lock files of conversations that
        do not exist. Each under its conversation's lock, taken only if free: never a file a save under way (in
        any process) is writing, nor the lock of a turn under way."""
        try:
            files = set(os.listdir(self.directory))
        except OSError:
            return
        # (a lock file's suffix, the conversation's id) -> the temporary files that lock guards
        found: dict[tuple[str, str], builtins.list[str]] = {}
        for name in files:
            if (owner := _temporary_owner(name)) is not None:
                found.setdefault((WRITE_LOCK, owner), []).append(name)
            elif name.startswith(".") and name.endswith(".lock"):
                kind = WRITE_LOCK if name.endswith(WRITE_LOCK) else ".lock"
                if f"{name[1 : -len(kind)]}{SUFFIX}" not in files:  # of a conversation that does not exist
                    found.setdefault((kind, name[1 : -len(kind)]), [])
        for (kind, conversation_id), names in found.items():
            if _an_id(conversation_id):
                # a file that cannot be removed now (a folder this process may only read) is left to the next sweep
                with suppress(OSError):
                    self._drop_if_free(Flock(self._hidden(conversation_id, kind)), conversation_id, names)

    def _drop_if_free(self, lock: Flock, conversation_id: str, temporaries: Iterable[str]) -> None:
        """Unless another holder has ``lock``: remove the ``temporaries``, and the lock's file when the
        conversation does not exist."""
        if not lock.acquire(blocking=False):
            return  # a save (or a turn) of it is under way: its files are its own
        try:
            # with the lock held, no save of this conversation is between writing a temporary file and renaming it
            for name in temporaries:
                (self.directory / name).unlink(missing_ok=True)
            if not self._path(conversation_id).exists():
                lock.remove()
        finally:
            lock.release()

    def _lock_file(self, conversation_id: str) -> Path:
        return self._hidden(check_id(conversation_id), ".lock")

    def unlock(self, conversation_id: str) -> bool:
        """Remove the lock file: a holder keeps its flock on a file no one opens again, the next turn locks anew."""
        path = self._lock_file(conversation_id)
        if not path.exists():
            return False
        lock = Flock(path)
        free = lock.acquire(blocking=False)
        path.unlink(missing_ok=True)  # under the lock when it was free, so no turn can take the old file meanwhile
        if free:
            lock.release()
        return not free

    def _try_lock(self, conversation_id: str) -> str | None:
        lock = Flock(self._lock_file(conversation_id))
        if not lock.acquire(blocking=False):
            return None
        token = uuid.uuid4().hex
        self._held[token] = lock
        return token

    def _release(self, conversation_id: str, token: str) -> None:
        self._held.pop(token).release()  # after unlock or delete: of a file no one opens any more, harmless


def _an_id(name: str) -> bool:
    try:
        check_id(name)
    except StoreError:
        return False
    return True


def _temporary_owner(name: str) -> str | None:
    """The conversation whose save writes the temporary file ``name``: ``.<id>~save.tmp``, or ``.<id>.<random>.tmp``
    as earlier versions named them (the random part has no dot). None for another file."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    if name.endswith(TEMPORARY):
        return name[1 : -len(TEMPORARY)]
    owner = name[1 : -len(".tmp")].rpartition(".")[0]
    return owner or None


failures_as_store_errors(FileStore, (OSError,))  # a folder gone or unwritable: StoreError, never a bare OSError
