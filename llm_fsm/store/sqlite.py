"""``sqlite:///path.db``: the default store. WAL mode, one row per conversation, one per turn.

The ``turns`` table is append-only: a save inserts only the exchanges added since the last save,
so saving costs the same at turn 5 and at turn 500, and a load reads the conversation's row and the
turns from its ``history_start`` on (the tail a turn needs, see :func:`~llm_fsm.store.base.carried_from`),
so loading does too; :meth:`SQLiteStore.history` pages through the rest by the primary key. Each
save is one ``BEGIN IMMEDIATE`` transaction that checks the version column first. Locks for a whole
turn are rows of a ``locks`` table: a lease of ``LEASE`` seconds that the holder's heartbeat renews,
so a killed holder blocks its conversation for one lease at most (see :mod:`llm_fsm.store.base`).
Migrations are idempotent: opening a database creates what is missing, and adds the columns an older
version's database lacks.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from llm_fsm.errors import StoreError
from llm_fsm.jsonfiles import private_file, private_folders
from llm_fsm.snapshot import Snapshot
from llm_fsm.store.base import (
    LEASE,
    Info,
    Record,
    Store,
    assemble,
    check_id,
    conflict,
    failures_as_store_errors,
    head_json,
    seconds,
)
from llm_fsm.store.history import Page, check_page, page_of, page_window, rows_to_write

# one statement: insert the lock, or take over a row whose lease ran out (the WHERE); a row changed
# means it is ours, none means another turn holds it
TAKE_LOCK = """
INSERT INTO locks VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at WHERE locks.expires_at <= ?
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    definition_name TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    turns INTEGER NOT NULL,
    head TEXT NOT NULL,
    history_len INTEGER NOT NULL,
    last_exchange TEXT,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations (updated_at);
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    exchange TEXT NOT NULL,
    PRIMARY KEY (conversation_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS locks (
    id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
# Added by history paging: the first turn a load reads. Rows saved before it get 0, so their first load reads the
# whole history, as it did; their next save sets it.
MIGRATION = "ALTER TABLE conversations ADD COLUMN history_start INTEGER NOT NULL DEFAULT 0"
COLUMNS = (
    "id, version, definition_name, state, status, turns, head, history_len, last_exchange, updated_at, history_start"
)


class SQLiteStore(Store):
    lease: float

    def __init__(self, path: str | os.PathLike[str], *, lease: float = LEASE) -> None:
        super().__init__()
        self.path = Path(path)
        self.url = f"sqlite://{self.path.resolve()}"
        self.lease = lease
        self._local = threading.local()
        try:
            private_folders(self.path.parent)
            private_file(self.path)  # SQLite gives its -wal and -shm files the database file's mode
            self._db().executescript(SCHEMA)  # idempotent: creates only what is missing
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc

    def _db(self) -> sqlite3.Connection:
        # One connection per thread: sqlite3 connections must not be shared between threads.
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            # isolation_level=None: no transaction the sqlite3 module begins by itself; they are begun here
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            # FULL: with NORMAL, often set with WAL, a power loss or an OS crash could undo the last saved turns
            db.execute("PRAGMA synchronous=FULL")
            self._local.db = db
        return db

    def _migrate(self) -> None:
        """Add the columns a database made by an older version lacks: idempotent, and safe when several
        processes open one database at once (the check and the change are one write transaction)."""
        with self._transaction() as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(conversations)")}
            if "history_start" not in columns:
                db.execute(MIGRATION)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db()
        # IMMEDIATE takes the write lock at once: a version read here cannot be overtaken by another save
        # before this one writes
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def save(self, conversation_id: str, snapshot: Snapshot, *, expected_version: int | None = None) -> int:
        check_id(conversation_id)
        with self._transaction() as db:
            row = db.execute(
                # the head's uid: a snapshot of another conversation must not be spliced onto its rows
                "SELECT version, history_len, last_exchange, json_extract(head, '$.uid') FROM conversations "
                "WHERE id = ?",
                (conversation_id,),
            ).fetchone()
            found, stored_len, stored_last, stored_uid = row if row else (0, 0, None, None)
            if expected_version is not None and expected_version != found:
                raise conflict(conversation_id, expected_version, found)
            rows = rows_to_write(conversation_id, stored_len, stored_last, snapshot, self.tail, stored_uid)
            if rows.rewrites:  # the history was rewound (undo) or replaced: rewrite it from there
                db.execute("DELETE FROM turns WHERE conversation_id = ? AND idx >= ?", (conversation_id, rows.first))
            db.executemany(
                "INSERT INTO turns VALUES (?, ?, ?)",
                [(conversation_id, rows.first + i, text) for i, text in enumerate(rows.exchanges)],
            )
            db.execute(
                f"INSERT OR REPLACE INTO conversations ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, found + 1, snapshot.definition_name, snapshot.state, snapshot.status,
                 snapshot.turns, head_json(snapshot, self.tail), rows.length, rows.last, time.time(), rows.carried),
            )  # fmt: skip
        return int(found) + 1

    def load(self, conversation_id: str) -> Record | None:
        check_id(conversation_id)
        db = self._db()
        db.execute("BEGIN")  # one read snapshot for both tables
        try:
            row = db.execute(
                "SELECT head, version, updated_at, history_start FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            # the tail only: the primary key (conversation_id, idx) finds it without reading earlier turns
            turns = db.execute(
                "SELECT exchange FROM turns WHERE conversation_id = ? AND idx >= ? ORDER BY idx",
                (conversation_id, row[3] if row else 0),
            ).fetchall()
        finally:
            db.execute("COMMIT")
        if row is None:
            return None
        snapshot = assemble(row[0], [t[0] for t in turns], int(row[3]))
        return Record(conversation_id, snapshot, int(row[1]), float(row[2]))

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None:
        check_id(conversation_id)
        check_page(before, limit)
        db = self._db()
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT history_len FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None:
                return None
            low, high = page_window(before, limit, int(row[0]))
            rows = db.execute(
                "SELECT idx, exchange FROM turns WHERE conversation_id = ? AND idx >= ? AND idx < ?",
                (conversation_id, low, high),
            ).fetchall()
        finally:
            db.execute("COMMIT")
        return page_of(rows, int(row[0]))

    def delete(self, conversation_id: str) -> bool:
        check_id(conversation_id)
        with self._transaction() as db:
            db.execute("DELETE FROM turns WHERE conversation_id = ?", (conversation_id,))
            self._drop_lock(db, conversation_id)
            return db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

    def list(self) -> list[Info]:
        rows = (
            self._db()
            .execute(
                "SELECT id, definition_name, state, status, turns, version, updated_at FROM conversations "
                "ORDER BY updated_at DESC"
            )
            .fetchall()
        )
        return [Info(*row) for row in rows]

    def ids_ending(self, suffix: str) -> builtins.list[str]:  # builtins: "list" is the method above
        # substr, not LIKE: LIKE ignores the case of ASCII letters and takes _ for any character; no ORDER BY,
        # so that the scan reads the index of the ids, not the rows
        query = "SELECT id FROM conversations WHERE substr(id, -?) = ?"
        return [row[0] for row in self._db().execute(query, (len(suffix), suffix)).fetchall()]

    def prune(self, older_than: float | timedelta) -> int:
        cutoff = time.time() - seconds(older_than)
        with self._transaction() as db:
            # the turns and locks first: they are found through the conversations rows, which go last
            for table, column in (("turns", "conversation_id"), ("locks", "id")):
                db.execute(
                    f"DELETE FROM {table} WHERE {column} IN (SELECT id FROM conversations WHERE updated_at < ?)",
                    (cutoff,),
                )
            return int(db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,)).rowcount)

    def unlock(self, conversation_id: str) -> bool:
        check_id(conversation_id)
        with self._transaction() as db:
            return self._drop_lock(db, conversation_id)

    @staticmethod
    def _drop_lock(db: sqlite3.Connection, conversation_id: str) -> bool:
        """Delete the conversation's lock; whether it was held (its lease not yet run out)."""
        row = db.execute("SELECT expires_at FROM locks WHERE id = ?", (conversation_id,)).fetchone()
        db.execute("DELETE FROM locks WHERE id = ?", (conversation_id,))
        return row is not None and row[0] > time.time()

    # Each primitive is one statement (SQLite makes it atomic), guarded by the token where it must be.

    def _try_lock(self, conversation_id: str) -> str | None:
        # wall-clock time, not monotonic: other processes compare the expiry with their own clock
        token, now = uuid.uuid4().hex, time.time()
        taken = self._db().execute(TAKE_LOCK, (conversation_id, token, now + self.lease, now)).rowcount
        return token if taken else None

    def _renew(self, conversation_id: str, token: str) -> bool:
        expires_at = time.time() + self.lease
        renewed = self._db().execute(
            "UPDATE locks SET expires_at = ? WHERE id = ? AND token = ?", (expires_at, conversation_id, token)
        )
        return renewed.rowcount == 1

    def _release(self, conversation_id: str, token: str) -> None:
        self._db().execute("DELETE FROM locks WHERE id = ? AND token = ?", (conversation_id, token))

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


failures_as_store_errors(SQLiteStore, (sqlite3.Error,))  # a file gone bad: StoreError, never sqlite3's own error
