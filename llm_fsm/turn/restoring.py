"""Restoring a conversation from a snapshot: read it (the model, its dict or its JSON text), and check
that it fits the definition it is to continue on, its sub-conversations included."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import ConversationError
from llm_fsm.jsonfiles import validation_summary
from llm_fsm.snapshot import Snapshot
from llm_fsm.values import derived_uid


def restored(
    value: Snapshot | Mapping[str, Any] | str, definition: FSMDefinition, *, allow_changed: bool, strict: bool
) -> Snapshot:
    """``value`` as a snapshot that runs on ``definition`` from now on (ConversationError if it does not fit;
    its sub-conversations are checked by :func:`~llm_fsm.subflows.stack.check_restore`).

    A snapshot taken on another version of ``definition`` fits when only its prose changed; a change to
    its structure does only with ``allow_changed``; with ``strict``, no change does."""
    snap = with_uid(as_snapshot(value))
    if snap.state not in definition.states:
        raise ConversationError(
            f"snapshot state '{snap.state}' is not in definition '{definition.name}'", state=snap.state
        )
    saved = (snap.definition_hash, snap.definition_outline)
    changes = definition.blocking_changes(*saved, strict=strict, name=snap.definition_name)
    if changes and not allow_changed:
        if snap.definition_name != definition.name:
            message = f"this snapshot was taken with another definition ('{snap.definition_name}'), not "
            message += f"'{definition.name}' (pass allow_changed_definition=True to restore it anyway)"
        else:
            prose_only = strict and not definition.blocking_changes(*saved)
            why = "refused because of strict_definition=True"
            if not prose_only:
                why = "pass allow_changed_definition=True to restore anyway"
            message = f"the definition '{definition.name}' changed since this snapshot was taken: "
            message += f"{'; '.join(changes)} ({why})"
        raise ConversationError(message, state=snap.state)
    if snap.definition_hash != definition.content_hash:  # from now on it runs on this definition
        snap = snap.model_copy(
            update={"definition_hash": definition.content_hash, "definition_outline": definition.outline}
        )
    return snap


def as_snapshot(value: Snapshot | Mapping[str, Any] | str) -> Snapshot:
    if isinstance(value, Snapshot):
        return value
    if not isinstance(value, str | Mapping):
        raise ConversationError(f"not a snapshot: a Snapshot, its dict or its JSON text, not a {type(value).__name__}")
    try:
        if isinstance(value, str):
            return Snapshot.model_validate_json(value)
        return Snapshot.model_validate(dict(value))
    except ValidationError as exc:
        raise ConversationError(f"not a valid snapshot: {validation_summary(exc)}") from None


def with_uid(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with a uid: its own, or (made before uids existed) one derived from its content."""
    # derived from the content, not random: the same old snapshot restored twice gets the same uid,
    # so its tool calls' idempotency keys stay the same
    return snapshot if snapshot.uid else snapshot.model_copy(update={"uid": derived_uid(snapshot.model_dump_json())})
