"""A request sent again gets the first answer: idempotency keys, kept in the conversation's snapshot.

A client that lost the answer to a turn (its connection broke, the server was killed) cannot tell
whether the turn was saved. Sent again with the same idempotency key, the request gets the saved
turn's result instead of running the turn a second time.

The key and the result are kept in the snapshot itself (``Snapshot.idempotency``), so they are saved
in the very write that saves the turn: a turn that died saved neither, and a turn that was saved has
its key. No store needs a table of its own, and every store (memory, file, SQLite, Redis,
PostgreSQL) keeps them alike, across processes. A separate table would need a second write that a
crash could split from the first.

Each conversation keeps the answers to its last :data:`KEPT` keyed requests (the head of the snapshot
is rewritten on every save, so it must stay bounded); keys are per conversation. A key sent again
with another request (its ``fingerprint`` differs) is refused with :class:`IdempotencyKeyReused`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llm_fsm.errors import IdempotencyKeyReused
from llm_fsm.snapshot import KeyedResult, Snapshot
from llm_fsm.turn.runner import TurnResult

KEPT = 32  # keyed answers a conversation keeps: a retry comes soon, not 32 turns later
MAX_KEY = 255  # characters: a key is a client's UUID or the like, and each is stored with the conversation


def fingerprint(kind: str, payload: Any = None) -> str:
    """What a request asks, as a short digest: ``kind`` (``"send"``, ``"start"``, ``"resume"``...) and its
    JSON ``payload``. Two requests with the same fingerprint are the same request."""
    text = json.dumps([kind, payload], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: a lone surrogate in a request's text must give a digest, not an error
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check_key(key: str) -> str:
    """``key`` if it can be one: a non-empty ``str`` of at most :data:`MAX_KEY` characters (``ValueError`` else)."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
        raise ValueError(f"an idempotency key is a non-empty str of at most {MAX_KEY} characters, not {key!r:.80}")
    return key


def answered(snapshot: Snapshot, key: str, fingerprint: str | None) -> KeyedResult | None:
    """The kept answer to ``key`` (None: not seen, or forgotten); :class:`IdempotencyKeyReused` when the key
    was sent with another request."""
    kept = next((entry for entry in snapshot.idempotency if entry.key == key), None)
    # a fingerprint missing on either side (a caller that gives none) is not compared
    if kept is not None and None not in (kept.fingerprint, fingerprint) and kept.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"idempotency key {key!r:.80} was sent before with another request on this conversation: "
            "send a new request with a new key",
            state=snapshot.state,
        )
    return kept


def remembered(snapshot: Snapshot, key: str, fingerprint: str | None, result: Any) -> Snapshot:
    """``snapshot`` keeping the answer to ``key``: ``result`` if it is a :class:`TurnResult`, else none (a
    conversation created without a turn). The oldest answers go past :data:`KEPT`."""
    data = result.to_dict() if isinstance(result, TurnResult) else None
    return _kept(snapshot, KeyedResult(key=key, fingerprint=fingerprint, result=data))


def begun(snapshot: Snapshot, key: str, fingerprint: str | None) -> Snapshot:
    """``snapshot`` saying that the run of the request with ``key`` began (it is saved between two of the run's
    steps): the request sent again goes on with the run from the stored step rather than take its first step
    again (a message sent twice). The run's last save replaces it with the answer (:func:`remembered`)."""
    return _kept(snapshot, KeyedResult(key=key, fingerprint=fingerprint, begun=True))


def _kept(snapshot: Snapshot, entry: KeyedResult) -> Snapshot:
    key = entry.key
    # one entry per key, the newest last, so that the cut to KEPT drops the oldest
    others = [kept for kept in snapshot.idempotency if kept.key != key]
    return snapshot.model_copy(update={"idempotency": (*others, entry)[-KEPT:]})


def replayed(kept: KeyedResult) -> TurnResult | None:
    """The answer kept for a key, as the first attempt returned it."""
    return None if kept.result is None else TurnResult.from_dict(kept.result)
