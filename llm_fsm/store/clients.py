"""Whose conversation a stored id is: the ids ``llm-fsm serve`` answers with, and the ids it stores them under.

``serve`` keeps client ``CLIENT``'s conversation ``ID`` under the stored id ``CLIENT@ID`` (``local@ID`` when it
runs without tokens), so that another client asking for ``ID`` finds nothing; its answers name the bare ``ID``.
:func:`resolve` finds the stored id a name given in the terminal means, so that ``llm-fsm conversations show ID``,
``run -c ID`` and ``chat -c ID`` work on the conversation ``serve`` answered with: the same stored id, so the
same record and the same turn lock as ``serve``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_fsm.errors import StoreError

if TYPE_CHECKING:
    from llm_fsm.store.base import Store

SEPARATOR = "@"  # never in a client's name (see llm_fsm.server.auth)


def client_key(client: str, conversation_id: str) -> str:
    """Where ``serve`` stores ``client``'s conversation ``conversation_id``."""
    return f"{client}{SEPARATOR}{conversation_id}"


class AmbiguousIdError(StoreError):
    """A bare id that several clients' conversations have: the message lists their stored ids."""

    def __init__(self, name: str, stored_ids: list[str]) -> None:
        self.stored_ids = stored_ids
        listed = ", ".join(stored_ids)
        super().__init__(
            f"conversation {name!r} is ambiguous: {len(stored_ids)} clients of llm-fsm serve have one by that id "
            f"({listed}); name the one you mean as CLIENT@ID, e.g. {stored_ids[0]}"
        )


def resolve(store: Store, name: str) -> str:
    """The stored id ``name`` means.

    ``name`` itself when a conversation is stored under it, or when it names a client (``CLIENT@ID``: exactly
    that one, stored or not); else the one ``CLIENT@name`` stored (a conversation ``serve`` made); else ``name``
    (nothing is stored under it: a new conversation). :class:`AmbiguousIdError` when several clients have a
    conversation ``name``: picking one, or starting an empty one, would not be the conversation meant.
    """
    if SEPARATOR in name or store.load(name) is not None:
        return name
    held = [stored for stored in store.ids_ending(SEPARATOR + name) if _is_clients(stored, name)]
    if len(held) > 1:
        raise AmbiguousIdError(name, sorted(held))
    return held[0] if held else name


def client_of(stored_id: str) -> str | None:
    """The client whose conversation ``stored_id`` is (``alice`` for ``alice@ID``); None for a bare id."""
    client, separator, _ = stored_id.partition(SEPARATOR)
    return client if separator else None


def _is_clients(stored_id: str, name: str) -> bool:
    """Whether ``stored_id`` is ``CLIENT@name`` (and not ``CLIENT@OTHER@name``, another id of the client's)."""
    client = stored_id[: -len(name) - len(SEPARATOR)]
    return bool(client) and SEPARATOR not in client and stored_id == client_key(client, name)


__all__ = ["SEPARATOR", "AmbiguousIdError", "client_key", "client_of", "resolve"]
