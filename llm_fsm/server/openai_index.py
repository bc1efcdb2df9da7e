"""Which conversation a chat-completions request continues, found from the messages an unmodified client resends.

An OpenAI client keeps no conversation id: it sends the whole message list on every call. The transcript a
client holds after a turn (its user and assistant messages, system messages left out) is therefore the key:
after each turn the server keeps a *mark*, the conversation's snapshot at that point, stored under a hash of
that transcript (``CLIENT@oai-HASH``, in the server's own store: it survives restarts and every worker sees
it). A request hashes its messages before its last user message and looks the mark up:

- found, and the conversation it was taken from is still at that point: the turn continues that conversation;
- found, and that conversation went on since (the person edited an earlier message, or asked for a
  regeneration): a new conversation is restored from the mark's snapshot and the turn runs there; the
  original stays as it was;
- not found: the longest earlier point of the list that has a mark (a transcript point ends after an
  assistant message; at most :data:`MAX_WALK` are tried) is branched from; none: a new conversation.

A mark's snapshot carries the whole history up to its point (a branch needs all of it), so a conversation of
``n`` turns stores ``n`` marks of up to ``n`` exchanges each; ``llm-fsm conversations prune`` drops old ones
with the conversations. The mark's ``uid`` field holds the id of the conversation it was taken from: a mark
is never run as it is (a branch gets a uid of its own), so the field is free to say where it came from.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_fsm.errors import IdempotencyKeyReused
from llm_fsm.snapshot import KeyedResult, Snapshot
from llm_fsm.store import Store
from llm_fsm.store.clients import client_key
from llm_fsm.values import derived_uid

Said = tuple[str, str]  # (role, text) of one message a client resends: "user" or "assistant"
MAX_WALK = 64  # earlier points tried when a transcript is not found (each one store read)


def points(definition_name: str, transcript: Sequence[Said]) -> list[tuple[int, str]]:
    """``(length, hash)`` of each point a mark may be kept at, longest first: the whole transcript, then each
    prefix ending with an assistant message. The hash chains the messages, so computing them all reads each
    message once; the definition's name starts the chain (two definitions' equal transcripts differ)."""
    digest = hashlib.sha256(f"llm-fsm openai {definition_name}".encode()).digest()
    found = []
    for length, said in enumerate(transcript, 1):
        # each text stripped: a client that trims the messages it keeps still finds its conversation
        role, text = said
        digest = hashlib.sha256(digest + json.dumps([role, text.strip()], ensure_ascii=False).encode()).digest()
        if length == len(transcript) or said[0] == "assistant":
            found.append((length, digest.hex()[:40]))
    return found[::-1]


def mark_id(client: str, digest: str) -> str:
    return client_key(client, f"oai-{digest}")


@dataclass(frozen=True)
class Mark:
    """The conversation ``conversation_id`` at a transcript point: its ``snapshot`` there (whole history)
    and how many of the request's messages the point covers (``length``)."""

    conversation_id: str
    snapshot: Snapshot
    length: int


async def find(store: Store, client: str, definition_name: str, transcript: Sequence[Said]) -> Mark | None:
    """The mark of the longest point of ``transcript`` that has one (see the module's docstring); None: none."""
    if not transcript:
        return None
    for length, digest in points(definition_name, transcript)[:MAX_WALK]:
        record = await store.aload(mark_id(client, digest))
        if record is not None and record.snapshot.definition_name == definition_name:
            return Mark(record.snapshot.uid, record.snapshot, length)
    return None


async def keep(
    store: Store, client: str, definition_name: str, transcript: Sequence[Said], conversation_id: str, whole: Snapshot
) -> None:
    """Keep ``whole`` (a snapshot with its whole history) as the mark of ``transcript``, taken from
    ``conversation_id``. Saved over any mark of the same transcript: the newest conversation there wins."""
    digest = points(definition_name, transcript)[0][1]
    marked = whole.model_copy(update={"uid": conversation_id, "idempotency": ()})
    await store.asave(mark_id(client, digest), marked)


def branch_of(mark: Mark, conversation_id: str) -> Snapshot:
    """The snapshot a branch from ``mark`` starts from: a conversation of its own (its own uid, so its tool
    calls' idempotency keys are not the original's), with no kept answers of the original's requests."""
    return mark.snapshot.model_copy(update={"uid": derived_uid("openai-branch", conversation_id), "idempotency": ()})


def is_id(text: str) -> bool:
    """Whether ``text`` can be a conversation's id (as :func:`new_id` and the native API make them)."""
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def new_id() -> str:
    return secrets.token_hex(16)  # as the native API's: 128 random bits, 32 hex digits


def extended(before: Snapshot, after: Snapshot) -> Snapshot | None:
    """``after`` (a saved snapshot, carrying its history's tail) with its whole history, when ``before`` (whole,
    an earlier point of the same conversation) holds every exchange before that tail; None when it does not."""
    if before.history_start or after.history_start > before.history_len:
        return None
    history = (*before.history[: after.history_start], *after.history)
    return after.model_copy(update={"history": history, "history_start": 0})


async def whole(store: Store, stored_id: str, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with its whole history, the exchanges before its tail read from the store (in a worker
    thread: the pages are read with the store's sync calls)."""
    from llm_fsm.store.history import whole as read_whole

    return await asyncio.to_thread(read_whole, store, stored_id, snapshot)


# -- answers kept for a request sent again ------------------------------------------------------------
# A request sent again after its answer was lost (the SDK's automatic retries, or a client's
# ``Idempotency-Key``) must get that answer, not run the turn again. The answer is kept under a digest of the
# request (its key, or its messages up to the user's last one), in a record of the server's store whose
# snapshot carries it as its one kept answer (history left out: the record only carries the answer). It is
# written after the turn's save: a process that dies between the two leaves a turn a resend runs again.


def answer_id(client: str, digest: str) -> str:
    return client_key(client, f"oai-answer-{digest}")


def asked_digest(definition_name: str, named: str | None, transcript: Sequence[Said], text: str) -> str:
    """The digest of a request's messages up to and with the user's last one, and of the conversation it
    names (None: none)."""
    start = definition_name if named is None else f"{definition_name} {named}"
    return "m" + points(start, [*transcript, ("user", text)])[0][1]


def key_digest(definition_name: str, key: str) -> str:
    return "k" + hashlib.sha256(f"llm-fsm openai key {definition_name} {key}".encode()).hexdigest()[:40]


async def kept_answer(store: Store, client: str, digest: str, fingerprint: str | None) -> dict[str, Any] | None:
    """The answer kept under ``digest``; :class:`IdempotencyKeyReused` when it was kept for another request
    (its ``fingerprint`` differs; None: not compared)."""
    record = await store.aload(answer_id(client, digest))
    if record is None or not record.snapshot.idempotency:
        return None
    kept = record.snapshot.idempotency[-1]
    if None not in (fingerprint, kept.fingerprint) and kept.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            "idempotency key was sent before with another request: send a new request with a new key",
            state=record.snapshot.state,
        )
    return kept.result


async def keep_answer(
    store: Store, client: str, digest: str, fingerprint: str | None, saved: Snapshot, answer: dict[str, Any]
) -> None:
    entry = KeyedResult(key=digest, fingerprint=fingerprint, result=answer)
    carrier = saved.model_copy(update={"history": (), "history_start": 0, "idempotency": (entry,)})
    await store.asave(answer_id(client, digest), carrier)
