"""Requests a client may send again: the ``Idempotency-Key`` header of every request that runs a turn.

It follows the IETF httpapi draft on the header: a client sends a new key with each request and the
same key when it sends the request again. The key's answer is kept with the turn in the store (see
:mod:`llm_fsm.store.idempotency`): a request sent again gets it (with ``Idempotent-Replayed: true``);
the key with another request is a 422. A creation's key also names the conversation it makes, since
a creation sent again has no id to send.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response

from llm_fsm.server.errors import APIError
from llm_fsm.store import StoredConversation
from llm_fsm.store.idempotency import MAX_KEY, fingerprint

REPLAYED = "Idempotent-Replayed"  # a response header: "true" when the answer is the one kept for the request's key


def idempotency_key(
    request: Request,
    header: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="Sent again with the same request, the answer the first attempt got, without running the "
            'turn again (a UUID, quoted as the IETF draft writes it, "...", or not).',
        ),
    ] = None,
) -> str | None:
    """The request's idempotency key; 400 when it cannot be one, or when the header comes more than once
    (which of two keys the client meant would be a guess: the first one was taken)."""
    if header is None:
        return None
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise APIError(400, "invalid_request", "the Idempotency-Key header came more than once: send one key")
    key = header.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':  # a structured-field string, as the draft writes it
        key = re.sub(r"\\(.)", r"\1", key[1:-1])
    if not 0 < len(key) <= MAX_KEY or not all(" " <= c <= "~" for c in key):
        raise APIError(
            400, "invalid_request", f"the Idempotency-Key header must be 1-{MAX_KEY} printable ASCII characters"
        )
    return key


Key = Annotated[str | None, Depends(idempotency_key)]


def id_of(key: str) -> str:
    """The id of the conversation a creation with this key makes: the same in every process, so a creation
    sent again finds it (the stored key also names the client: two clients' equal keys make two)."""
    return hashlib.sha256(f"llm-fsm conversation {key}".encode()).hexdigest()[:32]


def asked(text: str | None) -> tuple[str, str | None]:
    """What a turn asks, for its fingerprint: a message and its stream are the same turn."""
    return ("start", None) if text is None else ("send", text)


def keyed(key: str | None, kind: str, payload: Any = None) -> dict[str, Any]:
    """The idempotency arguments of :meth:`StoredConversation.arun` for a request."""
    return {"idempotency_key": key, "fingerprint": fingerprint(kind, payload)}


def mark_replayed(response: Response, stored: StoredConversation) -> None:
    """Say in ``response`` when its answer is a kept one."""
    if stored.replayed:
        response.headers[REPLAYED] = "true"
