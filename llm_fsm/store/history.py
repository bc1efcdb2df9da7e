"""The stored history: what a stored snapshot carries (the tail a turn needs), what a save writes to the
append-only rows, and the pages the rest is read in.

A stored conversation's history lives in its store as one row per exchange, which saves only append to
(or, after an undo, rewrite from the snapshot's first carried exchange on). Its snapshot carries the last
``tail`` exchanges and every exchange still waiting for the running summary (:func:`carried_from`), from
index ``Snapshot.history_start``: so a load, like a save, costs the same at any age of the conversation.
The rest is read a page at a time (``Store.history``), newest page first. Every backend builds on these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from llm_fsm.errors import StoreError
from llm_fsm.snapshot import Exchange, Snapshot

if TYPE_CHECKING:
    from llm_fsm.definition.memory import RunningSummary

# exchanges a loaded snapshot carries (besides any waiting for a summary): the prompt's default window (6) and
# summary batch (4) with room to spare; a store whose conversations use a wider window needs a larger ``tail``
TAIL = 20
MIN_TAIL = 2  # the last two exchanges tell a turn whether the state changed (summaries' on_leave)


def exchange_json(exchange: Exchange) -> str:
    return exchange.model_dump_json()


def frames_bounded(snapshot: Snapshot, tail: int) -> Snapshot:
    """``snapshot`` with each sub-conversation's history bounded as :func:`bounded` bounds the root's. A frame
    has no rows of its own: what it drops is in the root's history (each exchange is added to every level
    below the one that talked, see :mod:`llm_fsm.subflows`), so nothing is lost, and a long sub-conversation
    does not grow the head."""
    if not snapshot.stack:
        return snapshot
    frames = tuple(f.model_copy(update={"snapshot": bounded(f.snapshot, tail)}) for f in snapshot.stack)
    return snapshot.model_copy(update={"stack": frames})


def carried_from(count: int, summary: RunningSummary, tail: int) -> int:
    """The index of the first exchange a stored snapshot carries: the last ``tail`` of ``count``, and every one
    waiting to be folded into the running summary (a pending summary call reads them all)."""
    start = max(count - max(tail, MIN_TAIL), 0)
    if summary.due > summary.through:
        start = min(start, summary.through)
    return start


def bounded(snapshot: Snapshot, tail: int) -> Snapshot:
    """``snapshot`` carrying only the history a turn needs (see :func:`carried_from`); the rest is in the store."""
    snapshot = frames_bounded(snapshot, tail)
    start = carried_from(snapshot.history_len, snapshot.summary, tail)
    if start <= snapshot.history_start:
        return snapshot
    history = snapshot.history[start - snapshot.history_start :]
    return snapshot.model_copy(update={"history": history, "history_start": start})


@dataclass(frozen=True)
class Rows:
    """What a save writes to the history rows: the stored rows from ``first`` on are replaced by ``exchanges``
    (nothing is deleted when ``first`` is the stored length: an append), and the head's new columns."""

    first: int
    exchanges: list[str]
    length: int  # the whole history's length after the save
    last: str | None  # its last exchange (compared by the next save)
    carried: int  # the first index a load reads (carried_from)
    rewrites: bool = False  # True: the rows from ``first`` on are deleted before ``exchanges`` are written


# the stored head's uid, read from its JSON text without parsing it: the head is a Snapshot dumped by pydantic,
# whose uid field comes before any nested object (context, stack), and an unescaped ``"uid":"`` can only be a key,
# so the first match is the conversation's own uid
HEAD_UID = re.compile(r'"uid":"([^"\\]*)"')


def head_uid(head: str | bytes | None) -> str | None:
    """The uid in a stored head's JSON (None: no head, or none in it)."""
    if head is None:
        return None
    text = head.decode() if isinstance(head, bytes) else head
    found = HEAD_UID.search(text)
    return found.group(1) if found else None


def check_same(conversation_id: str, stored_uid: str | None, snapshot: Snapshot) -> None:
    """A snapshot carrying only its history's tail (``history_start`` > 0) continues the conversation stored
    under the id, or is refused: its earlier exchanges are that conversation's rows, and saved over another
    conversation it would splice the other's past to its tail. A stored head without a uid (written by hand)
    cannot tell, and is taken as the same."""
    if snapshot.history_start and stored_uid and stored_uid != snapshot.uid:
        raise StoreError(
            f"conversation {conversation_id!r} holds conversation {stored_uid}, and the snapshot saved over it is "
            f"conversation {snapshot.uid or '(no uid)'} carrying only its history from exchange "
            f"{snapshot.history_start} on: save its whole snapshot (StoredConversation.whole(), or a snapshot "
            "with its whole history) to replace it"
        )


def rows_to_write(
    conversation_id: str,
    stored_len: int,
    stored_last: str | None,
    snapshot: Snapshot,
    tail: int,
    stored_uid: str | None,
) -> Rows:
    """The rows a save writes: the exchanges added since the stored ones, or, when the snapshot's history does
    not extend what is stored (an undo, a replacement), its carried exchanges over the stored ones from its
    ``history_start`` on (the rows before it are that conversation's past and stay). ``stored_uid``: the uid of
    the stored head (None: nothing stored); a tail of another conversation is refused (:func:`check_same`)."""
    check_same(conversation_id, stored_uid, snapshot)
    start, carried = snapshot.history_start, snapshot.history
    length = start + len(carried)
    last = exchange_json(carried[-1]) if carried else None
    keep = carried_from(length, snapshot.summary, tail)
    if stored_uid and stored_uid != snapshot.uid:
        # another conversation's whole history (check_same let only start 0 through): it replaces every row,
        # even when its exchanges happen to extend the stored ones
        return Rows(0, [exchange_json(e) for e in carried], length, last, keep, rewrites=True)
    if start > stored_len:
        raise StoreError(
            f"conversation {conversation_id!r}: the snapshot carries its history from exchange {start} on, and the "
            f"store holds {stored_len} exchanges of it: save a snapshot with the whole history (history_start 0)"
        )
    if stored_len <= length:
        known = stored_len - start  # how many carried exchanges are stored already
        # the last stored exchange must match too: a history cut back (an undo) that grew again to the same
        # length has to be rewritten, not appended to
        if known == 0 or exchange_json(carried[known - 1]) == stored_last:
            return Rows(stored_len, [exchange_json(e) for e in carried[known:]], length, last, keep)
    return Rows(start, [exchange_json(e) for e in carried], length, last, keep, rewrites=True)


@dataclass(frozen=True)
class Page:
    """A page of a stored history, oldest first: ``exchanges`` as (index, exchange) pairs; ``before`` is the
    cursor of the next older page (pass it as ``before=``), None when this page reaches the first exchange."""

    exchanges: tuple[tuple[int, Exchange], ...]
    before: int | None
    total: int  # exchanges in the whole history


MAX_PAGE = 1000


def check_page(before: int | None, limit: int) -> None:
    """``before`` (None, or an exchange index >= 0) and ``limit`` (1 to ``MAX_PAGE``); ValueError otherwise."""
    if before is not None and (isinstance(before, bool) or not isinstance(before, int) or before < 0):
        raise ValueError(f"before must be an exchange index (an integer >= 0), not {before!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}, not {limit!r}")


def page_of(rows: Iterable[tuple[int, str | bytes]], total: int) -> Page:
    """A page from its rows (index, exchange JSON), in any order; :class:`StoreError` if one is damaged."""
    try:
        exchanges = tuple(sorted((int(i), Exchange.model_validate_json(e)) for i, e in rows))
    except ValueError as exc:
        raise StoreError(f"stored conversation is damaged: {exc}") from exc
    first = exchanges[0][0] if exchanges else 0
    return Page(exchanges, first if first > 0 else None, total)


class Paged(Protocol):
    """What :func:`whole` reads: a store's pages (every :class:`~llm_fsm.store.base.Store` has them)."""

    def history(self, conversation_id: str, *, before: int | None = None, limit: int = 50) -> Page | None: ...


def whole(store: Paged, conversation_id: str, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with its whole history: the stored exchanges before the tail it carries, read page by page
    (for what must hold everything: a file written by chat's ``/save``, ``conversations show``)."""
    earlier: list[Exchange] = []
    before: int | None = snapshot.history_start
    while before:
        page = store.history(conversation_id, before=before, limit=MAX_PAGE)
        if page is None:  # deleted meanwhile
            break
        earlier[:0] = [exchange for _, exchange in page.exchanges]
        before = page.before
    if len(earlier) != snapshot.history_start:
        raise StoreError(f"conversation {conversation_id!r}: the store no longer holds its first exchanges")
    return snapshot.model_copy(update={"history": (*earlier, *snapshot.history), "history_start": 0})


def page_window(before: int | None, limit: int, total: int) -> tuple[int, int]:
    """The indices ``[low, high)`` of a page: the ``limit`` exchanges before ``before`` (None: the end)."""
    high = total if before is None else min(before, total)
    return max(high - limit, 0), high
